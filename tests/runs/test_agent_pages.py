"""The agent pages: the agents list and a new agent, one agent (versions, edit, start a
run), webhook tools with their secret shown once, and cancelling an executed run from
its page; who may do what, and tenant isolation of every page and action."""

from __future__ import annotations

import html
import re
import time

import pytest

from agentops import crypto
from agentops.scoping import organization_scope
from runs.execution import run_start
from runs.models import Agent, AgentVersion, Run, WebhookTool
from runs.services.agents import agent_create, webhook_tool_create
from runs.tools.webhook import signature
from tests.runs.test_pages import T0, store, support_run

BASE = "/o/acme/p/agent/runs"


def text(response) -> str:
    return response.content.decode()


@pytest.fixture
def signed_in(client):
    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


def make_agent(tenant, name: str = "calc", **fields) -> Agent:
    config = {"model": "offline", "tools": ["calculator"], **fields}
    with organization_scope(tenant.organization):
        return agent_create(project=tenant.project, actor=tenant.member, name=name, **config)


def make_tool(tenant, name: str = "lookup_order") -> WebhookTool:
    with organization_scope(tenant.organization):
        tool, _secret = webhook_tool_create(
            project=tenant.project, actor=tenant.member, name=name, url="https://tools.example.com/hook"
        )
    return tool


def start(tenant, agent: Agent, user_input: str = "What is 6 * 7?") -> Run:
    with organization_scope(tenant.organization):
        return run_start(project=tenant.project, agent=agent, actor=tenant.member, input=user_input)


def count(tenant, model) -> int:
    with organization_scope(tenant.organization):
        return model.objects.filter(project=tenant.project).count()


def new_agent_form(**overrides) -> dict:
    return {
        "name": "support-bot",
        "description": "Answers order questions",
        "model": "offline",
        "system_prompt": "Use the calculator.\r\nBe brief.",  # as browsers send a textarea
        "tools": ["calculator", "memory_set"],
        "approval_tools": ["memory_set"],
        "temperature": "0.2",
        "top_p": "",
        "max_tokens": "512",
        "random_seed": "7",
        "step_limit": "10",
        **overrides,
    }


# --- Reading: every role ---------------------------------------------------------------------


def test_viewer_sees_the_agent_pages_without_their_forms(signed_in, tenant):
    agent = make_agent(tenant, description="Adds numbers")
    make_tool(tenant)
    client = signed_in(tenant.viewer)

    listing = client.get(f"{BASE}/agents/")
    assert listing.status_code == 200
    assert f'href="{BASE}/agents/{agent.pk}/"' in text(listing) and "Adds numbers" in text(listing)
    assert 'id="new-agent"' not in text(listing)

    detail = client.get(f"{BASE}/agents/{agent.pk}/")
    assert detail.status_code == 200
    assert 'id="edit-agent"' not in text(detail) and "Members start runs" in text(detail)
    assert 'id="version-1"' in text(detail)

    # A version that is no number shows the latest: "²" passed str.isdigit() but not int().
    for version in ("two", "²"):
        assert 'id="version-1"' in text(client.get(f"{BASE}/agents/{agent.pk}/", {"version": version}))

    tools = client.get(f"{BASE}/agents/tools/")
    assert tools.status_code == 200 and "lookup_order" in text(tools)
    assert 'id="new-tool"' not in text(tools) and "Delete</button>" not in text(tools)


def test_runs_subnav_links_to_the_agents(signed_in, tenant):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/"))
    assert f'href="{BASE}/agents/"' in page


def test_new_agent_form_offers_the_project_tools_marked_builtin_or_webhook(signed_in, tenant):
    make_tool(tenant)
    page = text(signed_in(tenant.member).get(f"{BASE}/agents/"))
    assert 'value="calculator"' in page and 'value="lookup_order"' in page
    assert '<span class="badge badge-webhook">webhook</span>' in page and "built-in</span>" in page
    assert "runs without any key" in page and "mistral-large-latest" in page


