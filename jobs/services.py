"""GPU jobs: backends and secrets an organization configures, submitting a job (with its
cost estimate and the budget check), the poller that moves a job through its statuses,
cancelling, and the job-scoped token an evaluation job reports its results with.

A job's life, all of it in PostgreSQL (a worker restart loses nothing):

    queued -> submitted -> running -> succeeded | failed | cancelled | lost

``job_poll`` (Celery: jobs.tasks.poll_job) does one step: submit a queued job, or ask the
backend for a submitted/running job's status, new log lines and GPU samples; it writes
what changed, announces it to open pages, and says when to look again (1 s after a
change, backing off to 30 s while nothing happens). A job the backend no longer knows
for three polls in a row is ``lost``. When a job ends, its duration × the hourly rate
of its hardware goes to the billing ledger, its token stops working, and an evaluation
job's experiment is completed from the results it reported.
"""

from __future__ import annotations

import hashlib
import json
import logging
import re
import secrets
import uuid
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from pathlib import Path

from django.db import transaction
from django.utils import timezone

from agentops import crypto
from agentops.destinations import check_credential_destination
from agentops.errors import Conflict, Forbidden, InvalidRequest, NotFound
from agentops.jsonsafe import storable_lossy, storage_problem
from agentops.services.audit import audit_record
from billing.budgets import check_work_allowed
from jobs import hardware as catalog
from jobs.backends import BackendError, JobNotFound, JobSpec, backend_class, backend_for
from jobs.models import ComputeBackend, Job, JobEvent, JobLogLine, JobMetric, JobSecret
from jobs.tasks import poll_job

logger = logging.getLogger(__name__)

MIN_TIME_LIMIT = 60
MAX_TIME_LIMIT = 7 * 24 * 3600
LOST_AFTER_MISSES = 3
MAX_FAILED_POLLS = 8
MIN_POLL_SECONDS = 1.0
MAX_POLL_SECONDS = 30.0
TOKEN_PREFIX = "aoj_"
MAX_LINE_CHARS = 8000
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RESERVED_ENV_PREFIX = "AGENTOPS_"
# An evaluation job with no command runs the platform's runner (jobs/runner.py, standard
# library only), sent inside the command itself: any image with Python 3 will do.
RUNNER_SOURCE = (Path(__file__).resolve().parent / "runner.py").read_text()
MONEY_QUANTUM = Decimal("0.000000001")
# Backend states -> job statuses.
ENDING = {"succeeded": Job.Status.SUCCEEDED, "failed": Job.Status.FAILED, "cancelled": Job.Status.CANCELLED}


# -- backends and secrets -----------------------------------------------------------------


def _implementation(kind: str):
    """The backend class of ``kind`` (its static ``validate`` and ``hardware_map``)."""
    try:
        return backend_class(kind)
    except BackendError as exc:
        raise InvalidRequest(exc.message) from None


def _check_allowed(kind: str) -> None:
    """Whether jobs may run on a backend of ``kind`` on this installation."""
    from django.conf import settings

    if kind == ComputeBackend.Kind.LOCAL and not settings.JOBS_LOCAL_BACKEND:
        raise InvalidRequest(
            "the local backend is turned off on this installation (JOBS_LOCAL_BACKEND=false); "
            "the operator turns it on (it is on by default only with DEBUG)"
        )


def _check_may_configure(kind: str, actor) -> None:
    """A local backend runs commands on the platform's own host: only platform staff
    (or the platform itself: ``actor`` None, as in management commands) add or change
    one, and only where the installation allows it."""
    _check_allowed(kind)
    if kind != ComputeBackend.Kind.LOCAL or actor is None:
        return
    if not (getattr(actor, "is_staff", False) or getattr(actor, "is_superuser", False)):
        raise Forbidden(
            "only platform staff may add or change a local backend: it runs commands on the platform's own host"
        )


def offered_hardware(backend: ComputeBackend) -> list[str]:
    """The catalog hardware ``backend`` offers, in catalog order (a local backend: what
    its host has)."""
    offered = backend_for(backend).hardware_map
    return [name for name in catalog.CATALOG if name in offered]


def _not_offered(backend: ComputeBackend, hardware: str, offered: list[str]) -> str:
    return (
        f"backend {backend.name!r} ({backend.kind}) does not offer {hardware}; "
        f"it offers: {', '.join(offered) or 'nothing'}"
    )


def _check_storable(config, credentials) -> None:
    for what, value in (("config", config), ("credentials", credentials)):
        if problem := storage_problem(value):
            raise InvalidRequest(f"the {what} cannot be stored: {problem}")


