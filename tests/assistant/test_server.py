"""The MCP server at /mcp, driven by the SDK's own streamable-HTTP client against the
platform's ASGI application served by uvicorn (lifespan on, as ``serve`` runs it)."""

from __future__ import annotations

import asyncio
import json
import socket
import threading
import time

import httpx
import httpx2
import pytest
from django.core.management import call_command
from mcp.client.client import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError

from agentops.scoping import organization_scope
from billing.budgets import budget_create, utc_today
from billing.models import UsageDaily
from evals.models import Dataset, Experiment
from jobs.models import Job
from runs.models import Run, Session, Step


@pytest.fixture
def mcp_server(transactional_db):
    """The platform's ASGI application under uvicorn on a free loopback port, lifespan on."""
    import uvicorn

    from agentops.asgi import application

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port = sock.getsockname()[1]
    server = uvicorn.Server(
        uvicorn.Config(application, host="127.0.0.1", port=port, lifespan="on", log_level="warning")
    )
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 30  # a hang guard, far above any start-up
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("uvicorn did not start")
        time.sleep(0.05)
    yield f"http://127.0.0.1:{port}"
    server.should_exit = True
    thread.join(timeout=10)


@pytest.fixture
def demo(tenant):
    """The demo runs, evaluations and jobs in acme/agent."""
    with organization_scope(tenant.organization):
        call_command("seed_demo_runs", "acme/agent", verbosity=0)
        call_command("seed_demo_evals", "acme/agent", verbosity=0)
        call_command("seed_demo_jobs", "acme/agent", verbosity=0)
    return tenant


def session(url: str, raw_key: str | None):
    headers = {"Authorization": f"Bearer {raw_key}"} if raw_key else {}
    return Client(streamable_http_client(f"{url}/mcp", http_client=httpx2.AsyncClient(headers=headers, timeout=60)))


def call(url: str, raw_key: str, name: str, arguments: dict | None = None):
    async def go():
        async with session(url, raw_key) as client:
            return await client.call_tool(name, arguments or {})

    return asyncio.run(go())


def answer(result) -> dict:
    assert not result.is_error, result.content[0].text
    return result.structured_content


def error_text(result) -> str:
    assert result.is_error
    return result.content[0].text


def test_lists_tools_resources_and_prompts(mcp_server, tenant, make_api_key):
    _key, raw = make_api_key(tenant.project, scopes=("read",))

    async def go():
        async with session(mcp_server, raw) as client:
            return (
                await client.list_tools(),
                await client.list_resource_templates(),
                await client.list_prompts(),
            )

    tools, templates, prompts = asyncio.run(go())
    by_name = {tool.name: tool for tool in tools.tools}
    assert set(by_name) == {
        "search_runs",
        "get_run",
        "get_step",
        "compare_runs",
        "list_sessions",
        "get_session",
        "get_leaderboard",
        "compare_experiments",
        "get_spend",
        "get_budget_status",
        "list_jobs",
        "get_job_logs",
        "estimate_job_cost",
        "replay_run",
        "start_run",
        "start_experiment",
        "run_gate",
        "submit_job",
        "add_run_to_dataset",
    }
    assert by_name["get_run"].input_schema["required"] == ["run_id"]
    assert by_name["get_run"].description
    assert {template.uri_template for template in templates.resource_templates} == {
        "agentops://runs/{run_id}",
        "agentops://datasets/{dataset}",
        "agentops://datasets/{dataset}/leaderboard",
        "agentops://experiments/{experiment_id}",
        "agentops://sessions/{session_id}",
    }
    assert {prompt.name for prompt in prompts.prompts} == {"debug-run", "cost-review", "regression-triage"}


