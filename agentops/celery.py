"""The Celery application: Redis broker, late acks, bounded retries, beat schedule."""

import os

from celery import Celery, Task, signals

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")


class PlatformTask(Task):
    """Default task class: late acks and bounded retries with backoff and jitter.

    Tasks must be idempotent: with acks_late a task whose worker dies is delivered
    again. Tasks that raise one of ``autoretry_for`` are retried at most
    ``max_retries`` times, then the failure is recorded by the task itself.
    """

    acks_late = True
    reject_on_worker_lost = True
    max_retries = 5
    retry_backoff = True
    retry_backoff_max = 300
    retry_jitter = True


app = Celery("agentops", task_cls=PlatformTask)
app.config_from_object("django.conf:settings", namespace="CELERY")
app.autodiscover_tasks()


@signals.worker_init.connect
@signals.beat_init.connect
def _check_services(**kwargs) -> None:
    from agentops.bootstrap import check_external_services

    check_external_services("celery")
