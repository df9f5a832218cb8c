"""Submitting a job: ``estimate`` (what it may cost before it runs), ``job_submit``
(every field checked, the hard budgets checked, the job stored queued with its
estimate and its first poll queued once committed; an evaluation job also starts the
external experiment its results land in) and ``job_cancel`` (the request: the poller
cancels it on the backend at its next look, queued now).

A person's or key's request ends here; what happens to a job after it is stored is
``polling``'s (Celery: ``jobs.tasks.poll_job``, queued from here).
"""

from __future__ import annotations

import shlex
from decimal import Decimal

from django.db import transaction
from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest, NotFound
from agentops.queueing import send_or_leave_to_sweeper
from agentops.services.audit import acting_user, audit_record
from billing.budgets import check_work_allowed
from evals.services.experiments import experiment_start
from jobs import hardware as catalog
from jobs.models import ComputeBackend, Job, JobEvent, JobSecret
from jobs.services.backends import check_allowed, not_offered, offered_hardware
from jobs.services.secrets import ENV_NAME, RESERVED_ENV_PREFIX
from jobs.tasks import poll_job

MIN_TIME_LIMIT = 60
MAX_TIME_LIMIT = 7 * 24 * 3600
MONEY_QUANTUM = Decimal("0.000000001")


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
            "note": not_offered(backend, hardware, offered),
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
    check_allowed(backend.kind)
    if catalog.hardware_get(hardware) is None:
        raise InvalidRequest(f"unknown hardware {hardware!r}; choose one of {', '.join(catalog.CATALOG)}")
    offered = offered_hardware(backend)
    if hardware not in offered:
        raise InvalidRequest(not_offered(backend, hardware, offered))
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
            created_by=acting_user(actor),
        )
        if evaluation:
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
    send_or_leave_to_sweeper(poll_job, job.organization_id, job.pk, countdown=countdown)  # sweep_jobs re-sends


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
