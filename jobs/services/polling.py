"""The poller: ``job_poll`` (Celery: jobs.tasks.poll_job) moves one job one step. A job's
life, all of it in PostgreSQL (a worker restart loses nothing):

    queued -> submitted -> running -> succeeded | failed | cancelled | lost

One step submits a queued job (with its secrets, and for an evaluation job its token,
in the environment), or asks the backend for a submitted/running job's status, new log
lines and GPU samples; it writes what changed, announces it to open pages
(``jobs.live``), and says when to look again (1 s after a change, backing off to 30 s
while nothing happens). A cancel asked for (``submission.job_cancel``) is carried out
here; a job the backend no longer knows for three polls in a row is ``lost``; one past
its time limit is cancelled and failed. When a job ends, its duration × the hourly rate
of its hardware goes to the billing ledger, its token stops working, and an evaluation
job's experiment is closed (``tokens.close_experiment``). ``due_job_ids`` is what the
sweeper (jobs.tasks.sweep_jobs) polls again when a poll was lost.
"""

from __future__ import annotations

import logging
import uuid
from datetime import UTC, datetime, timedelta
from pathlib import Path

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentops import crypto
from agentops.jsonsafe import storable_lossy
from agentops.scoping import dangerously_unscoped
from billing.ledger import compute_usage_record
from jobs import hardware as catalog
from jobs.backends import BackendError, JobNotFound, JobSpec, backend_for
from jobs.live import announce_job, announce_log_lines
from jobs.models import Job, JobEvent, JobLogLine, JobMetric, JobSecret
from jobs.services.tokens import close_experiment, new_token

logger = logging.getLogger(__name__)

LOST_AFTER_MISSES = 3
MAX_FAILED_POLLS = 8
MIN_POLL_SECONDS = 1.0
MAX_POLL_SECONDS = 30.0
MAX_LINE_CHARS = 8000
# An evaluation job with no command runs the platform's runner (jobs/runner.py, standard
# library only), sent inside the command itself: any image with Python 3 will do.
RUNNER_SOURCE = (Path(__file__).resolve().parent.parent / "runner.py").read_text()
# Backend states -> job statuses.
ENDING = {"succeeded": Job.Status.SUCCEEDED, "failed": Job.Status.FAILED, "cancelled": Job.Status.CANCELLED}


def job_poll(*, job_id: int, token: str | None = None) -> tuple[float, str] | None:
    """Move one job forward; return (seconds until the next look, the token that next
    look must carry), or None when it has ended, another worker holds it, or ``token``
    belongs to a chain of polls that a newer one replaced (so chains never pile up: a
    cancel or the sweeper starts a new chain with no token, and the old one stops)."""
    with transaction.atomic():
        job = (
            Job.objects.select_for_update(skip_locked=True, of=("self",))
            .select_related("backend", "project__organization", "experiment")
            .filter(pk=job_id)
            .first()
        )
        if job is None or job.ended:
            return None
        if token is not None and token != job.poll_token:
            return None
        if job.status == Job.Status.QUEUED:
            interval = _submit(job)
        else:
            interval = _watch(job)
        job.poll_token = uuid.uuid4().hex if interval is not None else ""
        if interval is not None:
            job.poll_interval_seconds = interval
            job.next_poll_at = timezone.now() + timedelta(seconds=interval)
        job.updated_at = timezone.now()
        job.save()
    return (interval, job.poll_token) if interval is not None else None


def _transition(job: Job, status: str, message: str = "", *, at: datetime | None = None) -> None:
    """Record a status change (the timeline) and announce it."""
    job.status = status
    JobEvent.objects.create(
        organization_id=job.organization_id,
        project_id=job.project_id,
        job=job,
        status=status,
        message=storable_lossy(message[:2000]),
        at=at or timezone.now(),
    )
    transaction.on_commit(lambda: _announce(job.pk))


def _spec(job: Job, token: str | None) -> JobSpec:
    env = dict(job.env)
    for secret in JobSecret.objects.filter(organization_id=job.organization_id, name__in=job.secret_names):
        env[secret.name] = crypto.decrypt(secret.value_ciphertext)
    if token is not None:
        env.update(
            {
                "AGENTOPS_URL": settings.JOBS_CALLBACK_URL,
                "AGENTOPS_JOB_ID": str(job.pk),
                "AGENTOPS_JOB_TOKEN": token,
            }
        )
    return JobSpec(
        job_id=job.pk,
        name=job.name,
        image=job.image,
        command=list(job.command) or runner_command(),
        env=env,
        hardware=job.hardware,
        time_limit_seconds=job.time_limit_seconds,
        labels={"agentops-job": str(job.pk), "agentops-project": job.project.slug},
    )