def backend_create(*, organization, actor, name: str, kind: str, config=None, credentials=None, ip=None):
    """Add a compute backend to the organization; credentials are encrypted and never
    shown again."""
    name = (name or "").strip()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}", name):
        raise InvalidRequest("name the backend with 1 to 64 letters, digits, spaces, dots, dashes or underscores")
    if kind not in ComputeBackend.Kind.values:
        raise InvalidRequest(f"kind must be one of {', '.join(ComputeBackend.Kind.values)}")
    _check_may_configure(kind, actor)
    _check_storable(config, credentials)
    config, credentials = _implementation(kind).validate(dict(config or {}), dict(credentials or {}))
    if ComputeBackend.objects.filter(organization=organization, name=name).exists():
        raise Conflict(f"a backend named {name!r} already exists")
    with transaction.atomic():
        backend = ComputeBackend.objects.create(
            organization=organization,
            name=name,
            kind=kind,
            config=config,
            credentials_ciphertext=crypto.encrypt(json.dumps(credentials)) if credentials else "",
            credentials_hint=", ".join(sorted(credentials)) if credentials else "",
            created_by=actor if getattr(actor, "pk", None) else None,
        )
        audit_record(
            organization=organization,
            actor=actor,
            action="compute_backend.create",
            target=backend,
            data={"kind": kind, "config": config},
            ip=ip,
        )
    return backend


def backend_update(*, backend: ComputeBackend, actor, config=None, credentials=None, enabled=None, ip=None):
    """Change a backend's settings, replace its credentials (None keeps them), or turn
    it off (its running jobs go on; no new ones). Saved credentials are kept only where
    they went before: changing the address they go to needs them again. Anyone who may
    change backends may turn a local one off; changing it otherwise is for platform staff."""
    if not (enabled is False and config is None and credentials is None):
        _check_may_configure(backend.kind, actor)
    new_config = dict(backend.config) if config is None else dict(config)
    current = json.loads(crypto.decrypt(backend.credentials_ciphertext)) if backend.credentials_ciphertext else {}
    new_credentials = current if credentials is None else dict(credentials)
    _check_storable(new_config, new_credentials)
    implementation = _implementation(backend.kind)
    new_config, new_credentials = implementation.validate(new_config, new_credentials)
    # The local backend has no credentials, hence no destination.
    destination = getattr(implementation, "credential_destination", None)
    if destination is not None:
        check_credential_destination(
            before=destination(backend.config or {}),
            after=destination(new_config),
            stored=bool(backend.credentials_ciphertext),
            supplied=credentials is not None,
            credential=implementation.credential_label,
        )
    with transaction.atomic():
        backend.config = new_config
        if credentials is not None:
            backend.credentials_ciphertext = crypto.encrypt(json.dumps(new_credentials)) if new_credentials else ""
            backend.credentials_hint = ", ".join(sorted(new_credentials))
        if enabled is not None:
            backend.enabled = bool(enabled)
        backend.updated_at = timezone.now()
        backend.save()
        audit_record(
            organization=backend.organization,
            actor=actor,
            action="compute_backend.update",
            target=backend,
            data={"config": new_config, "credentials_replaced": credentials is not None, "enabled": backend.enabled},
            ip=ip,
        )
    return backend


def secret_set(*, organization, actor, name: str, value: str, ip=None) -> JobSecret:
    """Save (or replace) a secret jobs can receive as the environment variable ``name``."""
    if not ENV_NAME.fullmatch(name or "") or name.startswith(RESERVED_ENV_PREFIX):
        raise InvalidRequest(
            f"a secret's name is an environment variable name (letters, digits, _; not starting with "
            f"{RESERVED_ENV_PREFIX})"
        )
    if not value:
        raise InvalidRequest("give the secret a value")
    with transaction.atomic():
        secret, created = JobSecret.objects.select_for_update().get_or_create(
            organization=organization, name=name, defaults={"value_ciphertext": ""}
        )
        secret.value_ciphertext = crypto.encrypt(value)
        secret.hint = value[-4:] if len(value) >= 12 else ""
        secret.updated_by = actor if getattr(actor, "pk", None) else None
        secret.updated_at = timezone.now()
        secret.save()
        audit_record(
            organization=organization,
            actor=actor,
            action="job_secret.create" if created else "job_secret.update",
            target=secret,
            data={"name": name},
            ip=ip,
        )
    return secret


