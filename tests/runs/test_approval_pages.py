"""Approvals on the run's page: the "Waiting for approval" panel in the header, and
approving (as asked or with edited arguments) or rejecting a call through it; who may
decide, and tenant isolation."""

from __future__ import annotations

import html

import pytest

from agentops.scoping import organization_scope
from runs.execution import run_start
from runs.models import Agent, Approval, Run
from tests.runs.test_approvals import _waiting_run

BASE = "/o/acme/p/agent/runs"


@pytest.fixture
def signed_in(client):
    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


def text(response) -> str:
    return html.unescape(response.content.decode())


def decide_url(run, approval, org: str = "acme") -> str:
    return f"/o/{org}/p/agent/runs/{run.pk}/approvals/{approval.pk}/"


def stored(approval) -> Approval:
    return Approval.dangerously_unscoped_objects.get(pk=approval.pk)


def status(run) -> str:
    return Run.dangerously_unscoped_objects.get(pk=run.pk).status


def test_panel_shows_the_pending_approval_with_its_arguments_and_a_form(signed_in, tenant):
    run, approval = _waiting_run(tenant)
    page = text(signed_in(tenant.member).get(f"{BASE}/{run.pk}/"))
    assert "Waiting for approval" in page and 'id="run-approvals"' in page
    assert "calculator" in page and "6 * 7" in page
    assert f'action="{decide_url(run, approval)}"' in page
    assert '"expression": "6 * 7"' in page  # the textarea, prefilled
    assert "Approve" in page and "Reject" in page


def test_live_refresh_renders_the_panel(signed_in, tenant):
    run, _approval = _waiting_run(tenant)
    fragment = text(signed_in(tenant.member).get(f"{BASE}/{run.pk}/live/"))
    assert "Waiting for approval" in fragment


def test_member_approves_and_the_run_is_queued_again(signed_in, tenant, django_capture_on_commit_callbacks):
    run, approval = _waiting_run(tenant)
    client = signed_in(tenant.member)
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            decide_url(run, approval), {"decision": "approve", "arguments": '{"expression": "6 * 7"}'}
        )
    assert response.status_code == 302 and response["Location"] == f"{BASE}/{run.pk}/"
    decided = stored(approval)
    assert decided.status == "approved" and decided.decided_by == tenant.member
    assert decided.approved_arguments == {"expression": "6 * 7"}
    assert status(run) == "queued"
    page = text(client.get(response["Location"]))
    assert "was approved" in page and "Waiting for approval" not in page
    assert "Approved" in page and tenant.member.email in page


def test_edit_arguments_then_approve_stores_the_edited_arguments(signed_in, tenant, django_capture_on_commit_callbacks):
    run, approval = _waiting_run(tenant)
    with django_capture_on_commit_callbacks(execute=False):
        response = signed_in(tenant.member).post(
            decide_url(run, approval), {"decision": "approve", "arguments": '{"expression": "2 * 21"}'}
        )
    assert response.status_code == 302
    decided = stored(approval)
    assert decided.status == "approved" and decided.approved_arguments == {"expression": "2 * 21"}
    assert status(run) == "queued"


@pytest.mark.parametrize("arguments", ["{not json", '["a list"]', '{"a": ' + "[" * 10_000 + "]" * 10_000 + "}"])
def test_invalid_arguments_show_an_error_and_decide_nothing(signed_in, tenant, arguments):
    run, approval = _waiting_run(tenant)
    client = signed_in(tenant.member)
    response = client.post(decide_url(run, approval), {"decision": "approve", "arguments": arguments})
    assert response.status_code == 302
    page = text(client.get(response["Location"]))
    assert "nothing was decided" in page
    assert stored(approval).status == "pending" and status(run) == "waiting"


def test_reject_with_a_reason(signed_in, tenant, django_capture_on_commit_callbacks):
    run, approval = _waiting_run(tenant)
    client = signed_in(tenant.member)
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            decide_url(run, approval), {"decision": "reject", "reason": "not now", "arguments": "{broken"}
        )
    decided = stored(approval)
    assert decided.status == "rejected" and decided.reason == "not now" and decided.approved_arguments is None
    assert status(run) == "queued"
    page = text(client.get(response["Location"]))
    assert "was rejected" in page and "Rejected" in page and "not now" in page


def test_a_decided_approval_cannot_be_decided_again(signed_in, tenant, django_capture_on_commit_callbacks):
    run, approval = _waiting_run(tenant)
    client = signed_in(tenant.member)
    with django_capture_on_commit_callbacks(execute=False):
        client.post(decide_url(run, approval), {"decision": "approve"})
    response = client.post(decide_url(run, approval), {"decision": "reject"})
    assert "already approved" in text(client.get(response["Location"]))
    assert stored(approval).status == "approved"


def test_viewer_sees_the_panel_without_forms_and_cannot_post(signed_in, tenant):
    run, approval = _waiting_run(tenant)
    client = signed_in(tenant.viewer)
    page = text(client.get(f"{BASE}/{run.pk}/"))
    assert "Waiting for approval" in page and "6 * 7" in page
    assert decide_url(run, approval) not in page and 'name="arguments"' not in page
    assert client.post(decide_url(run, approval), {"decision": "approve"}).status_code == 403
    assert stored(approval).status == "pending"


def test_other_tenant_gets_404(signed_in, tenant, other_tenant):
    run, approval = _waiting_run(tenant)
    client = signed_in(other_tenant.owner)
    assert client.post(decide_url(run, approval), {"decision": "approve"}).status_code == 404
    assert client.post(decide_url(run, approval, org="globex"), {"decision": "approve"}).status_code == 404
    assert stored(approval).status == "pending"


def test_approval_of_another_run_is_404(signed_in, tenant):
    run, approval = _waiting_run(tenant)
    with organization_scope(tenant.organization):
        agent = Agent.objects.get(project=tenant.project, name="calc")
        other = run_start(project=tenant.project, agent=agent, actor=tenant.member, input="1 + 1")
    response = signed_in(tenant.member).post(f"{BASE}/{other.pk}/approvals/{approval.pk}/", {"decision": "approve"})
    assert response.status_code == 404 and stored(approval).status == "pending"