# --- Refused writes: viewers -----------------------------------------------------------------


def test_viewer_cannot_create_edit_start_cancel_or_change_tools(signed_in, tenant):
    agent = make_agent(tenant)
    tool = make_tool(tenant)
    run = start(tenant, agent)
    client = signed_in(tenant.viewer)

    attempts = [
        (f"{BASE}/agents/", new_agent_form()),
        (f"{BASE}/agents/{agent.pk}/edit/", new_agent_form(model="mistral-small-latest")),
        (f"{BASE}/agents/{agent.pk}/runs/", {"input": "1 + 1"}),
        (f"{BASE}/agents/tools/", {"name": "other", "url": "https://x.example.com/", "timeout_seconds": "5"}),
        (f"{BASE}/agents/tools/{tool.pk}/delete/", {}),
        (f"{BASE}/{run.pk}/cancel/", {}),
    ]
    for url, data in attempts:
        response = client.post(url, data)
        assert response.status_code == 403, url
        assert "You can’t do that here" in text(response)

    assert count(tenant, Agent) == 1 and count(tenant, AgentVersion) == 1
    assert count(tenant, Run) == 1 and count(tenant, WebhookTool) == 1
    with organization_scope(tenant.organization):
        run.refresh_from_db()
    assert run.status == "queued" and not run.cancel_requested


def test_viewer_sees_no_cancel_button_on_an_executed_run(signed_in, tenant):
    run = start(tenant, make_agent(tenant))
    page = text(signed_in(tenant.viewer).get(f"{BASE}/{run.pk}/"))
    assert 'id="run-cancel"' not in page
    assert 'id="run-agent-version"' in page


# --- A member's whole journey ------------------------------------------------------------------


def test_member_creates_edits_starts_and_cancels(signed_in, tenant, django_capture_on_commit_callbacks):
    client = signed_in(tenant.member)

    created = client.post(f"{BASE}/agents/", new_agent_form())
    with organization_scope(tenant.organization):
        agent = Agent.objects.get(project=tenant.project, name="support-bot")
        first = AgentVersion.objects.get(agent=agent, number=1)
    assert created.status_code == 302 and created["Location"] == f"{BASE}/agents/{agent.pk}/"
    assert agent.description == "Answers order questions"
    assert first.tools == ["calculator", "memory_set"] and first.approval_tools == ["memory_set"]
    assert first.parameters == {"temperature": 0.2, "max_tokens": 512, "random_seed": 7}
    assert first.step_limit == 10 and first.system_prompt == "Use the calculator.\nBe brief."

    # The edit form is prefilled from the latest version.
    page = text(client.get(created["Location"]))
    assert "was created (version 1)" in page
    assert re.search(r'name="tools" value="memory_set"[^>]*checked', page)
    assert re.search(r'name="random_seed" value="7"', page)

    edited = client.post(
        f"{BASE}/agents/{agent.pk}/edit/",
        new_agent_form(model="mistral-small-latest", tools=["calculator"], approval_tools=[], temperature="0.9"),
    )
    assert edited.status_code == 302 and edited["Location"] == f"{BASE}/agents/{agent.pk}/?version=2#version-view"
    with organization_scope(tenant.organization):
        agent.refresh_from_db()
        second = AgentVersion.objects.get(agent=agent, number=2)
        unchanged = AgentVersion.objects.get(pk=first.pk)
    assert agent.latest_version == 2
    assert second.model == "mistral-small-latest" and second.tools == ["calculator"] and second.approval_tools == []
    assert second.parameters["temperature"] == 0.9
    assert (unchanged.model, unchanged.tools, unchanged.parameters) == (first.model, first.tools, first.parameters)

    # Version 2 is shown compared with version 1.
    page = text(client.get(edited["Location"]))
    assert "Saved as version 2" in page
    assert re.search(r'<tr class="diff-changed" data-field="model">', page)
    assert re.search(r'<tr class="diff-changed" data-field="temperature">', page)
    assert re.search(r'<tr class="diff-same" data-field="step_limit">', page)

    with django_capture_on_commit_callbacks(execute=True) as callbacks:
        started = client.post(f"{BASE}/agents/{agent.pk}/runs/", {"input": "What is 6 * 7?", "version": ""})
    # The run is handed to a worker once committed (no worker here: the message waits in Redis).
    assert any(callback.__qualname__.startswith("create_executed_run.") for callback in callbacks)
    with organization_scope(tenant.organization):
        run = Run.objects.get(project=tenant.project)
    assert started.status_code == 302 and started["Location"] == f"{BASE}/{run.pk}/"
    assert run.status == "queued" and run.executed_version_id == second.pk and run.input == "What is 6 * 7?"

    run_page = text(client.get(started["Location"]))
    assert 'id="run-cancel"' in run_page and f'action="{BASE}/{run.pk}/cancel/"' in run_page
    assert f'href="{BASE}/agents/{agent.pk}/?version=2#version-view"' in run_page

    # The agent's page lists it among its recent runs.
    assert f'id="run-{run.pk}"' in text(client.get(f"{BASE}/agents/{agent.pk}/"))

    cancelled = client.post(f"{BASE}/{run.pk}/cancel/")
    assert cancelled.status_code == 302 and cancelled["Location"] == f"{BASE}/{run.pk}/"
    with organization_scope(tenant.organization):
        run.refresh_from_db()
    assert run.status == "cancelled" and run.cancel_requested
    run_page = text(client.get(f"{BASE}/{run.pk}/"))
    assert "The run was cancelled." in run_page and 'id="run-cancel"' not in run_page


