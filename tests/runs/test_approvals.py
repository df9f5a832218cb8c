"""Human approvals: a tool call marked for approval pauses the run until a person decides."""

from datetime import timedelta

from django.utils import timezone

from agentops.scoping import organization_scope
from runs.execution import run_execute, run_start
from runs.models import Approval, Run, Step, ToolCall
from runs.services.agents import agent_create
from runs.services.approvals import approvals_expire

BASE = "/api/v1/projects/acme/agent"


def _waiting_run(tenant, name="calc"):
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project,
            actor=None,
            name=name,
            model="offline",
            tools=["calculator"],
            approval_tools=["calculator"],
        )
        run = run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6 * 7?")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        approval = Approval.objects.get(run=run)
    return run, approval


def _continue(tenant, run):
    with organization_scope(tenant.organization):
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        call = ToolCall.objects.get(run=run)
    return run, call


def test_call_needing_approval_pauses_the_run_without_running_the_tool(tenant, client_for):
    run, approval = _waiting_run(tenant)
    assert run.status == "waiting"
    assert (approval.status, approval.tool_name, approval.arguments) == (
        "pending",
        "calculator",
        {"expression": "6 * 7"},
    )
    with organization_scope(tenant.organization):
        assert not ToolCall.objects.filter(run=run).exists()
    listed = client_for(tenant.viewer).get(f"{BASE}/runs/{run.pk}/approvals/").json()
    assert [a["status"] for a in listed] == ["pending"]


def test_approve_continues_the_run(tenant, client_for):
    run, approval = _waiting_run(tenant)
    response = client_for(tenant.member).post(
        f"{BASE}/runs/{run.pk}/approvals/", {"approval": approval.pk, "decision": "approve"}, format="json"
    )
    assert response.status_code == 200 and response.json()["decided_by"] == tenant.member.email
    assert Run.dangerously_unscoped_objects.get(pk=run.pk).status == "queued"
    run, call = _continue(tenant, run)
    assert run.status == "succeeded" and call.result == {"expression": "6 * 7", "result": 42}


def test_edit_arguments_then_approve(tenant, client_for):
    run, approval = _waiting_run(tenant)
    client_for(tenant.member).post(
        f"{BASE}/runs/{run.pk}/approvals/",
        {"approval": approval.pk, "decision": "approve", "arguments": {"expression": "2 * 21"}},
        format="json",
    )
    run, call = _continue(tenant, run)
    assert call.arguments == {"expression": "2 * 21"} and call.result["result"] == 42


def test_reject_tells_the_model_and_the_tool_never_runs(tenant, client_for):
    run, approval = _waiting_run(tenant)
    client_for(tenant.member).post(
        f"{BASE}/runs/{run.pk}/approvals/",
        {"approval": approval.pk, "decision": "reject", "reason": "not now"},
        format="json",
    )
    run, call = _continue(tenant, run)
    assert call.result is None and call.error == "a person rejected this call: not now"
    with organization_scope(tenant.organization):
        assert Step.objects.get(run=run, kind="tool").status == "error"
    assert run.status == "succeeded"


def test_a_decision_on_an_approval_past_its_time_is_refused_and_the_expiry_is_kept(tenant, client_for):
    """The 409 does not roll back what it found: the approval is stored as expired and the
    run goes on without waiting for the periodic expiry."""
    run, approval = _waiting_run(tenant)
    Approval.dangerously_unscoped_objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    response = client_for(tenant.member).post(
        f"{BASE}/runs/{run.pk}/approvals/", {"approval": approval.pk, "decision": "approve"}, format="json"
    )
    assert response.status_code == 409 and response.json()["error"]["message"] == "this approval has expired"
    stored = Approval.dangerously_unscoped_objects.get(pk=approval.pk)
    assert stored.status == "expired" and stored.reason == "nobody answered in time"
    assert Run.dangerously_unscoped_objects.get(pk=run.pk).status == "queued", "the run goes on"
    assert approvals_expire() == 0, "nothing left for the periodic expiry"


def test_unanswered_approval_expires_and_the_run_continues(tenant):
    run, approval = _waiting_run(tenant)
    Approval.dangerously_unscoped_objects.filter(pk=approval.pk).update(
        expires_at=timezone.now() - timedelta(seconds=1)
    )
    assert approvals_expire() == 1
    assert Approval.dangerously_unscoped_objects.get(pk=approval.pk).status == "expired"
    run, call = _continue(tenant, run)
    assert call.error == "nobody approved this call in time"


