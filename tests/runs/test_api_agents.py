"""Agents, tools and executed runs over the API."""

import json

import pytest

from agentops.scoping import organization_scope
from runs.models import Agent, Run, WebhookTool
from runs.services.agents import agent_create, webhook_tool_create
from tests.isolation import CreateIsolation, DeleteIsolation, ListIsolation, ReadIsolation, UpdateIsolation

BASE = "/api/v1/projects/acme/agent"


def _agent(tenant, name="calc"):
    with organization_scope(tenant.organization):
        return agent_create(project=tenant.project, actor=None, name=name, model="offline", tools=["calculator"])


def test_member_creates_and_edits_an_agent_into_versions(tenant, client_for):
    client = client_for(tenant.member)
    created = client.post(
        f"{BASE}/agents/", {"name": "support", "model": "offline", "tools": ["calculator"]}, format="json"
    )
    assert created.status_code == 201 and created.json()["latest_version"] == 1
    agent_id = created.json()["id"]
    edited = client.patch(f"{BASE}/agents/{agent_id}/", {"system_prompt": "Be brief."}, format="json")
    assert edited.json()["latest_version"] == 2 and edited.json()["version"]["system_prompt"] == "Be brief."
    versions = client.get(f"{BASE}/agents/{agent_id}/versions/").json()
    assert [v["number"] for v in versions] == [2, 1] and versions[1]["system_prompt"] == ""


def test_bad_agent_configuration_is_a_400_naming_the_problem(tenant, client_for):
    response = client_for(tenant.member).post(
        f"{BASE}/agents/", {"name": "x", "model": "offline", "tools": ["shell"]}, format="json"
    )
    assert response.status_code == 400 and "unknown tool 'shell'" in response.json()["error"]["message"]


def test_viewer_cannot_create_agents_or_start_runs(tenant, client_for):
    agent = _agent(tenant)
    client = client_for(tenant.viewer)
    assert client.post(f"{BASE}/agents/", {"name": "x", "model": "offline"}, format="json").status_code == 403
    assert client.post(f"{BASE}/runs/", {"agent": agent.pk, "input": "1+1"}, format="json").status_code == 403