def test_without_a_valid_key_the_answer_is_401_pointing_at_the_metadata(mcp_server, tenant, make_api_key):
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    headers = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
    for authorization in (None, "Bearer not-a-key", "Basic abc"):
        sent = {**headers, **({"Authorization": authorization} if authorization else {})}
        response = httpx.post(f"{mcp_server}/mcp", json=body, headers=sent)
        assert response.status_code == 401
        challenge = response.headers["www-authenticate"]
        assert challenge.startswith("Bearer ")
        assert f'resource_metadata="{mcp_server}/.well-known/oauth-protected-resource/mcp"' in challenge
    key, raw = make_api_key(tenant.project, scopes=("read",))
    from agentops.services.api_keys import api_key_revoke

    with organization_scope(tenant.organization):
        api_key_revoke(key=key, actor=tenant.owner)
    response = httpx.post(f"{mcp_server}/mcp", json=body, headers={**headers, "Authorization": f"Bearer {raw}"})
    assert response.status_code == 401 and "revoked" in response.json()["error_description"]

    metadata = httpx.get(f"{mcp_server}/.well-known/oauth-protected-resource/mcp")
    assert metadata.status_code == 200
    assert metadata.json()["resource"] == f"{mcp_server}/mcp"
    assert metadata.json()["bearer_methods_supported"] == ["header"]
    assert metadata.json()["scopes_supported"] == ["read", "execute"]


def test_a_host_outside_allowed_hosts_is_refused(mcp_server):
    response = httpx.get(f"{mcp_server}/.well-known/oauth-protected-resource/mcp", headers={"Host": "evil.example"})
    assert response.status_code == 400


def test_every_read_tool_answers_from_the_project(mcp_server, demo, make_api_key):
    _key, raw = make_api_key(demo.project, scopes=("read",))
    with organization_scope(demo.organization):
        runs = list(Run.objects.filter(project=demo.project).order_by("id"))
        step = Step.objects.filter(run=runs[0]).first()
        dataset = Dataset.objects.filter(project=demo.project).first()
        experiments = list(Experiment.objects.filter(dataset=dataset).order_by("id"))
        job = Job.objects.filter(project=demo.project).first()
        backend = job.backend

    found = answer(call(mcp_server, raw, "search_runs", {"limit": 2}))
    assert len(found["runs"]) == 2 and found["next_cursor"]
    more = answer(call(mcp_server, raw, "search_runs", {"limit": 2, "cursor": found["next_cursor"]}))
    assert {run["id"] for run in more["runs"]}.isdisjoint({run["id"] for run in found["runs"]})
    failed = answer(call(mcp_server, raw, "search_runs", {"status": ["failed"], "limit": 100}))
    assert all(run["status"] == "failed" for run in failed["runs"])

    run = answer(call(mcp_server, raw, "get_run", {"run_id": runs[0].pk}))
    assert run["run"]["id"] == runs[0].pk and run["steps_total"] == len(run["steps"]) and "transcript" in run
    assert (
        answer(call(mcp_server, raw, "get_step", {"run_id": runs[0].pk, "step_id": step.pk}))["step"]["id"] == step.pk
    )
    compared = answer(call(mcp_server, raw, "compare_runs", {"a": runs[0].pk, "b": runs[1].pk}))
    assert "settings" in compared

    board = answer(call(mcp_server, raw, "get_leaderboard", {"dataset": dataset.name}))
    assert board["dataset"]["id"] == dataset.pk and len(board["rows"]) == board["rows_total"] == 2
    first = answer(call(mcp_server, raw, "get_leaderboard", {"dataset": dataset.pk, "limit": 1}))
    rest = answer(call(mcp_server, raw, "get_leaderboard", {"dataset": dataset.pk, "cursor": first["next_cursor"]}))
    assert first["rows"] + rest["rows"] == board["rows"] and rest["next_cursor"] is None
    both = answer(call(mcp_server, raw, "compare_experiments", {"a": experiments[0].pk, "b": experiments[1].pk}))
    assert both["a"]["id"] == experiments[0].pk and "metrics" in both

    UsageDaily.dangerously_unscoped_objects.create(
        organization=demo.organization, project=demo.project, day=utc_today(), model="model-x", cost="2.5"
    )
    by_model = answer(call(mcp_server, raw, "get_spend", {"by": "model"}))
    assert {"name": "model-x"}.items() <= next(row for row in by_model["rows"] if row["name"] == "model-x").items()
    for by in ("day", "project", "agent", "key"):
        assert answer(call(mcp_server, raw, "get_spend", {"by": by}))["by"] == by
    with organization_scope(demo.organization):
        budget_create(organization=demo.organization, actor=demo.owner, name="Cap", amount="100", hard_limit=True)
    budgets = answer(call(mcp_server, raw, "get_budget_status"))["budgets"]
    assert budgets[0]["name"] == "Cap" and budgets[0]["blocked"] is False

    jobs = answer(call(mcp_server, raw, "list_jobs"))
    assert job.pk in {row["id"] for row in jobs["jobs"]}
    logs = answer(call(mcp_server, raw, "get_job_logs", {"job_id": job.pk}))
    assert logs["job_id"] == job.pk and "next_after" in logs
    estimate = answer(call(mcp_server, raw, "estimate_job_cost", {"backend": backend.name, "hardware": job.hardware}))
    assert "amount" in estimate