def test_a_run_of_an_earlier_version_with_overrides(signed_in, tenant, django_capture_on_commit_callbacks):
    agent = make_agent(tenant)
    client = signed_in(tenant.member)
    client.post(f"{BASE}/agents/{agent.pk}/edit/", new_agent_form(model="mistral-small-latest"))
    with django_capture_on_commit_callbacks(execute=False):
        response = client.post(
            f"{BASE}/agents/{agent.pk}/runs/",
            {"input": "2 + 2", "version": "1", "temperature": "0.3", "random_seed": "11"},
        )
    assert response.status_code == 302
    with organization_scope(tenant.organization):
        run = Run.objects.select_related("executed_version").get(project=tenant.project)
    assert run.executed_version.number == 1
    assert run.execution["parameters"] == {"temperature": 0.3, "random_seed": 11}


def test_starting_without_input_or_with_bad_overrides_stays_on_the_form(signed_in, tenant):
    agent = make_agent(tenant)
    client = signed_in(tenant.member)
    empty = client.post(f"{BASE}/agents/{agent.pk}/runs/", {"input": ""})
    assert empty.status_code == 400 and "This field is required." in text(empty)
    hot = client.post(f"{BASE}/agents/{agent.pk}/runs/", {"input": "1+1", "temperature": "5"})
    assert hot.status_code == 400 and "Temperature must be between 0.0 and 2.0" in text(hot)
    assert count(tenant, Run) == 0


# --- Service errors on the forms -------------------------------------------------------------


def test_service_errors_are_shown_on_the_agent_forms(signed_in, tenant):
    make_agent(tenant, name="support-bot")
    client = signed_in(tenant.member)

    duplicate = client.post(f"{BASE}/agents/", new_agent_form())
    assert duplicate.status_code == 409
    assert "An agent named &#x27;support-bot&#x27; already exists in this project" in text(duplicate)

    stray = client.post(f"{BASE}/agents/", new_agent_form(name="other", tools=["calculator"]))
    assert stray.status_code == 400 and "&#x27;memory_set&#x27; needs approval but is not one of the agent" in text(
        stray
    )

    no_model = client.post(f"{BASE}/agents/", new_agent_form(name="other", model=""))
    assert no_model.status_code == 400 and "This field is required." in text(no_model)
    assert count(tenant, Agent) == 1