def runner_command() -> list[str]:
    """The built-in evaluation runner as a command: ``python3`` of the image, or of the
    local host's PATH (a local job runs as its own user, who may not reach the worker's
    Python)."""
    return ["python3", "-c", RUNNER_SOURCE]


def _submit(job: Job) -> float | None:
    if job.cancel_requested:
        _end(job, Job.Status.CANCELLED, "cancelled before it was submitted")
        return None
    token = new_token(job) if job.kind == Job.Kind.EVALUATION else None
    try:
        job.external_id = backend_for(job.backend).submit(_spec(job, token))[:300]
    except BackendError as exc:
        if exc.retryable and job.missing_polls < 5:
            job.missing_polls += 1
            return min(MAX_POLL_SECONDS, 2.0**job.missing_polls)
        _end(job, Job.Status.FAILED, f"the backend refused the job: {exc.message}")
        return None
    except Exception as exc:  # noqa: BLE001 - a backend bug must not leave the job queued forever
        logger.exception("job %s: submit failed", job.pk)
        _end(job, Job.Status.FAILED, f"submitting failed: {type(exc).__name__}")
        return None
    job.missing_polls = 0
    job.submitted_at = timezone.now()
    _transition(job, Job.Status.SUBMITTED, f"submitted to {job.backend.name} as {job.external_id}", at=job.submitted_at)
    return MIN_POLL_SECONDS


def _watch(job: Job) -> float | None:
    try:
        return _watch_backend(job, backend_for(job.backend))
    except Exception as exc:  # noqa: BLE001 - a backend bug must not leave the job polled forever
        job.failed_polls += 1
        logger.warning("job %s: poll %s failed", job.pk, job.failed_polls, exc_info=True)
        if job.failed_polls >= MAX_FAILED_POLLS:
            _end(job, Job.Status.FAILED, f"the backend failed {job.failed_polls} times in a row: {type(exc).__name__}")
            return None
        return min(MAX_POLL_SECONDS, 2.0**job.failed_polls)


def _watch_backend(job: Job, backend) -> float | None:
    if job.cancel_requested:
        try:
            backend.cancel(job.external_id)
        except BackendError as exc:
            job.failed_polls += 1
            if job.failed_polls < MAX_FAILED_POLLS:
                logger.warning("job %s: cancel failed, trying again: %s", job.pk, exc.message)
                return min(MAX_POLL_SECONDS, 2.0**job.failed_polls)
            _collect_logs(job, backend)
            _end(job, Job.Status.CANCELLED, f"cancel failed {job.failed_polls} times ({exc.message}): it may still run")
            return None
        _collect_logs(job, backend)
        _end(job, Job.Status.CANCELLED, "cancelled")
        return None
    try:
        remote = backend.status(job.external_id)
    except JobNotFound as exc:
        job.missing_polls += 1
        if job.missing_polls >= LOST_AFTER_MISSES:
            _end(job, Job.Status.LOST, f"the backend no longer knows the job: {exc.message}")
            return None
        return MIN_POLL_SECONDS * 2
    except BackendError as exc:
        job.failed_polls += 1
        logger.warning("job %s: status failed: %s", job.pk, exc.message)
        if job.failed_polls >= MAX_FAILED_POLLS:
            _end(job, Job.Status.FAILED, f"the backend failed {job.failed_polls} times in a row: {exc.message}")
            return None
        return min(MAX_POLL_SECONDS, max(job.poll_interval_seconds * 2, 2.0))
    job.missing_polls = job.failed_polls = 0
    changed = _collect_logs(job, backend)
    _store_gpu_samples(job, remote.gpu_samples)
    if remote.state == "running" and job.status != Job.Status.RUNNING:
        job.started_at = _when(remote.started_at) or timezone.now()
        _transition(job, Job.Status.RUNNING, "running")
        changed = True
    if remote.state in ENDING:
        if job.started_at is None and remote.started_at:
            # It ran and ended between two polls: the timeline still says it ran.
            job.started_at = _when(remote.started_at)
            _transition(job, Job.Status.RUNNING, "running", at=max(job.started_at, job.submitted_at or job.started_at))
        job.exit_code = remote.exit_code
        message = remote.message or (f"exit code {remote.exit_code}" if remote.exit_code is not None else remote.state)
        _end(job, ENDING[remote.state], message, ended_at=_when(remote.ended_at))
        return None
    waited_since = job.started_at or job.submitted_at
    if waited_since is not None and (timezone.now() - waited_since).total_seconds() > job.time_limit_seconds:
        try:
            backend.cancel(job.external_id)
        except BackendError as exc:
            logger.warning("job %s: cancel at the time limit failed: %s", job.pk, exc.message)
        reason = "was reached" if job.started_at else "passed before the backend started it"
        _end(job, Job.Status.FAILED, f"the time limit of {job.time_limit_seconds} s {reason}")
        return None
    if changed:
        return MIN_POLL_SECONDS
    return min(MAX_POLL_SECONDS, max(MIN_POLL_SECONDS, job.poll_interval_seconds * 1.5))


