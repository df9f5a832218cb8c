"""Writes of exports: destinations, export jobs (create, retry, cancel) and schedules,
each in one transaction with its audit event. A job is queued here and run by
``evals.tasks.run_export`` after commit (``evals.bulk_export.runner``)."""

from __future__ import annotations

from datetime import date, timedelta

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import F, Q
from django.utils import timezone

from agentops import crypto
from agentops.errors import Conflict, InvalidRequest
from agentops.queueing import send_after_commit
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.audit import audit_record, audited_create, audited_delete
from evals.bulk_export.destinations import DESTINATION_KINDS
from evals.bulk_export.kinds import EXPORT_KINDS
from evals.models import ExportDestination, ExportJob, ExportSchedule
from evals.tasks import run_export

PERIOD_DAYS = {ExportSchedule.Every.DAY: 1, ExportSchedule.Every.WEEK: 7}


def _enqueue(job: ExportJob) -> None:
    send_after_commit(run_export, job.organization_id, job.pk)  # recover_exports re-sends


# -- destinations --------------------------------------------------------------------------


@transaction.atomic
def destination_create(
    *, organization, actor, name: str, kind: str, config: dict, credentials: dict | None = None, ip=None
) -> ExportDestination:
    """Save a destination of the organization; its credentials are encrypted."""
    destination_kind = DESTINATION_KINDS.get(kind)
    if destination_kind is None:
        raise InvalidRequest(f"unknown destination kind {kind!r}; the kinds are {', '.join(DESTINATION_KINDS)}")
    name = (name or "").strip()
    if not name:
        raise InvalidRequest("a destination needs a name")
    if ExportDestination.objects.filter(name=name).exists():
        raise Conflict(f"a destination named {name!r} exists already")
    cleaned, secrets = destination_kind.clean(config or {}, credentials or {})
    hint = ""
    if secrets:
        hint = secrets.get(destination_kind.credential_fields[0], "")[-4:]
    return audited_create(
        ExportDestination,
        organization=organization,
        actor=actor,
        action="export_destination.create",
        data={"kind": kind, "config": cleaned},
        ip=ip,
        name=name,
        kind=kind,
        config=cleaned,
        credentials_ciphertext=crypto.encrypt_json(secrets),
        credentials_hint=hint,
    )


@transaction.atomic
def destination_delete(*, destination: ExportDestination, actor, ip=None) -> None:
    """Delete a destination; its past exports keep its name. Refused while a schedule uses it."""
    if destination.schedules.exists():
        raise Conflict("a schedule exports to this destination: delete the schedule first")
    audited_delete(
        destination, organization=destination.organization, actor=actor, action="export_destination.delete", ip=ip
    )


# -- export jobs -----------------------------------------------------------------------------


def _checked(project, *, kind: str, destination_id, tables, start_date: date, end_date: date):
    export_kind = EXPORT_KINDS.get(kind)
    if export_kind is None:
        raise InvalidRequest(f"unknown export kind {kind!r}; the kinds are {', '.join(EXPORT_KINDS)}")
    if end_date < start_date:
        raise InvalidRequest("the date range is backwards: end_date is before start_date")
    if end_date >= date.max:
        # The export reads up to the midnight after end_date, which that day has none of:
        # the job was accepted, then failed on its worker with an OverflowError.
        raise InvalidRequest(f"end_date must be before {date.max.isoformat()}")
    destination = ExportDestination.objects.filter(pk=destination_id).first()
    if destination is None:
        raise InvalidRequest(f"no export destination with id {destination_id} in this organization")
    if destination.kind not in export_kind.destination_kinds:
        raise InvalidRequest(f"a {kind} export cannot be written to a {destination.kind} destination")
    return destination, export_kind.clean_tables(list(tables or []))


def _dates(kind: str, start_date: date | None, end_date: date | None) -> tuple[date, date]:
    """The job's days: required by a kind that covers a range of days (parquet); the day
    it is created for the others (the Hub pushes and import)."""
    export_kind = EXPORT_KINDS.get(kind)
    if export_kind is not None and export_kind.uses_dates:
        if start_date is None or end_date is None:
            raise InvalidRequest(f"a {kind} export needs start_date and end_date")
        return start_date, end_date
    today = timezone.now().date()
    return start_date or today, end_date or start_date or today


@transaction.atomic
def export_create(
    *,
    project,
    actor,
    destination_id: int,
    start_date: date | None = None,
    end_date: date | None = None,
    tables: list[str] | None = None,
    kind: str = "parquet",
    options: dict | None = None,
    ip=None,
) -> ExportJob:
    """Queue an export job of ``kind``: the project's data for the dates (both included)
    for "parquet"; a push to or an import from the Hugging Face Hub, as ``options`` say."""
    start_date, end_date = _dates(kind, start_date, end_date)
    destination, tables = _checked(
        project, kind=kind, destination_id=destination_id, tables=tables, start_date=start_date, end_date=end_date
    )
    if options is not None and not isinstance(options, dict):
        raise InvalidRequest("options must be a JSON object")
    options = EXPORT_KINDS[kind].clean_options(project, options or {})
    job = audited_create(
        ExportJob,
        organization=project.organization,
        actor=actor,
        action="export.create",
        data={
            "kind": kind,
            "destination": destination.name,
            "start_date": str(start_date),
            "end_date": str(end_date),
            **({"options": options} if options else {}),
        },
        ip=ip,
        project=project,
        kind=kind,
        destination=destination,
        destination_label=destination.name,
        start_date=start_date,
        end_date=end_date,
        tables=tables,
        options=options,
    )
    _enqueue(job)
    return job


