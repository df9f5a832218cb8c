"""Human approvals of tool calls: the run waits until a person approves (possibly with
edited arguments), rejects, or the approval expires."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest
from agentops.queueing import send_after_commit
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.audit import audit_record
from runs.events import RunEvent
from runs.ingest import ingest
from runs.models import Approval, Run, Session
from runs.services.events import event_append
from runs.tasks import execute_run


def _approval_get_or_create(run: Run, call: dict, **fields) -> tuple[Approval, bool]:
    """The approval of the run's tool ``call``, created with ``fields`` if there is none
    yet (one per call: a worker that asks again finds the first)."""
    return Approval.objects.get_or_create(
        run=run,
        call_id=call["id"],
        defaults={
            "organization_id": run.organization_id,
            "project_id": run.project_id,
            "tool_name": call["name"],
            "arguments": call["arguments"],
            **fields,
        },
    )


def approval_request(*, run: Run, call: dict) -> Approval:
    """Create (once per tool call) the pending approval and put the run in ``waiting``;
    or, when the run is a turn of a session whose approve-all covers the tool, the
    approval already approved (the run goes on)."""
    if run.agent_session_id is not None:
        approve_all = Session.objects.filter(pk=run.agent_session_id).values_list("approve_all", flat=True).first()
        if approve_all and ("*" in approve_all or call["name"] in approve_all):
            with transaction.atomic():
                approval, created = _approval_get_or_create(
                    run,
                    call,
                    approved_arguments=call["arguments"],
                    status=Approval.Status.APPROVED,
                    reason="approved by the session's approve-all",
                    decided_at=timezone.now(),
                    expires_at=timezone.now(),
                )
                if created:
                    _decided_event(approval, by="approve-all")
            return approval
    approval, created = _approval_get_or_create(
        run, call, expires_at=timezone.now() + timedelta(minutes=settings.APPROVAL_TIMEOUT_MINUTES)
    )
    Run.objects.filter(pk=run.pk).update(status=Run.Status.WAITING)
    ingest(project=run.project, runs=[RunEvent(trace_id=run.trace_id, fields={"status": Run.Status.WAITING})])
    if created:
        event_append(
            run=run,
            type="approval_required",
            data={
                "run": run.pk,
                "approval": approval.pk,
                "call_id": approval.call_id,
                "tool": approval.tool_name,
                "arguments": approval.arguments,
                "expires_at": approval.expires_at.isoformat(),
            },
        )
    return approval


def _decided_event(approval: Approval, *, by: str | None) -> None:
    event_append(
        run=approval.run,
        type="approval_decided",
        data={
            "run": approval.run_id,
            "approval": approval.pk,
            "call_id": approval.call_id,
            "tool": approval.tool_name,
            "decision": approval.status,
            "arguments": approval.approved_arguments,
            "reason": approval.reason,
            "by": by,
        },
    )


def approval_decide(
    *, approval: Approval, actor, approve: bool, arguments: Any = None, reason: str = "", ip: str | None = None
) -> Approval:
    """Approve (with ``arguments`` if edited) or reject a pending approval; the run goes
    back to a worker and continues."""
    if approve and arguments is not None and not isinstance(arguments, dict):
        raise InvalidRequest("edited arguments must be a JSON object")
    with transaction.atomic():
        # The run first, then the approval: the order run_cancel takes them in.
        Run.objects.select_for_update().filter(pk=approval.run_id).first()
        approval = Approval.objects.select_for_update().get(pk=approval.pk)
        if approval.status != Approval.Status.PENDING:
            why = f" ({approval.reason})" if approval.status == Approval.Status.EXPIRED and approval.reason else ""
            raise Conflict(f"this approval is already {approval.status}{why}")
        expired = approval.expires_at <= timezone.now()
        if expired:
            # Stored, then refused: the expiry must not roll back with the 409.
            _expire(approval)
        else:
            approval.status = Approval.Status.APPROVED if approve else Approval.Status.REJECTED
            approval.approved_arguments = (
                (arguments if arguments is not None else approval.arguments) if approve else None
            )
            approval.reason = reason[:2000]
            approval.decided_by = actor
            approval.decided_at = timezone.now()
            approval.save()
            audit_record(
                organization=approval.run.project.organization,
                actor=actor,
                action="approval.approve" if approve else "approval.reject",
                target=approval.run,
                data={
                    "tool": approval.tool_name,
                    "call_id": approval.call_id,
                    "edited": approve and arguments is not None,
                },
                ip=ip,
            )
            _decided_event(approval, by=getattr(actor, "email", None) or (str(actor) if actor else None))
            _resume(approval.run)
    if expired:
        raise Conflict("this approval has expired")
    return approval


def approvals_close(*, run: Run, reason: str) -> int:
    """Close the run's pending approvals without a decision (the run was cancelled):
    nobody can decide them any more. Returns how many were pending."""
    return Approval.objects.filter(run=run, status=Approval.Status.PENDING).update(
        status=Approval.Status.EXPIRED, reason=reason, decided_at=timezone.now()
    )


def _expire(approval: Approval) -> None:
    approval.status = Approval.Status.EXPIRED
    approval.reason = "nobody answered in time"
    approval.decided_at = timezone.now()
    approval.save(update_fields=["status", "reason", "decided_at"])
    _decided_event(approval, by=None)
    _resume(approval.run)


def _resume(run: Run) -> None:
    """Queue the waiting run again once nothing is pending, for a worker to continue."""
    if Approval.objects.filter(run=run, status=Approval.Status.PENDING).exists():
        return
    updated = Run.objects.filter(pk=run.pk, status=Run.Status.WAITING).update(status=Run.Status.QUEUED)
    if updated:
        ingest(project=run.project, runs=[RunEvent(trace_id=run.trace_id, fields={"status": Run.Status.QUEUED})])
        organization_id, run_id = run.organization_id, run.pk
        send_after_commit(execute_run, organization_id, run_id)  # recover_stalled_runs re-sends


def approvals_expire() -> int:
    """Expire every pending approval past its time and let the runs continue (periodic)."""
    with dangerously_unscoped("the expiry task reads pending approvals of every organization"):
        due = list(
            Approval.objects.select_related("run", "run__project")
            .filter(status=Approval.Status.PENDING, expires_at__lte=timezone.now())
            .values_list("organization_id", "run_id", "pk")
        )
    for organization_id, run_id, approval_id in due:
        with organization_scope(organization_id), transaction.atomic():
            Run.objects.select_for_update().filter(pk=run_id).first()  # the run first, as approval_decide
            approval = Approval.objects.select_for_update().select_related("run__project").get(pk=approval_id)
            if approval.status == Approval.Status.PENDING:
                _expire(approval)
    return len(due)
