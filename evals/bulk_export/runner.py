"""Running one export job on a worker (``evals.tasks.run_export`` calls ``export_run``).

The job is claimed with a conditional update (queued, or running with a heartbeat older
than ``EXPORT_STALE_SECONDS``: its worker died and the broker delivered the task again),
so two deliveries never run it at once and a redelivered task resumes a dead worker's
job from the start (files are rewritten in place, so running twice is harmless). The
kind's ``run`` reports rows, files and log lines; each report is one UPDATE, committed
at once so the page and the API show live progress, and each also checks for a cancel.
Any failure ends the job as failed with its reason; nothing is raised to Celery.
"""

from __future__ import annotations

import logging
from datetime import timedelta

from django.conf import settings
from django.db.models import Q, Value
from django.db.models.functions import Concat
from django.utils import timezone

from evals.bulk_export.errors import ExportCancelled, ExportFailed
from evals.bulk_export.kinds import EXPORT_KINDS, Progress
from evals.models import ExportJob

logger = logging.getLogger(__name__)


class JobProgress(Progress):
    def __init__(self, job: ExportJob, worker: str):
        self.job = job
        self.worker = worker
        self.mine = ExportJob.objects.filter(pk=job.pk, status=ExportJob.Status.RUNNING, worker=worker)

    def _update(self, **fields) -> None:
        updated = self.mine.update(heartbeat_at=timezone.now(), **fields)
        if not updated:
            raise ExportCancelled("the export was taken over or ended elsewhere")
        if ExportJob.objects.filter(pk=self.job.pk, cancel_requested=True).exists():
            raise ExportCancelled("cancelled")

    def log(self, line: str) -> None:
        stamp = timezone.now().strftime("%H:%M:%S")
        self._update(log=Concat("log", Value(f"{stamp} {line}\n")))

    def rows(self, table: str, rows: int) -> None:
        self.job.progress[table] = rows
        self._update(progress=self.job.progress)

    def file(self, entry: dict) -> None:
        self.job.files.append(entry)
        self._update(files=self.job.files)


def export_run(*, export_id: int, worker: str = "") -> str | None:
    """Run the export if it is waiting (or its worker died); returns its final status,
    or None when there was nothing to run."""
    now = timezone.now()
    worker = worker or "worker"
    stale = now - timedelta(seconds=settings.EXPORT_STALE_SECONDS)
    claimed = (
        ExportJob.objects.filter(pk=export_id)
        .filter(
            Q(status=ExportJob.Status.QUEUED)
            | Q(status=ExportJob.Status.RUNNING, heartbeat_at__lt=stale, cancel_requested=False)
        )
        .update(
            status=ExportJob.Status.RUNNING,
            started_at=now,
            heartbeat_at=now,
            worker=worker,
            progress={},
            files=[],
            error="",
        )
    )
    if not claimed:
        return None  # another worker runs it, or it has ended
    job = ExportJob.objects.select_related("project", "destination").get(pk=export_id)
    progress = JobProgress(job, worker)
    status, error = ExportJob.Status.SUCCEEDED, ""
    try:
        if job.destination is None:
            raise ExportFailed("the destination was deleted")
        progress.log(f"attempt {job.attempt} started on {worker}")
        EXPORT_KINDS[job.kind].run(job, progress)
    except ExportCancelled as exc:
        status, error = ExportJob.Status.CANCELLED, str(exc)
    except ExportFailed as exc:
        status, error = ExportJob.Status.FAILED, str(exc)
    except Exception as exc:  # noqa: BLE001 - the reason is recorded on the job, never a crash loop
        logger.exception("export %s failed", export_id)
        status, error = ExportJob.Status.FAILED, f"unexpected error: {type(exc).__name__}: {exc}"[:2000]
    line = f"{timezone.now():%H:%M:%S} {status}{': ' + error if error else ''}\n"
    ExportJob.objects.filter(pk=export_id, worker=worker, status=ExportJob.Status.RUNNING).update(
        status=status, error=error, ended_at=timezone.now(), heartbeat_at=timezone.now(), log=Concat("log", Value(line))
    )
    return status