def test_a_bad_edit_keeps_the_versions_and_opens_the_form_with_the_error(signed_in, tenant):
    agent = make_agent(tenant)
    response = signed_in(tenant.member).post(f"{BASE}/agents/{agent.pk}/edit/", new_agent_form(step_limit="0"))
    assert response.status_code == 400
    assert "the step limit must be between 1 and 500".capitalize() in text(response)
    assert '<details class="edit-agent" open>' in text(response)
    assert count(tenant, AgentVersion) == 1


# --- Webhook tools -----------------------------------------------------------------------------


def test_webhook_tool_secret_is_shown_once(signed_in, tenant):
    client = signed_in(tenant.member)
    response = client.post(
        f"{BASE}/agents/tools/",
        {
            "name": "lookup_order",
            "url": "https://tools.example.com/lookup",
            "description": "Finds an order",
            "parameters": '{"type": "object", "properties": {"order_id": {"type": "string"}}}',
            "timeout_seconds": "5",
        },
    )
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    secret = re.search(r'id="tool-secret" class="secret-value">(whsec_[\w-]+)<', text(response)).group(1)
    assert "X-AgentOps-Signature" in text(response)
    with organization_scope(tenant.organization):
        tool = WebhookTool.objects.get(project=tenant.project)
    assert crypto.decrypt(tool.secret_ciphertext) == secret
    assert tool.parameters["properties"] == {"order_id": {"type": "string"}} and tool.timeout_seconds == 5.0

    again = text(client.get(f"{BASE}/agents/tools/"))
    assert "lookup_order" in again and "tools.example.com/lookup" in again
    assert secret not in again and 'id="tool-secret"' not in again


@pytest.mark.parametrize(
    ("schema", "message"),
    [
        ("{not json", "This is not valid JSON"),
        ("[1, 2]", "The schema must be a JSON object"),
        ("[" * 10_000 + "]" * 10_000, "This JSON cannot be used: nested deeper than 64 levels."),
        ('{"type": "object", "description": "a\\u0000b"}', "description: contains a NUL character"),
        ('{"type": "string"}', "Parameters must be a JSON schema object with &quot;type&quot;: &quot;object&quot;"),
    ],
)
def test_a_bad_json_schema_is_rejected_with_a_message(signed_in, tenant, schema, message):
    response = signed_in(tenant.member).post(
        f"{BASE}/agents/tools/",
        {"name": "lookup_order", "url": "https://tools.example.com/", "parameters": schema, "timeout_seconds": "5"},
    )
    assert response.status_code == 400 and message in text(response)
    assert count(tenant, WebhookTool) == 0