@transaction.atomic
def export_retry(*, job: ExportJob, actor, ip=None) -> ExportJob:
    """A new attempt of a failed or cancelled export, with the same settings."""
    if job.status not in (ExportJob.Status.FAILED, ExportJob.Status.CANCELLED):
        raise Conflict(f"only a failed or cancelled export can be retried; this one is {job.status}")
    if job.destination_id is None:
        raise Conflict("the export's destination was deleted: start a new export")
    retry = audited_create(
        ExportJob,
        organization=job.organization,
        actor=actor,
        action="export.retry",
        ip=ip,
        project=job.project,
        kind=job.kind,
        destination_id=job.destination_id,
        destination_label=job.destination_label,
        schedule=job.schedule,
        start_date=job.start_date,
        end_date=job.end_date,
        tables=job.tables,
        options=job.options,
        attempt=job.attempt + 1,
        retry_of=job,
    )
    _enqueue(retry)
    return retry


@transaction.atomic
def export_cancel(*, job: ExportJob, actor, ip=None) -> ExportJob:
    """Cancel a queued export at once; a running one stops after its current chunk."""
    now = timezone.now()
    if ExportJob.objects.filter(pk=job.pk, status=ExportJob.Status.QUEUED).update(
        status=ExportJob.Status.CANCELLED, cancel_requested=True, ended_at=now, error="cancelled before it started"
    ):
        pass
    elif not ExportJob.objects.filter(pk=job.pk, status=ExportJob.Status.RUNNING).update(cancel_requested=True):
        job.refresh_from_db()
        raise Conflict(f"the export has ended ({job.status}): nothing to cancel")
    audit_record(organization=job.organization, actor=actor, action="export.cancel", target=job, ip=ip)
    job.refresh_from_db()
    return job


# -- schedules ---------------------------------------------------------------------------------


@transaction.atomic
def schedule_create(
    *, project, actor, destination_id: int, every: str, tables: list[str] | None = None, kind="parquet", ip=None
) -> ExportSchedule:
    """Export the project every day or week, each time the period just ended; the first
    period starts today (UTC), so the first export is queued when it ends."""
    if every not in PERIOD_DAYS:
        raise InvalidRequest("every must be 'day' or 'week'")
    today = timezone.now().date()
    if kind in EXPORT_KINDS and not EXPORT_KINDS[kind].uses_dates:
        raise InvalidRequest(f"a {kind} job does not run on a schedule: only exports of a range of days do")
    destination, tables = _checked(
        project, kind=kind, destination_id=destination_id, tables=tables, start_date=today, end_date=today
    )
    return audited_create(
        ExportSchedule,
        organization=project.organization,
        actor=actor,
        action="export_schedule.create",
        data={"every": every, "destination": destination.name},
        ip=ip,
        project=project,
        destination=destination,
        kind=kind,
        tables=tables,
        every=every,
        next_start=today,
    )


@transaction.atomic
def schedule_delete(*, schedule: ExportSchedule, actor, ip=None) -> None:
    """Stop a schedule; the exports it made stay."""
    audited_delete(schedule, organization=schedule.organization, actor=actor, action="export_schedule.delete", ip=ip)


def start_due_exports(*, today: date | None = None) -> int:
    """Queue one export of each schedule whose period has ended (every minute, beat).

    Each schedule is claimed by moving ``next_start`` on with a conditional update, and
    a unique constraint on (schedule, start_date) backs it: two sweeps at once queue one
    export. A schedule that missed periods (no beat for days) catches up one per sweep.
    """
    today = today or timezone.now().date()
    with dangerously_unscoped("export schedules of every organization are swept by the beat"):
        due = list(
            ExportSchedule.objects.filter(enabled=True, next_start__lte=today - timedelta(days=1)).values_list(
                "pk", "organization_id", "every", "next_start"
            )
        )
    started = 0
    for schedule_id, organization_id, every, next_start in due:
        days = PERIOD_DAYS[every]
        if next_start + timedelta(days=days) > today:
            continue
        with organization_scope(organization_id), transaction.atomic():
            claimed = ExportSchedule.objects.filter(pk=schedule_id, next_start=next_start).update(
                next_start=F("next_start") + timedelta(days=days)
            )
            if not claimed:
                continue  # another sweep got there first
            schedule = ExportSchedule.objects.select_related("destination", "project").get(pk=schedule_id)
            try:
                with transaction.atomic():
                    job = ExportJob.objects.create(
                        organization_id=organization_id,
                        project=schedule.project,
                        kind=schedule.kind,
                        destination=schedule.destination,
                        destination_label=schedule.destination.name,
                        schedule=schedule,
                        start_date=next_start,
                        end_date=next_start + timedelta(days=days - 1),
                        tables=schedule.tables,
                    )
            except IntegrityError:
                continue  # this period's export exists already
            _enqueue(job)
            started += 1
    return started


# An export queued this long ago that no worker took lost its message (sent while the
# broker was down, or dropped with a worker): the recovery sweep sends it again.
UNCLAIMED_SECONDS = 60


def exports_to_recover() -> list[tuple[int, int]]:
    """(organization id, export id) of exports no worker is on: queued ones no worker
    claimed in UNCLAIMED_SECONDS, and running ones whose worker stopped beating. Sending
    one again is safe: ``export_run`` claims it, and does nothing when it runs or ended."""
    now = timezone.now()
    stale = now - timedelta(seconds=settings.EXPORT_STALE_SECONDS)
    with dangerously_unscoped("the export recovery sweep looks at every organization's exports"):
        return list(
            ExportJob.objects.filter(
                Q(status=ExportJob.Status.QUEUED, created_at__lt=now - timedelta(seconds=UNCLAIMED_SECONDS))
                | Q(status=ExportJob.Status.RUNNING, heartbeat_at__lt=stale, cancel_requested=False)
            )
            .order_by("created_at")
            .values_list("organization_id", "id")[:1000]
        )