def test_sessions_read_with_their_turns_as_a_tool_and_a_resource(mcp_server, demo, make_api_key):
    from runs.services.demo import DEMO_SESSION, DEMO_SESSION_MESSAGES

    _key, raw = make_api_key(demo.project, scopes=("read",))
    with organization_scope(demo.organization):
        demo_session = Session.objects.get(project=demo.project, title=DEMO_SESSION)

    listed = answer(call(mcp_server, raw, "list_sessions"))
    assert [row["title"] for row in listed["sessions"]] == [DEMO_SESSION] and listed["next_cursor"] is None
    assert answer(call(mcp_server, raw, "list_sessions", {"status": "closed"}))["sessions"] == []
    read = answer(call(mcp_server, raw, "get_session", {"session_id": demo_session.pk}))
    assert read["id"] == demo_session.pk and read["status"] == "open"
    assert [turn["input"] for turn in read["turns"]] == DEMO_SESSION_MESSAGES
    assert all(turn["status"] == "succeeded" and turn["run"] for turn in read["turns"])
    assert "status" in error_text(call(mcp_server, raw, "list_sessions", {"status": "paused"}))

    async def resource():
        async with session(mcp_server, raw) as client:
            return json.loads((await client.read_resource(f"agentops://sessions/{demo_session.pk}")).contents[0].text)

    assert asyncio.run(resource())["turns"] == read["turns"]


def test_a_long_run_is_cut_and_pages_with_a_cursor(mcp_server, tenant, make_api_key):
    from datetime import timedelta

    from runs.events import RunEvent, StepEvent
    from tests.runs.factories import T0, run_of, store

    _key, raw = make_api_key(tenant.project, scopes=("read",))
    big = "x" * 5000
    store(
        tenant.project,
        runs=[RunEvent("t-long", {"name": "long", "input": big, "started_at": T0})],
        steps=[
            StepEvent(
                trace_id="t-long",
                span_id=f"s{i}",
                kind="llm",
                name=f"step {i}",
                input=big,
                started_at=T0 + timedelta(seconds=i),
            )
            for i in range(40)
        ],
    )
    run = run_of(tenant.project, "t-long")
    first = answer(call(mcp_server, raw, "get_run", {"run_id": run.pk}))
    assert first["truncated"] is True and first["next_cursor"]
    assert first["run"]["input"].endswith("[cut: 3000 more characters]")
    seen = [step["id"] for step in first["steps"]]
    page = first
    while page["next_cursor"]:
        page = answer(call(mcp_server, raw, "get_run", {"run_id": run.pk, "cursor": page["next_cursor"]}))
        seen += [step["id"] for step in page["steps"]]
    assert len(seen) == len(set(seen)) == 40
    assert "not a cursor this tool gave" in error_text(
        call(mcp_server, raw, "get_run", {"run_id": run.pk, "cursor": "zz"})
    )


