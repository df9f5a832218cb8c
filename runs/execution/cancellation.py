"""Cancellation: a person asks a run to stop (``run_cancel``). A run no worker executes
(queued, waiting for an approval, or just claimed with a cancellation pending) ends at
once, its pending approvals closed; a running one ends when its worker next looks (the
state saves and the streamed answer read the request: ``claims``, ``model_calls``)."""

from __future__ import annotations

from django.db import transaction

from agentops.errors import Conflict, InvalidRequest
from agentops.services.audit import audit_record
from runs.execution.writes import finish_run
from runs.models import Run
from runs.services.approvals import approvals_close


def run_cancel(*, run: Run, actor, ip: str | None = None, action: str = "run.cancel") -> Run:
    """Ask the run to stop. A queued or waiting run (no worker is on it) ends at once, its
    pending approvals closed; a running one when its worker next looks: after the step in
    progress, or within a second while a model streams its answer. A session's interrupt
    is this (``action`` names it in the audit log); the turn's end is its ``interrupted``
    event, with everything stored so far kept."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if not run.executed:
            raise InvalidRequest("only runs the platform executes can be cancelled")
        if run.status in Run.ENDED:
            raise Conflict(f"the run already {run.status}")
        run.cancel_requested = True
        run.save(update_fields=["cancel_requested"])
        if run.status in (Run.Status.QUEUED, Run.Status.WAITING):
            end_cancelled(run)
        audit_record(organization=run.project.organization, actor=actor, action=action, target=run, ip=ip)
    return run


def end_cancelled(run: Run) -> None:
    """End a cancelled run no worker is executing (queued, waiting, or just claimed),
    closing the approvals it waited for: nobody can decide them any more."""
    if approvals_close(run=run, reason="the run was cancelled"):
        error = "cancelled while waiting for approval"
    elif not (run.execution or {}).get("started"):
        error = "cancelled before it started"
    else:
        error = "cancelled"
    finish_run(run, status=Run.Status.CANCELLED, error=error)


def end_if_cancelled_while_parking(run: Run) -> None:
    """A cancellation that came while the run was going to ``waiting`` found it running
    and only asked it to stop: end it now (a later one finds it waiting and ends it)."""
    with transaction.atomic():
        parked = Run.objects.select_for_update().filter(pk=run.pk, status=Run.Status.WAITING).first()
        if parked is not None and parked.cancel_requested:
            end_cancelled(parked)
