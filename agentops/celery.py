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


@signals.celeryd_after_setup.connect
def _settle_heap(**kwargs) -> None:
    """Once a `celery worker` has loaded Django and the tasks, and before its pool
    starts (a prefork pool's children inherit it and share the frozen pages): see
    agentops.heap. Inside tasks the collector's share is small (bench/experiment_500.py:
    0.48 -> 0.20 ms of an item's 60 ms), but a worker's oldest generation is larger than
    a web process's, and each full collection would walk it all. Only the command's
    worker sends this signal, not the in-process worker of the tests."""
    from agentops.heap import settle_heap

    settle_heap()