def test_another_tenants_objects_are_not_found(mcp_server, demo, other_tenant, make_api_key):
    _key, raw = make_api_key(other_tenant.project, scopes=("read", "execute"))
    with organization_scope(demo.organization):
        run = Run.objects.filter(project=demo.project).first()
        dataset = Dataset.objects.filter(project=demo.project).first()
        experiment = Experiment.objects.filter(project=demo.project).first()
        job = Job.objects.filter(project=demo.project).first()
        demo_session = Session.objects.filter(project=demo.project).first()
    assert error_text(call(mcp_server, raw, "get_run", {"run_id": run.pk})) == (
        "Error executing tool get_run: not_found: run not found"
    )
    assert "not_found" in error_text(call(mcp_server, raw, "get_leaderboard", {"dataset": dataset.pk}))
    assert "not_found" in error_text(call(mcp_server, raw, "get_job_logs", {"job_id": job.pk}))
    assert error_text(call(mcp_server, raw, "get_session", {"session_id": demo_session.pk})) == (
        "Error executing tool get_session: not_found: session not found"
    )
    assert answer(call(mcp_server, raw, "list_sessions"))["sessions"] == []
    assert "not_found" in error_text(call(mcp_server, raw, "replay_run", {"run_id": run.pk}))
    assert answer(call(mcp_server, raw, "search_runs"))["runs"] == []

    async def read(uri):
        async with session(mcp_server, raw) as client:
            try:
                await client.read_resource(uri)
            except MCPError as error:
                return error
        return None

    for uri in (
        f"agentops://runs/{run.pk}",
        f"agentops://experiments/{experiment.pk}",
        f"agentops://sessions/{demo_session.pk}",
    ):
        error = asyncio.run(read(uri))
        assert error is not None and error.error.code == -32002
        assert "not found" in error.error.message


def test_resources_and_prompts(mcp_server, demo, make_api_key):
    _key, raw = make_api_key(demo.project, scopes=("read",))
    with organization_scope(demo.organization):
        run = Run.objects.filter(project=demo.project).first()
        dataset = Dataset.objects.filter(project=demo.project).first()
        experiment = Experiment.objects.filter(project=demo.project).first()

    async def go():
        async with session(mcp_server, raw) as client:
            contents = {}
            for uri in (
                f"agentops://runs/{run.pk}",
                f"agentops://datasets/{dataset.name}",
                f"agentops://datasets/{dataset.pk}/leaderboard",
                f"agentops://experiments/{experiment.pk}",
            ):
                contents[uri] = json.loads((await client.read_resource(uri)).contents[0].text)
            prompt = await client.get_prompt("debug-run", {"run_id": str(run.pk)})
            return contents, prompt

    contents, prompt = asyncio.run(go())
    assert contents[f"agentops://runs/{run.pk}"]["run"]["id"] == run.pk
    assert contents[f"agentops://datasets/{dataset.name}"]["id"] == dataset.pk
    assert contents[f"agentops://datasets/{dataset.pk}/leaderboard"]["dataset"]["name"] == dataset.name
    assert contents[f"agentops://experiments/{experiment.pk}"]["id"] == experiment.pk
    assert f"get_run with run_id={run.pk}" in prompt.messages[0].content.text


def test_bad_input_is_a_clear_error_never_a_crash(mcp_server, tenant, make_api_key):
    _key, raw = make_api_key(tenant.project, scopes=("read",))
    assert "Unknown tool" in error_text(call(mcp_server, raw, "no_such_tool"))
    assert "run_id" in error_text(call(mcp_server, raw, "get_run", {"run_id": "abc"}))
    assert "started_after" in error_text(call(mcp_server, raw, "search_runs", {"started_after": "yesterday"}))
    text = error_text(call(mcp_server, raw, "get_spend", {"by": "colour"}))
    assert "by" in text and "Traceback" not in text


