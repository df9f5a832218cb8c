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

from django.conf import settings
from django.db import connection
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from agentops.scoping import dangerously_unscoped
from runs.models import Run


def _stall_after() -> timedelta:
    """A running run whose worker has been silent this long lost its worker (it beats
    after every step and while a model streams)."""
    return timedelta(seconds=settings.RUN_STALL_SECONDS)


# A claim of a running run (its worker stopped beating) counts a lost worker in the run's
# state, in the same statement: RUN_MAX_ATTEMPTS bounds how often a run that kills its
# worker (each attempt a paid model call) is tried.
_COUNT_LOST_WORKER = RawSQL(
    "CASE WHEN status = %s THEN jsonb_set(execution, '{workers_lost}', "
    "to_jsonb(COALESCE((execution->>'workers_lost')::int, 0) + 1)) ELSE execution END",
    [Run.Status.RUNNING],
)


class LostClaim(Exception):
    """Another worker took the run (this one was silent for longer than the stall time):
    this one stops without writing anything more."""


def claim_run(run_id: int) -> str:
    """Take the run for this worker: a queued one, a running one whose worker stopped
    beating (it died mid-run: the run resumes from its saved state), or a queued or
    waiting one with a cancellation pending (the worker ends it). Returns the claim (this
    worker's mark on the run, which every later state save checks), or "" when another
    worker has it, or it ended."""
    now = timezone.now()
    claim = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    claimed = (
        # A stalled run is taken even when cancelled meanwhile: its new worker ends it.
        Run.objects.filter(pk=run_id)
        .filter(
            Q(status=Run.Status.QUEUED)
            | Q(status=Run.Status.WAITING, cancel_requested=True)
            | Q(status=Run.Status.RUNNING, heartbeat_at__lt=now - _stall_after())
        )
        .update(status=Run.Status.RUNNING, worker=claim, heartbeat_at=now, execution=_COUNT_LOST_WORKER)
    )
    # Nothing got updated: another worker got there first, or the run is not ours to take.
    return claim if claimed == 1 else ""


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