def test_a_private_webhook_url_is_refused_on_the_form(signed_in, tenant, settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    response = signed_in(tenant.member).post(
        f"{BASE}/agents/tools/", {"name": "internal", "url": "http://127.0.0.1:8080/hook", "timeout_seconds": "5"}
    )
    assert response.status_code == 400 and "URL refused" in text(response)
    assert count(tenant, WebhookTool) == 0


def test_member_deletes_a_webhook_tool(signed_in, tenant):
    tool = make_tool(tenant)
    client = signed_in(tenant.member)
    response = client.post(f"{BASE}/agents/tools/{tool.pk}/delete/")
    assert response.status_code == 302 and response["Location"] == f"{BASE}/agents/tools/"
    assert count(tenant, WebhookTool) == 0
    assert "was deleted" in text(client.get(response["Location"]))


def test_the_signature_check_shown_on_the_page_accepts_the_platforms_signature(signed_in, tenant):
    page = text(signed_in(tenant.viewer).get(f"{BASE}/agents/tools/"))
    snippet = html.unescape(re.search(r'<pre class="code"><code>(.*?)</code></pre>', page, re.S).group(1))
    namespace: dict = {}
    exec(compile(snippet, "webhook_tools.html", "exec"), namespace)  # the page's own example, run as written
    check = namespace["is_from_agentops"]
    body, timestamp = b'{"tool":"lookup_order","arguments":{}}', str(int(time.time()))
    signed = signature("whsec_test", timestamp, body)
    assert check("whsec_test", body, timestamp, signed)
    assert not check("whsec_other", body, timestamp, signed)
    an_hour_ago = str(int(time.time()) - 3600)
    assert not check("whsec_test", body, an_hour_ago, signature("whsec_test", an_hour_ago, body)), "a replay"


# --- Cancelling: what cannot be cancelled says why -------------------------------------------


def test_cancelling_a_finished_or_ingested_run_explains_why_not(signed_in, tenant):
    store(tenant.project, support_run("ingested", start=T0))
    run = start(tenant, make_agent(tenant))
    with organization_scope(tenant.organization):
        Run.objects.filter(pk=run.pk).update(status="succeeded")
        ingested = Run.objects.get(trace_id="ingested")
    client = signed_in(tenant.member)

    finished = client.post(f"{BASE}/{run.pk}/cancel/", follow=True)
    assert "The run could not be cancelled: the run already succeeded." in text(finished)
    assert 'id="run-cancel"' not in text(finished)

    other = client.post(f"{BASE}/{ingested.pk}/cancel/", follow=True)
    assert "only runs the platform executes can be cancelled" in text(other)
    assert 'id="run-cancel"' not in text(client.get(f"{BASE}/{ingested.pk}/"))


# --- Tenant isolation --------------------------------------------------------------------------


def test_outsider_gets_404_on_every_agent_page_and_action(signed_in, tenant, outsider):
    agent = make_agent(tenant)
    tool = make_tool(tenant)
    run = start(tenant, agent)
    client = signed_in(outsider)
    for url in (f"{BASE}/agents/", f"{BASE}/agents/{agent.pk}/", f"{BASE}/agents/tools/"):
        assert client.get(url).status_code == 404, url
    for url in (
        f"{BASE}/agents/",
        f"{BASE}/agents/{agent.pk}/edit/",
        f"{BASE}/agents/{agent.pk}/runs/",
        f"{BASE}/agents/tools/",
        f"{BASE}/agents/tools/{tool.pk}/delete/",
        f"{BASE}/{run.pk}/cancel/",
    ):
        assert client.post(url, {"input": "x", "name": "x", "model": "offline"}).status_code == 404, url
    assert count(tenant, Agent) == 1 and count(tenant, WebhookTool) == 1 and count(tenant, Run) == 1


def test_another_tenants_ids_are_404_in_this_project(signed_in, tenant, other_tenant):
    theirs = make_agent(other_tenant)
    their_tool = make_tool(other_tenant)
    their_run = start(other_tenant, theirs)
    client = signed_in(tenant.member)
    assert client.get(f"{BASE}/agents/{theirs.pk}/").status_code == 404
    assert client.post(f"{BASE}/agents/{theirs.pk}/edit/", new_agent_form()).status_code == 404
    assert client.post(f"{BASE}/agents/{theirs.pk}/runs/", {"input": "1+1"}).status_code == 404
    assert client.post(f"{BASE}/agents/tools/{their_tool.pk}/delete/").status_code == 404
    assert client.post(f"{BASE}/{their_run.pk}/cancel/").status_code == 404
    assert count(other_tenant, AgentVersion) == 1 and count(other_tenant, WebhookTool) == 1
    with organization_scope(other_tenant.organization):
        their_run.refresh_from_db()
    assert their_run.status == "queued" and not their_run.cancel_requested
    # Their agents and tools are not offered here either.
    page = text(client.get(f"{BASE}/agents/"))
    assert f'href="{BASE}/agents/{theirs.pk}/"' not in page and 'value="lookup_order"' not in page