def test_start_is_202_and_idempotent(tenant, client_for):
    agent = _agent(tenant)
    client = client_for(tenant.member)
    body = {"agent": agent.pk, "input": "What is 2 + 2?", "parameters": {"temperature": 0.3}}
    first = client.post(f"{BASE}/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="ci-build-17")
    again = client.post(f"{BASE}/runs/", body, format="json", HTTP_IDEMPOTENCY_KEY="ci-build-17")
    assert first.status_code == again.status_code == 202
    assert first.json()["id"] == again.json()["id"] and first.json()["status"] == "queued"
    with organization_scope(tenant.organization):
        assert Run.objects.count() == 1


def test_api_key_needs_the_execute_scope_to_start(tenant, key_client):
    agent = _agent(tenant)
    body = {"agent": agent.pk, "input": "3*3"}
    assert key_client(tenant.project, ["read"]).post(f"{BASE}/runs/", body, format="json").status_code == 403
    assert key_client(tenant.project, ["execute"]).post(f"{BASE}/runs/", body, format="json").status_code == 202


def test_cancel_a_queued_run(tenant, client_for):
    agent = _agent(tenant)
    client = client_for(tenant.member)
    run_id = client.post(f"{BASE}/runs/", {"agent": agent.pk, "input": "1+1"}, format="json").json()["id"]
    cancelled = client.post(f"{BASE}/runs/{run_id}/cancel/")
    assert cancelled.status_code == 202 and cancelled.json()["status"] == "cancelled"
    assert client.post(f"{BASE}/runs/{run_id}/cancel/").status_code == 409


def test_tools_list_and_webhook_secret_shown_once(tenant, client_for):
    client = client_for(tenant.member)
    created = client.post(
        f"{BASE}/webhook-tools/", {"name": "crm_lookup", "url": "http://127.0.0.1:9/hook"}, format="json"
    )
    assert created.status_code == 201 and created.json()["secret"].startswith("whsec_")
    listed = client.get(f"{BASE}/webhook-tools/").json()
    assert "secret" not in listed[0] and listed[0]["name"] == "crm_lookup"
    names = {tool["name"]: tool["builtin"] for tool in client.get(f"{BASE}/tools/").json()}
    assert names["calculator"] is True and names["crm_lookup"] is False


def test_start_with_another_projects_agent_is_404(tenant, other_tenant, client_for):
    foreign = _agent(other_tenant)
    response = client_for(tenant.member).post(f"{BASE}/runs/", {"agent": foreign.pk, "input": "x"}, format="json")
    assert response.status_code == 404


class TestAgentIsolation(ReadIsolation, UpdateIsolation, ListIsolation, CreateIsolation):
    update_body = {"system_prompt": "taken over"}
    create_body = {"name": "support", "model": "offline"}

    def make_object(self, tenant):
        return _agent(tenant, name=f"agent-{tenant.organization.slug}")

    def detail_url(self, url_tenant, obj):
        return f"/api/v1/projects/{url_tenant.organization.slug}/agent/agents/{obj.pk}/"

    def list_url(self, tenant):
        return f"/api/v1/projects/{tenant.organization.slug}/agent/agents/"

    def created_organization_id(self, response):
        return Agent.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id


class TestAgentIsolationWithApiKey(TestAgentIsolation):
    as_key = True


class TestWebhookToolIsolation(ReadIsolation, DeleteIsolation, ListIsolation, CreateIsolation):
    create_body = {"name": "crm_lookup", "url": "http://127.0.0.1:9/hook"}

    def make_object(self, tenant):
        with organization_scope(tenant.organization):
            tool, _secret = webhook_tool_create(
                project=tenant.project, actor=None, name="lookup", url="http://127.0.0.1:9/hook"
            )
        return tool

    def detail_url(self, url_tenant, tool):
        return f"/api/v1/projects/{url_tenant.organization.slug}/agent/webhook-tools/{tool.pk}/"

    def list_url(self, tenant):
        return f"/api/v1/projects/{tenant.organization.slug}/agent/webhook-tools/"

    def created_organization_id(self, response):
        return WebhookTool.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id


class TestWebhookToolIsolationWithApiKey(TestWebhookToolIsolation):
    as_key = True


def test_a_run_start_with_fields_it_does_not_have_is_refused_naming_them(tenant, client_for):
    agent = _agent(tenant)
    client = client_for(tenant.member)
    body = {"agent": agent.pk, "input": "1+1", "session_id": "s-1", "previous_run": 7}
    response = client.post(f"{BASE}/runs/", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "unknown fields 'previous_run', 'session_id': the fields are agent, version, input, parameters"
    )
    with organization_scope(tenant.organization):
        assert not Run.objects.exists()
    # The known fields alone still start the run.
    assert client.post(f"{BASE}/runs/", {"agent": agent.pk, "input": "1+1"}, format="json").status_code == 202


def test_a_webhook_tool_with_a_misnamed_field_is_refused_not_created_empty(tenant, client_for):
    client = client_for(tenant.member)
    body = {"name": "crm_lookup", "url": "http://127.0.0.1:9/hook", "schema": {"type": "object"}}
    response = client.post(f"{BASE}/webhook-tools/", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("unknown field 'schema': the fields are name, url,")
    assert client.get(f"{BASE}/webhook-tools/").json() == []


@pytest.mark.parametrize(
    ("text", "problem"),
    [("a\u0000b", "input: contains a NUL character"), ("\ud800", "input: contains an unpaired surrogate")],
    ids=["nul", "lone-surrogate"],
)
def test_a_run_input_that_cannot_be_stored_as_sent_is_refused_not_changed(tenant, client_for, text, problem):
    agent = _agent(tenant)
    body = json.dumps({"agent": agent.pk, "input": text})  # \u0000 and \ud800 as JSON escapes
    response = client_for(tenant.member).post(f"{BASE}/runs/", data=body, content_type="application/json")
    assert response.status_code == 400
    assert problem in response.json()["error"]["message"]
    with organization_scope(tenant.organization):
        assert not Run.objects.exists()