def test_a_read_key_cannot_act(mcp_server, demo, make_api_key):
    _key, raw = make_api_key(demo.project, scopes=("read",))
    with organization_scope(demo.organization):
        run = Run.objects.filter(project=demo.project).first()
        count = Run.objects.filter(project=demo.project).count()
    text = error_text(call(mcp_server, raw, "replay_run", {"run_id": run.pk}))
    assert (
        text == "Error executing tool replay_run: permission_denied: "
        "this API key's scopes (read) do not allow it to replay a run"
    )
    with organization_scope(demo.organization):
        assert Run.objects.filter(project=demo.project).count() == count


def test_actions_run_through_the_services(mcp_server, demo, make_api_key):
    _key, raw = make_api_key(demo.project, scopes=("read", "execute"))
    with organization_scope(demo.organization):
        run = Run.objects.filter(project=demo.project, status="succeeded").first()
        executed = Run.objects.filter(project=demo.project, status="succeeded").exclude(execution={}).first()
        dataset = Dataset.objects.filter(project=demo.project).first()
        ended = Experiment.objects.filter(dataset=dataset, status="succeeded").first()
        evaluator_name = ended.evaluators[0]["name"]
        from runs.models import Agent

        agent = Agent.objects.filter(project=demo.project).first()
        job = Job.objects.filter(project=demo.project).first()

    added = answer(call(mcp_server, raw, "add_run_to_dataset", {"dataset": dataset.name, "run_id": run.pk}))
    assert added["item_key"] == f"run-{run.pk}" and added["version"] == dataset.latest_version + 1
    gate = answer(
        call(
            mcp_server,
            raw,
            "run_gate",
            {"experiment_id": ended.pk, "conditions": [{"metric": "cost", "comparator": "<=", "threshold": 1000}]},
        )
    )
    assert gate["status"] == "passed"
    started = answer(call(mcp_server, raw, "start_run", {"agent": agent.name, "input": "hello"}))
    assert started["run"]["status"] == "queued"
    replayed = answer(call(mcp_server, raw, "replay_run", {"run_id": executed.pk, "overrides": {"temperature": 0}}))
    assert replayed["runs"] and replayed["group"]
    experiment = answer(
        call(
            mcp_server,
            raw,
            "start_experiment",
            {"dataset": dataset.name, "agent": agent.name, "evaluators": [evaluator_name]},
        )
    )
    assert experiment["status"] in ("queued", "running")
    submitted = answer(
        call(
            mcp_server, raw, "submit_job", {"backend": job.backend.name, "hardware": job.hardware, "command": ["true"]}
        )
    )
    assert submitted["status"] == "queued"
    with organization_scope(demo.organization):
        from agentops.models import AuditEvent

        actions = set(AuditEvent.objects.values_list("action", flat=True))
    assert {
        "dataset.item_from_run",
        "run.start",
        "run.replay",
        "experiment.start",
        "job.submit",
    } <= actions


def test_a_spent_hard_budget_refuses_an_action(mcp_server, demo, make_api_key):
    _key, raw = make_api_key(demo.project, scopes=("read", "execute"))
    with organization_scope(demo.organization):
        run = Run.objects.filter(project=demo.project).first()
        budget_create(organization=demo.organization, actor=demo.owner, name="Team cap", amount="5", hard_limit=True)
        count = Run.objects.filter(project=demo.project).count()
    UsageDaily.dangerously_unscoped_objects.create(
        organization=demo.organization, project=demo.project, day=utc_today(), model="m", cost="5"
    )
    text = error_text(call(mcp_server, raw, "replay_run", {"run_id": run.pk}))
    assert text.startswith(
        "Error executing tool replay_run: budget_exceeded: The budget 'Team cap' has reached its hard limit"
    )
    with organization_scope(demo.organization):
        assert Run.objects.filter(project=demo.project).count() == count
    assert answer(call(mcp_server, raw, "get_budget_status"))["budgets"][0]["blocked"] is True