def secret_delete(*, organization, actor, name: str, ip=None) -> None:
    with transaction.atomic():
        secret = JobSecret.objects.filter(organization=organization, name=name).first()
        if secret is None:
            raise NotFound(f"no secret named {name!r}")
        audit_record(
            organization=organization,
            actor=actor,
            action="job_secret.delete",
            target=secret,
            data={"name": name},
            ip=ip,
        )
        secret.delete()


# -- estimate and submit -----------------------------------------------------------------


def estimate(
    *,
    project,
    backend: ComputeBackend,
    hardware: str,
    time_limit_seconds: int,
    items: int | None = None,
    seconds_per_item: float | None = None,
) -> dict:
    """What the job may cost before it runs: the time limit × the hourly rate, or, for
    an evaluation with a known speed, items × seconds per item × the rate (never more
    than the time limit allows). ``offered_hardware``: what the backend offers; hardware
    it does not offer has no amount, and the note says so."""
    offered = offered_hardware(backend)
    if hardware not in offered:
        return {
            "amount": None,
            "hourly": None,
            "price_id": None,
            "basis": "not_offered",
            "note": _not_offered(backend, hardware, offered),
            "offered_hardware": offered,
        }
    price = catalog.hourly_rate(hardware=hardware, backend_kind=backend.kind, organization_id=project.organization_id)
    if price is None or price.hourly is None:
        return {
            "amount": None,
            "hourly": None,
            "price_id": None,
            "basis": "none",
            "note": f"the price catalog has no hourly rate for {hardware} on {backend.kind}",
            "offered_hardware": offered,
        }
    seconds, basis = float(time_limit_seconds), "time_limit"
    if items and seconds_per_item:
        seconds, basis = min(float(time_limit_seconds), items * float(seconds_per_item)), "items"
    amount = (price.hourly * Decimal(str(seconds)) / Decimal(3600)).quantize(MONEY_QUANTUM)
    return {
        "amount": str(amount),
        "hourly": str(price.hourly),
        "price_id": price.id,
        "seconds": seconds,
        "basis": basis,
        "items": items,
        "seconds_per_item": seconds_per_item,
        "note": (
            f"{items} items × {seconds_per_item} s at ${price.hourly}/h"
            if basis == "items"
            else f"time limit {time_limit_seconds} s at ${price.hourly}/h (the most it can cost)"
        ),
        "offered_hardware": offered,
    }


def _clean_env(env) -> dict[str, str]:
    if env in (None, ""):
        return {}
    if not isinstance(env, dict):
        raise InvalidRequest("env must be an object of NAME: value")
    cleaned = {}
    for name, value in env.items():
        if not isinstance(name, str) or not ENV_NAME.fullmatch(name):
            raise InvalidRequest(f"env: {name!r} is not an environment variable name")
        if name.startswith(RESERVED_ENV_PREFIX):
            raise InvalidRequest(f"env: names starting with {RESERVED_ENV_PREFIX} are set by the platform")
        if not isinstance(value, str | int | float) or isinstance(value, bool):
            raise InvalidRequest(f"env: the value of {name} must be text or a number")
        if "\x00" in str(value):
            raise InvalidRequest(f"env: the value of {name} holds a NUL character")
        cleaned[name] = str(value)
    return cleaned


def _clean_command(command) -> list[str]:
    if isinstance(command, str):
        import shlex

        try:
            command = shlex.split(command)
        except ValueError as exc:
            raise InvalidRequest(f"command: {exc}") from None
    if not isinstance(command, list) or not command or not all(isinstance(part, str) and part for part in command):
        raise InvalidRequest("command must be a non-empty list of texts (the program and its arguments)")
    if any("\x00" in part for part in command):
        raise InvalidRequest("command holds a NUL character, which no program can receive")
    if sum(len(part) for part in command) > 20_000:
        raise InvalidRequest("command is too long")
    return command