def test_viewer_cannot_decide_and_a_decision_is_final(tenant, client_for):
    run, approval = _waiting_run(tenant)
    url = f"{BASE}/runs/{run.pk}/approvals/"
    body = {"approval": approval.pk, "decision": "approve"}
    assert client_for(tenant.viewer).post(url, body, format="json").status_code == 403
    assert client_for(tenant.member).post(url, body, format="json").status_code == 200
    again = client_for(tenant.admin).post(url, {**body, "decision": "reject"}, format="json")
    assert again.status_code == 409 and again.json()["error"]["message"] == "this approval is already approved"


def test_other_tenant_cannot_see_or_decide(tenant, other_tenant, client_for):
    run, approval = _waiting_run(tenant)
    outsider = client_for(other_tenant.owner)
    assert outsider.get(f"{BASE}/runs/{run.pk}/approvals/").status_code == 404
    foreign = f"/api/v1/projects/globex/agent/runs/{run.pk}/approvals/"
    assert outsider.post(foreign, {"approval": approval.pk, "decision": "approve"}, format="json").status_code == 404
    assert Approval.dangerously_unscoped_objects.get(pk=approval.pk).status == "pending"


def test_cancelling_a_run_that_waits_for_approval_ends_it_at_once(tenant, client_for):
    run, approval = _waiting_run(tenant)
    member = client_for(tenant.member)
    cancelled = member.post(f"{BASE}/runs/{run.pk}/cancel/")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"
    run = Run.dangerously_unscoped_objects.get(pk=run.pk)
    assert run.status == "cancelled" and run.error == "cancelled while waiting for approval"
    # Nobody can decide its approval any more, and the run does not come back.
    (listed,) = member.get(f"{BASE}/runs/{run.pk}/approvals/").json()
    assert listed["status"] == "expired" and listed["reason"] == "the run was cancelled"
    rejected = member.post(
        f"{BASE}/runs/{run.pk}/approvals/", {"approval": approval.pk, "decision": "reject"}, format="json"
    )
    assert rejected.status_code == 409
    assert rejected.json()["error"]["message"] == "this approval is already expired (the run was cancelled)"
    run, _ = _continue_without_tool(tenant, run)
    assert run.status == "cancelled"


def _continue_without_tool(tenant, run):
    with organization_scope(tenant.organization):
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        return run, ToolCall.objects.filter(run=run).count()


def test_recovery_ends_a_run_left_queued_or_waiting_with_a_cancel_pending(tenant):
    """Runs an earlier version left behind: cancelled while waiting, then queued again
    by the decision (or still waiting). Recovery ends them at once, asking no model."""
    from runs.execution import stalled_run_ids

    queued, approval = _waiting_run(tenant)
    waiting, _ = _waiting_run(tenant, name="calc-2")
    Approval.dangerously_unscoped_objects.filter(pk=approval.pk).update(status="rejected")
    Run.dangerously_unscoped_objects.filter(pk=queued.pk).update(status="queued", cancel_requested=True)
    Run.dangerously_unscoped_objects.filter(pk=waiting.pk).update(cancel_requested=True)

    stalled = stalled_run_ids()
    assert sorted(stalled) == sorted([(tenant.organization.pk, queued.pk), (tenant.organization.pk, waiting.pk)])
    for _organization_id, run_id in stalled:
        with organization_scope(tenant.organization):
            run_execute(run_id=run_id)
    queued = Run.dangerously_unscoped_objects.get(pk=queued.pk)
    waiting = Run.dangerously_unscoped_objects.get(pk=waiting.pk)
    assert (queued.status, queued.error) == ("cancelled", "cancelled")
    assert (waiting.status, waiting.error) == ("cancelled", "cancelled while waiting for approval")
    assert queued.llm_call_count == waiting.llm_call_count == 1, "no model call after the cancellation"
    assert Approval.dangerously_unscoped_objects.filter(run=waiting, status="pending").count() == 0
    assert stalled_run_ids() == []


def test_a_cancel_that_lands_while_the_run_starts_waiting_ends_it(tenant, monkeypatch):
    """The cancel finds the run still running (only asks it to stop); the worker then
    parks it waiting for approval, sees the cancellation, and ends it."""
    from runs.execution import run_cancel, tool_calls

    request_approval = tool_calls.approval_request

    def cancelled_meanwhile(*, run, call):
        run_cancel(run=Run.objects.get(pk=run.pk), actor=tenant.member)
        return request_approval(run=run, call=call)

    monkeypatch.setattr(tool_calls, "approval_request", cancelled_meanwhile)
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project,
            actor=None,
            name="calc",
            model="offline",
            tools=["calculator"],
            approval_tools=["calculator"],
        )
        run = run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6 * 7?")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        approval = Approval.objects.get(run=run)
    assert run.status == "cancelled" and run.error == "cancelled while waiting for approval"
    assert approval.status == "expired" and approval.reason == "the run was cancelled"