def test_a_client_of_the_2025_revision_is_served_statelessly(mcp_server, tenant, make_api_key):
    _key, raw = make_api_key(tenant.project, scopes=("read",))
    headers = {
        "Accept": "application/json, text/event-stream",
        "Content-Type": "application/json",
        "Authorization": f"Bearer {raw}",
    }
    initialize = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "initialize",
        "params": {"protocolVersion": "2025-11-25", "capabilities": {}, "clientInfo": {"name": "old", "version": "1"}},
    }
    response = httpx.post(f"{mcp_server}/mcp", json=initialize, headers=headers)
    assert response.status_code == 200
    assert response.json()["result"]["protocolVersion"] == "2025-11-25"
    assert "mcp-session-id" not in response.headers  # nothing to remember: any process answers the next one
    listed = httpx.post(
        f"{mcp_server}/mcp",
        json={"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
        headers={**headers, "MCP-Protocol-Version": "2025-11-25"},
    )
    assert listed.status_code == 200
    assert "get_run" in {tool["name"] for tool in listed.json()["result"]["tools"]}
    called = httpx.post(
        f"{mcp_server}/mcp",
        json={
            "jsonrpc": "2.0",
            "id": 3,
            "method": "tools/call",
            "params": {"name": "get_budget_status", "arguments": {}},
        },
        headers={**headers, "MCP-Protocol-Version": "2025-11-25"},
    )
    assert called.json()["result"]["structuredContent"] == {"budgets": []}


def test_a_page_of_another_origin_cannot_call_the_server(mcp_server, tenant, make_api_key):
    _key, raw = make_api_key(tenant.project, scopes=("read",))
    response = httpx.post(
        f"{mcp_server}/mcp",
        json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
        headers={
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {raw}",
            "Origin": "http://evil.example",
            "MCP-Protocol-Version": "2025-11-25",
        },
    )
    assert response.status_code == 403


def test_a_key_over_its_rate_limit_is_answered_429_with_retry_after(mcp_server, tenant, make_api_key, settings):
    settings.MCP_RATE_LIMIT_PER_KEY = "3/hour"
    _key, raw = make_api_key(tenant.project, scopes=("read",))
    _other, other_raw = make_api_key(tenant.project, scopes=("read",))
    body = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}

    def post(key):
        headers = {
            "Accept": "application/json, text/event-stream",
            "Authorization": f"Bearer {key}",
            "MCP-Protocol-Version": "2025-11-25",
        }
        return httpx.post(f"{mcp_server}/mcp", json=body, headers=headers)

    assert [post(raw).status_code for _ in range(3)] == [200, 200, 200]
    refused = post(raw)
    assert refused.status_code == 429
    assert 1 <= int(refused.headers["retry-after"]) <= 3600
    error = refused.json()["error"]
    assert error["code"] == "throttled" and "MCP_RATE_LIMIT_PER_KEY" in error["message"]
    assert error["details"]["retry_after"] == int(refused.headers["retry-after"])
    assert post(other_raw).status_code == 200  # one count per key


def test_the_rate_limit_is_counted_in_redis_so_every_web_process_shares_it(tenant, make_api_key, settings):
    """A second process (here: a second limiter with its own Redis connection) sees the
    first one's count."""
    from assistant.rate_limit import KeyRateLimit

    settings.MCP_RATE_LIMIT_PER_KEY = "2/min"
    key, _raw = make_api_key(tenant.project, scopes=("read",))

    async def go():
        first, second = KeyRateLimit(), KeyRateLimit()
        try:
            return [(await limiter.check(key.pk)).allowed for limiter in (first, second, second)]
        finally:
            await first.close()
            await second.close()

    assert asyncio.run(go()) == [True, True, False]