def job_submit(
    *,
    project,
    actor,
    backend: ComputeBackend,
    hardware: str,
    name: str = "",
    command=None,
    image: str = "",
    env=None,
    secret_names=(),
    time_limit_seconds: int = 3600,
    evaluation: dict | None = None,
    api_key=None,
    ip: str | None = None,
) -> Job:
    """Store a queued job and hand it to the poller. ``evaluation``: {"dataset",
    "dataset_version"?, "evaluators", "model", "seconds_per_item"?} makes it an
    evaluation job whose results land in a new external experiment of that dataset.
    Refused with 402 when a hard budget covering the project (or key) is spent."""
    if backend.organization_id != project.organization_id:
        raise NotFound("no such backend")
    if not backend.enabled:
        raise InvalidRequest(f"backend {backend.name!r} is turned off")
    _check_allowed(backend.kind)
    if catalog.hardware_get(hardware) is None:
        raise InvalidRequest(f"unknown hardware {hardware!r}; choose one of {', '.join(catalog.CATALOG)}")
    offered = offered_hardware(backend)
    if hardware not in offered:
        raise InvalidRequest(_not_offered(backend, hardware, offered))
    if not isinstance(time_limit_seconds, int) or not MIN_TIME_LIMIT <= time_limit_seconds <= MAX_TIME_LIMIT:
        raise InvalidRequest(f"time_limit_seconds must be {MIN_TIME_LIMIT} to {MAX_TIME_LIMIT}")
    env = _clean_env(env)
    secret_names = list(dict.fromkeys(secret_names or []))
    known = set(
        JobSecret.objects.filter(organization_id=project.organization_id, name__in=secret_names).values_list(
            "name", flat=True
        )
    )
    missing = [secret for secret in secret_names if secret not in known]
    if missing:
        raise InvalidRequest(f"no secret named {', '.join(missing)} in this organization")
    if overlap := set(env) & set(secret_names):
        raise InvalidRequest(f"{', '.join(sorted(overlap))}: given both as env and as a secret")
    kind = Job.Kind.EVALUATION if evaluation else Job.Kind.COMMAND
    items = seconds_per_item = None
    if evaluation:
        command = _clean_command(command) if command else []  # [] : the built-in runner
        model = str(evaluation.get("model") or "").strip()
        if not model:
            raise InvalidRequest("an evaluation job needs the model it evaluates")
        seconds_per_item = evaluation.get("seconds_per_item")
        if seconds_per_item is not None and (
            not isinstance(seconds_per_item, int | float) or isinstance(seconds_per_item, bool) or seconds_per_item <= 0
        ):
            raise InvalidRequest("seconds_per_item must be a positive number")
    else:
        command = _clean_command(command)
    image = (image or "").strip()[:500]
    check_work_allowed(project=project, api_key=api_key, work="job")
    name = (name or "").strip()[:200] or (f"evaluate {evaluation['model']}" if evaluation else " ".join(command)[:200])

    with transaction.atomic():
        job = Job.objects.create(
            organization_id=project.organization_id,
            project=project,
            name=name,
            kind=kind,
            backend=backend,
            backend_kind=backend.kind,
            hardware=hardware,
            image=image,
            command=command,
            env=env,
            secret_names=secret_names,
            time_limit_seconds=time_limit_seconds,
            api_key=api_key,
            created_by=actor if getattr(actor, "pk", None) else None,
        )
        if evaluation:
            from evals.services.experiments import experiment_start

            experiment = experiment_start(
                project=project,
                actor=actor,
                dataset=evaluation["dataset"],
                dataset_version_number=evaluation.get("dataset_version"),
                evaluators=list(evaluation.get("evaluators") or []),
                kind="external",
                name=f"{name} (job {job.pk})",
                metadata={"model": evaluation["model"], "agent": f"job:{backend.kind}", "hardware": hardware},
                api_key=api_key,
                job_id=job.pk,
                ip=ip,
            )
            job.experiment = experiment
            job.env = {**env, "AGENTOPS_MODEL": evaluation["model"]}
            items = experiment.item_count
        job.estimate = estimate(
            project=project,
            backend=backend,
            hardware=hardware,
            time_limit_seconds=time_limit_seconds,
            items=items,
            seconds_per_item=seconds_per_item,
        )
        job.estimated_cost = Decimal(job.estimate["amount"]) if job.estimate["amount"] is not None else None
        job.next_poll_at = timezone.now()
        job.save()
        JobEvent.objects.create(
            organization_id=job.organization_id, project=project, job=job, status=Job.Status.QUEUED, message="submitted"
        )
        audit_record(
            organization=project.organization,
            actor=actor,
            action="job.submit",
            target=job,
            data={"backend": backend.name, "hardware": hardware, "kind": kind, "secrets": secret_names},
            ip=ip,
        )
        transaction.on_commit(lambda: _enqueue_poll(job))
    return job


def _enqueue_poll(job: Job, countdown: float = 0) -> None:
    poll_job.apply_async((job.organization_id, job.pk), countdown=countdown)


