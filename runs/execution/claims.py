"""A worker's hold on a run: the claim (a conditional update, so a task delivered twice
executes the run once, and a run whose worker died is taken over), the state saves that
check the claim and beat the heartbeat, and finding the runs no worker is on, for the
recovery task. A claim of a run whose worker stopped counts the lost worker, which bounds
the attempts (``RUN_MAX_ATTEMPTS``)."""

from __future__ import annotations

import os
import socket
import uuid
from datetime import timedelta
from functools import cache

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.utils import timezone

from agentops import rows
from agentops.models import Organization, Project
from agentops.scoping import dangerously_unscoped, organization_id_for_sql
from runs.models import Run


def _stall_after() -> timedelta:
    """A running run whose worker has been silent this long lost its worker (it beats
    after every step and while a model streams)."""
    return timedelta(seconds=settings.RUN_STALL_SECONDS)


# A claim of a running run (its worker stopped beating) counts a lost worker in the run's
# state, in the same statement: RUN_MAX_ATTEMPTS bounds how often a run that kills its
# worker (each attempt a paid model call) is tried.
_COUNT_LOST_WORKER = (
    "CASE WHEN status = %(running)s THEN jsonb_set(execution, '{workers_lost}', "
    "to_jsonb(COALESCE((execution->>'workers_lost')::int, 0) + 1)) ELSE execution END"
)


class LostClaim(Exception):
    """Another worker took the run (this one was silent for longer than the stall time):
    this one stops without writing anything more."""


_RUN_SKIPPED = ("search",)  # the search text: large, never read by the executor


@cache
def _claim_sql() -> str:
    """The claim and the claimed run with its project and organization, in one statement
    (the worker reads them next)."""
    # A stalled run is taken even when cancelled meanwhile: its new worker ends it.
    return f"""
        WITH claimed AS (
            UPDATE runs_run AS run SET status = %(running)s, worker = %(claim)s, heartbeat_at = %(now)s,
                execution = {_COUNT_LOST_WORKER}
            WHERE id = %(run_id)s AND (%(organization_id)s::bigint IS NULL OR organization_id = %(organization_id)s)
              AND (status = %(queued)s OR (status = %(waiting)s AND cancel_requested)
                   OR (status = %(running)s AND heartbeat_at < %(stalled)s))
            RETURNING {rows.columns(Run, "run", _RUN_SKIPPED)}
        )
        SELECT claimed.*, {rows.columns(Project, "project")}, {rows.columns(Organization, "organization")}
        FROM claimed
        JOIN agentops_project AS project ON project.id = claimed.project_id
        JOIN agentops_organization AS organization ON organization.id = project.organization_id
        """  # noqa: S608 - quoted constants


def claim_run(run_id: int) -> Run | None:
    """Take the run for this worker: a queued one, a running one whose worker stopped
    beating (it died mid-run: the run resumes from its saved state), or a queued or
    waiting one with a cancellation pending (the worker ends it). Returns the run (its
    project and organization loaded; its ``worker`` is this worker's claim, which every
    later state save checks), or None when another worker has it, or it ended. One
    statement."""
    now = timezone.now()
    claim = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    with connection.cursor() as cursor:
        cursor.execute(
            _claim_sql(),
            {
                "run_id": run_id,
                "organization_id": organization_id_for_sql(),
                "claim": claim,
                "now": now,
                "stalled": now - _stall_after(),
                "queued": Run.Status.QUEUED,
                "waiting": Run.Status.WAITING,
                "running": Run.Status.RUNNING,
            },
        )
        row = cursor.fetchone()
    # Nothing got updated: another worker got there first, or the run is not ours to take.
    if row is None:
        return None
    run, project, organization = rows.instances(row, (Run, _RUN_SKIPPED), (Project, ()), (Organization, ()))
    project.organization = organization
    run.project = project
    return run


def stalled_run_ids() -> list[tuple[int, int]]:
    """(organization id, run id) of executed runs no worker is on: running ones whose
    worker stopped beating, queued ones whose task never reached a worker (lost with a
    worker that had taken it, or never sent), and queued or waiting ones with a
    cancellation pending. A periodic task hands them to a worker again: they resume from
    their saved state (or, cancelled meanwhile, end cancelled)."""
    silent_since = timezone.now() - _stall_after()
    with dangerously_unscoped("the recovery task looks for stalled runs in every organization"):
        return list(
            Run.objects.filter(executed=True)
            .filter(
                Q(status=Run.Status.RUNNING, heartbeat_at__lt=silent_since)
                | Q(status=Run.Status.QUEUED, cancel_requested=False, created_at__lt=silent_since)
                | Q(status__in=[Run.Status.QUEUED, Run.Status.WAITING], cancel_requested=True)
            )
            .values_list("organization_id", "id")
        )


def save_state(run: Run, state: dict) -> bool:
    """Save the executor's state after a step (and beat), so a run whose worker dies
    resumes there and no model call that already succeeded is made (and paid for) again.
    Returns whether the run was cancelled meanwhile; raises LostClaim when another worker
    has taken the run. One statement."""
    run.execution = state
    field = Run._meta.get_field("execution")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET execution = %s, heartbeat_at = %s WHERE id = %s AND worker = %s "
            "RETURNING cancel_requested",
            [field.get_db_prep_save(state, connection), timezone.now(), run.pk, run.worker],
        )
        row = cursor.fetchone()
    if row is None:
        raise LostClaim(f"run {run.pk} was taken by another worker")
    run.cancel_requested = row[0]
    return row[0]