def _when(epoch: float | None) -> datetime | None:
    return datetime.fromtimestamp(epoch, tz=UTC) if epoch else None


def _collect_logs(job: Job, backend) -> bool:
    try:
        chunk = backend.logs(job.external_id, dict(job.log_cursor or {}))
    except BackendError as exc:
        logger.info("job %s: no logs this time: %s", job.pk, exc.message)
        return False
    if not chunk.lines:
        job.log_cursor = chunk.cursor
        return False
    now = timezone.now()
    first = job.log_line_count + 1
    JobLogLine.objects.bulk_create(
        [
            JobLogLine(
                organization_id=job.organization_id,
                project_id=job.project_id,
                job=job,
                number=first + index,
                text=storable_lossy(line[:MAX_LINE_CHARS]),
                at=now,
            )
            for index, line in enumerate(chunk.lines)
        ]
    )
    job.log_line_count += len(chunk.lines)
    job.log_cursor = chunk.cursor
    numbers = (first, job.log_line_count)
    transaction.on_commit(lambda: _announce_lines(job.pk, *numbers))
    return True


def _store_gpu_samples(job: Job, samples: list[dict]) -> None:
    if not samples:
        return
    JobMetric.objects.bulk_create(
        [
            JobMetric(
                organization_id=job.organization_id,
                project_id=job.project_id,
                job=job,
                at=_when(sample.get("at")) or timezone.now(),
                gpu_index=int(sample.get("gpu_index") or 0),
                utilization_percent=sample.get("utilization_percent"),
                memory_used_mib=sample.get("memory_used_mib"),
                memory_total_mib=sample.get("memory_total_mib"),
            )
            for sample in samples
        ]
    )


def _end(job: Job, status: str, message: str, *, ended_at: datetime | None = None) -> None:
    """End the job: its timeline, its cost in the ledger, its token, its experiment."""
    job.ended_at = ended_at or timezone.now()
    if job.started_at is not None and job.ended_at < job.started_at:
        job.ended_at = job.started_at
    if status != Job.Status.SUCCEEDED and not job.error:
        job.error = storable_lossy(message[:5000])
    job.token_expires_at = job.ended_at if job.token_hash else job.token_expires_at
    job.next_poll_at = None
    _transition(job, status, message)
    if job.started_at is not None:
        _charge(job)
    if job.experiment_id is not None:
        transaction.on_commit(lambda: close_experiment(job.pk))


def _charge(job: Job) -> None:
    """Duration × the hourly rate in effect when the job started, into the ledger (a
    hardware with no price: its time is recorded as unpriced, and the job's cost is
    unknown rather than zero)."""
    price = catalog.hourly_rate(
        hardware=job.hardware, backend_kind=job.backend_kind, organization_id=job.organization_id, at=job.started_at
    )
    if price is None or price.hourly is None:  # recorded as unpriced time, never a silent zero
        price = None
    cost = compute_usage_record(
        organization_id=job.organization_id,
        project_id=job.project_id,
        job_id=job.pk,
        started_at=job.started_at,
        ended_at=job.ended_at,
        hardware=job.hardware,
        backend=job.backend_kind,
        hourly=price.hourly if price else None,
        price_id=price.id if price else None,
        api_key_id=job.api_key_id,
    )
    job.cost, job.price_id = (cost, price.id) if price else (None, None)


def due_job_ids(*, overdue_seconds: float = 0) -> list[tuple[int, int]]:
    """(organization id, job id) of unfinished jobs whose next look is due (across
    organizations), for the sweeper that makes sure no job is forgotten."""
    cutoff = timezone.now() - timedelta(seconds=overdue_seconds)
    with dangerously_unscoped("the job sweeper looks at every organization's unfinished jobs"):
        return list(
            Job.objects.filter(
                status__in=(Job.Status.QUEUED, Job.Status.SUBMITTED, Job.Status.RUNNING), next_poll_at__lte=cutoff
            )
            .order_by("next_poll_at")
            .values_list("organization_id", "id")[:1000]
        )


def _announce(job_id: int) -> None:
    announce_job(job_id=job_id)


def _announce_lines(job_id: int, first: int, last: int) -> None:
    announce_log_lines(job_id=job_id, first=first, last=last)