def job_cancel(*, job: Job, actor, ip: str | None = None) -> Job:
    """Cancel a job: a queued one at once; a running one on the next poll (now)."""
    with transaction.atomic():
        job = Job.objects.select_for_update().get(pk=job.pk)
        if job.ended:
            raise Conflict(f"the job already {job.status}")
        if job.cancel_requested:
            return job  # already on its way: no second audit entry or poll chain
        job.cancel_requested = True
        job.next_poll_at = timezone.now()
        job.save(update_fields=["cancel_requested", "next_poll_at", "updated_at"])
        audit_record(organization=job.project.organization, actor=actor, action="job.cancel", target=job, ip=ip)
        transaction.on_commit(lambda: _enqueue_poll(job))
    return job


# -- the job-scoped token -----------------------------------------------------------------


def _token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def _new_token(job: Job) -> str:
    """A token for this job's results endpoints only; stored hashed, valid until the
    job ends (and at most its time limit plus an hour)."""
    raw = f"{TOKEN_PREFIX}{job.pk}_{secrets.token_urlsafe(32)}"
    job.token_hash = _token_hash(raw)
    job.token_expires_at = timezone.now() + timedelta(seconds=job.time_limit_seconds) + timedelta(hours=1)
    return raw


def job_for_token(raw: str) -> Job | None:
    """The job a token belongs to, if it is a live job token; None otherwise."""
    match = re.fullmatch(rf"{TOKEN_PREFIX}(\d+)_[A-Za-z0-9_-]+", raw or "")
    if not match:
        return None
    from agentops.scoping import dangerously_unscoped

    with dangerously_unscoped("a job token names its organization only through its job"):
        job = Job.objects.select_related("project__organization", "experiment").filter(pk=int(match[1])).first()
    if job is None or not job.token_hash or not secrets.compare_digest(job.token_hash, _token_hash(raw)):
        return None
    return job


def token_live(job: Job) -> bool:
    return not job.ended and job.token_expires_at is not None and job.token_expires_at > timezone.now()


# -- the poller -------------------------------------------------------------------------


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
    from django.conf import settings

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
    token = _new_token(job) if job.kind == Job.Kind.EVALUATION else None
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
        transaction.on_commit(lambda: _close_experiment(job.pk))


def _charge(job: Job) -> None:
    """Duration × the hourly rate in effect when the job started, into the ledger (a
    hardware with no price: its time is recorded as unpriced, and the job's cost is
    unknown rather than zero)."""
    from billing.ledger import compute_usage_record

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


def _close_experiment(job_id: int) -> None:
    """An evaluation job ended: its experiment ends with what it reported (a job that
    did not succeed ends it as failed, keeping the results it had sent)."""
    from evals.services.experiments import experiment_complete, experiment_stop

    job = Job.objects.select_related("experiment").get(pk=job_id)
    experiment = job.experiment
    if experiment is None or experiment.ended:
        return
    try:
        if job.status == Job.Status.SUCCEEDED:
            experiment_complete(experiment=experiment, actor=None)
        else:
            experiment_stop(experiment=experiment, error=f"the job {job.status}: {job.error}"[:2000])
    except Conflict:
        pass


def job_results(*, job: Job, results: list[dict]) -> int:
    """Results an evaluation job reports (through its token): into its experiment."""
    from evals.services.experiments import results_report

    if job.experiment is None:
        raise InvalidRequest("this job is not an evaluation job")
    return results_report(experiment=job.experiment, results=results)


def job_items(*, job: Job) -> dict:
    """What an evaluation job evaluates: its experiment's items and evaluators."""
    from evals.models import ExperimentResult

    if job.experiment is None:
        raise InvalidRequest("this job is not an evaluation job")
    rows = ExperimentResult.objects.filter(experiment=job.experiment).select_related("item").order_by("id")
    return {
        "experiment": job.experiment_id,
        "evaluators": [spec["name"] for spec in job.experiment.evaluators],
        "items": [
            {"key": row.item_key, "input": row.item.input, "expected": row.item.expected, "metadata": row.item.metadata}
            for row in rows
        ],
    }


def due_job_ids(*, overdue_seconds: float = 0) -> list[tuple[int, int]]:
    """(organization id, job id) of unfinished jobs whose next look is due (across
    organizations), for the sweeper that makes sure no job is forgotten."""
    from agentops.scoping import dangerously_unscoped

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
    from jobs.live import announce_job

    announce_job(job_id=job_id)


def _announce_lines(job_id: int, first: int, last: int) -> None:
    from jobs.live import announce_log_lines

    announce_log_lines(job_id=job_id, first=first, last=last)
