"""Trajectories (runs/trajectories.py, runs/api/trajectories.py): a session, a run or an
ingested conversation as JSON Lines in the ``agentops.trajectory/1`` format, read back
the way a training pipeline would; streamed, scoped, and 4xx for bad input."""

from __future__ import annotations

import json
import re
from datetime import timedelta
from decimal import Decimal

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from agentops.scoping import organization_scope
from runs import trajectories
from runs.events import MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.execution import run_execute
from runs.ingest import ingest
from runs.models import Run
from runs.services.agents import agent_create
from tests.runs.factories import T0, run_of

pytestmark = pytest.mark.django_db

PROJECT = "/api/v1/projects/acme/agent/"
SESSIONS = f"{PROJECT}agent-sessions/"


def _lines(response) -> list[dict]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/x-ndjson"
    assert response.streaming, "trajectories are streamed"
    body = b"".join(response.streaming_content).decode()
    assert body.endswith("\n")
    return [json.loads(line) for line in body.splitlines()]


def _run_turn(tenant, session_id, turn):
    with organization_scope(tenant.organization):
        run_execute(run_id=Run.objects.get(agent_session_id=session_id, turn=turn).pk)


@pytest.fixture
def chat(tenant, client_for):
    """A session with the calculator behind an approval: turn 1 asked "6 * 7", the call
    was approved with edited arguments; turn 2 "and again" ran with approve-all and was
    undone."""
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="calc",
            model="offline",
            tools=["calculator"],
            approval_tools=["calculator"],
            system_prompt="You add up.",
        )
    member = client_for(tenant.member)
    session = member.post(SESSIONS, {"agent": agent.pk, "title": "Sums"}, format="json").json()
    base = f"{SESSIONS}{session['id']}/"
    member.post(f"{base}messages/", {"content": "6 * 7"}, format="json")
    _run_turn(tenant, session["id"], 1)
    decided = member.post(
        f"{base}approvals/", {"decision": "approve", "arguments": {"expression": "2 * 21"}}, format="json"
    )
    assert decided.status_code == 200
    _run_turn(tenant, session["id"], 1)
    member.put(f"{base}approve-all/", {"tools": ["*"]}, format="json")
    member.post(f"{base}messages/", {"content": "and 1 + 1 again"}, format="json")
    _run_turn(tenant, session["id"], 2)
    assert member.post(f"{base}undo/").status_code == 200
    return session


def test_a_session_exports_one_line_per_turn_in_order_with_the_undone_turn_flagged(tenant, client_for, chat):
    lines = _lines(client_for(tenant.viewer).get(f"{SESSIONS}{chat['id']}/trajectory/"))
    assert [(line["turn"], line["undone"]) for line in lines] == [(1, False), (2, True)]
    assert {line["format"] for line in lines} == {"agentops.trajectory/1"}
    assert {json.dumps(line["session"]) for line in lines} == {
        json.dumps({"kind": "agent_session", "id": chat["id"], "title": "Sums"})
    }
    first = lines[0]
    assert first["run"]["status"] == "succeeded" and first["run"]["executed"] is True
    assert first["agent"] == {"name": "calc", "version": "1"} and first["model"] == "offline"
    assert first["input"] == "6 * 7"


def test_a_turn_s_messages_are_in_openai_form_with_the_tool_call_and_its_result(tenant, client_for, chat):
    first = _lines(client_for(tenant.viewer).get(f"{SESSIONS}{chat['id']}/trajectory/"))[0]
    messages = first["messages"]
    assert [m["role"] for m in messages] == ["system", "user", "assistant", "tool", "assistant"]
    assert messages[0]["content"] == "You add up." and messages[1]["content"] == "6 * 7"
    (call,) = messages[2]["tool_calls"]
    assert call["type"] == "function" and call["function"]["name"] == "calculator"
    assert json.loads(call["function"]["arguments"]) == {"expression": "6 * 7"}, "what the model asked"
    assert messages[3]["tool_call_id"] == call["id"] and messages[3]["name"] == "calculator"
    assert "42" in messages[3]["content"]
    assert messages[4]["content"].startswith("[offline model]") and "tool_calls" not in messages[4]
    (tool,) = first["tool_calls"]
    assert tool["id"] == call["id"] and tool["name"] == "calculator" and tool["status"] == "ok"
    assert tool["arguments"] == {"expression": "2 * 21"}, "the arguments it ran with, as approved"
    assert tool["approval"] == {
        "status": "approved",
        "reason": "",
        "requested_arguments": {"expression": "6 * 7"},
        "edited": True,
    }
    assert "42" in json.dumps(tool["result"]) and tool["error"] == ""
    assert tool["started_at"] <= tool["ended_at"] and tool["latency_ms"] >= 0


def test_a_turn_carries_its_tokens_cost_and_timings(tenant, client_for, chat):
    first = _lines(client_for(tenant.viewer).get(f"{SESSIONS}{chat['id']}/trajectory/"))[0]
    run = run_of(tenant.project, first["run"]["trace_id"])
    assert first["run"]["id"] == run.pk
    assert first["usage"] == {
        "input_tokens": run.input_tokens,
        "cached_input_tokens": 0,
        "cache_write_input_tokens": 0,
        "output_tokens": run.output_tokens,
        "reasoning_output_tokens": 0,
        "total_tokens": run.input_tokens + run.output_tokens,
        "model_calls": 2,
    }
    assert run.input_tokens > 0 and run.output_tokens > 0
    assert [call["model"] for call in first["model_calls"]] == ["offline", "offline"]
    assert sum(call["usage"]["output_tokens"] for call in first["model_calls"]) == run.output_tokens
    assert Decimal(first["cost"]["computed"]) == run.total_cost and first["cost"]["currency"] == "USD"
    assert first["cost"]["reported"] is None
    timing = first["timing"]
    assert timing["started_at"] < timing["ended_at"] and timing["latency_ms"] == run.latency_ms


def test_one_run_exports_one_line_naming_its_session_and_turn(tenant, client_for, chat):
    with organization_scope(tenant.organization):
        run = Run.objects.get(agent_session_id=chat["id"], turn=2)
    (line,) = _lines(client_for(tenant.viewer).get(f"{PROJECT}runs/{run.pk}/trajectory/"))
    assert line["run"]["id"] == run.pk and line["turn"] == 2 and line["undone"] is True
    assert line["session"]["id"] == chat["id"]
    response = client_for(tenant.viewer).get(f"{PROJECT}runs/{run.pk}/trajectory/")
    assert response["Content-Disposition"] == f'attachment; filename="trajectory-run-{run.pk}.jsonl"'


def _ingested(project, trace_id: str, *, session_id: str, started_at) -> None:
    """An instrumented agent's run: OpenTelemetry-style tool calls, a reported cost."""
    with organization_scope(project.organization):
        ingest(
            project=project,
            runs=[
                RunEvent(
                    trace_id,
                    {
                        "name": trace_id,
                        "agent_name": "support",
                        "agent_version": "7",
                        "session_id": session_id,
                        "started_at": started_at,
                        "ended_at": started_at + timedelta(seconds=2),
                        "status": "succeeded",
                        "input": "weather in Paris?",
                        "output": "Sunny.",
                    },
                )
            ],
            steps=[
                StepEvent(
                    trace_id=trace_id,
                    span_id="llm",
                    kind="llm",
                    name="chat",
                    model="mistral-large-2512",
                    started_at=started_at,
                    ended_at=started_at + timedelta(seconds=1),
                    status="ok",
                    input_tokens=100,
                    cached_input_tokens=40,
                    output_tokens=20,
                    reasoning_output_tokens=5,
                    reported_cost=Decimal("0.5"),
                    reported_cost_currency="USD",
                )
            ],
            messages=[
                MessageEvent(trace_id, "u", 1, "user", content="weather in Paris?"),
                MessageEvent(
                    trace_id,
                    "a",
                    2,
                    "assistant",
                    content=None,
                    tool_calls=[{"id": "w1", "name": "weather", "arguments": {"city": "Paris"}}],
                ),
                MessageEvent(trace_id, "t", 3, "tool", content={"sky": "sunny"}, tool_call_id="w1"),
                MessageEvent(trace_id, "b", 4, "assistant", content=[{"type": "text", "text": "Sunny."}]),
            ],
            tool_calls=[
                ToolCallEvent(
                    trace_id=trace_id,
                    call_id="w1",
                    tool_name="weather",
                    arguments={"city": "Paris"},
                    error="rate limited",
                    latency_ms=250.0,
                    started_at=started_at + timedelta(milliseconds=500),
                )
            ],
            announce=False,
        )


def test_an_ingested_run_s_messages_tool_calls_and_reported_cost_read_in_the_same_form(tenant, client_for):
    _ingested(tenant.project, "ing-1", session_id="", started_at=T0)
    run = run_of(tenant.project, "ing-1")
    (line,) = _lines(client_for(tenant.viewer).get(f"{PROJECT}runs/{run.pk}/trajectory/"))
    assert line["session"] is None and line["turn"] is None and line["undone"] is False
    assert line["agent"] == {"name": "support", "version": "7"} and line["model"] == "mistral-large-2512"
    assert line["messages"] == [
        {"role": "user", "content": "weather in Paris?"},
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {"id": "w1", "type": "function", "function": {"name": "weather", "arguments": '{"city": "Paris"}'}}
            ],
        },
        {"role": "tool", "content": '{"sky": "sunny"}', "tool_call_id": "w1"},
        {"role": "assistant", "content": [{"type": "text", "text": "Sunny."}]},
    ]
    (tool,) = line["tool_calls"]
    assert tool["status"] == "error" and tool["error"] == "rate limited" and tool["approval"] is None
    assert tool["ended_at"] == (T0 + timedelta(milliseconds=750)).isoformat()
    assert line["usage"]["cached_input_tokens"] == 40 and line["usage"]["reasoning_output_tokens"] == 5
    (call,) = line["model_calls"]
    assert call["reported_cost"] == "0.500000000" and call["latency_ms"] == 1000.0
    assert Decimal(line["cost"]["reported"]) == Decimal("0.5")
    assert Decimal(line["cost"]["computed"]) == run.total_cost > 0


def test_an_ingested_conversation_exports_its_runs_in_start_order_as_turns(tenant, client_for):
    _ingested(tenant.project, "later", session_id="conv/1", started_at=T0 + timedelta(minutes=5))
    _ingested(tenant.project, "earlier", session_id="conv/1", started_at=T0)
    _ingested(tenant.project, "elsewhere", session_id="conv/2", started_at=T0)
    response = client_for(tenant.viewer).get(f"{PROJECT}runs/trajectory/", {"session": "conv/1"})
    lines = _lines(response)
    assert [(line["turn"], line["run"]["trace_id"]) for line in lines] == [(1, "earlier"), (2, "later")]
    assert lines[0]["session"] == {"kind": "conversation", "id": "conv/1", "title": ""}
    assert response["Content-Disposition"] == 'attachment; filename="trajectory-conversation-conv_1.jsonl"'


def test_the_lines_are_read_as_they_are_sent_not_all_at_first(tenant, client_for, chat, monkeypatch):
    """Runs are read a batch at a time while the body is taken: a turn deleted after the
    first batch was sent is not in the rest (and no error ends the download)."""
    monkeypatch.setattr(trajectories, "RUNS_PER_BATCH", 1)
    response = client_for(tenant.viewer).get(f"{SESSIONS}{chat['id']}/trajectory/")
    body = iter(response.streaming_content)
    first = json.loads(next(body))
    assert first["turn"] == 1
    with organization_scope(tenant.organization):
        Run.objects.filter(agent_session_id=chat["id"], turn=2).delete()
    assert list(body) == []


def test_each_line_takes_the_same_few_queries_however_long_the_run(tenant, django_assert_max_num_queries):
    """No query per message or tool call: a line reads its run's messages, tool calls,
    approvals and model calls once each."""
    for index in range(3):
        _ingested(tenant.project, f"q{index}", session_id="long", started_at=T0 + timedelta(minutes=index))
    with organization_scope(tenant.organization):
        lines = trajectories.conversation_trajectory(project=tenant.project, session_id="long")
        with django_assert_max_num_queries(6):  # the ids, the batch of runs, then the line's four
            next(lines)
        for _ in range(2):
            with django_assert_max_num_queries(4):
                next(lines)


# -- access and bad input ----------------------------------------------------------------------


def test_another_tenant_s_run_and_session_are_not_found(tenant, other_tenant, client_for, chat):
    with organization_scope(tenant.organization):
        run = Run.objects.get(agent_session_id=chat["id"], turn=1)
    outsider = client_for(other_tenant.owner)
    other = f"/api/v1/projects/{other_tenant.organization.slug}/{other_tenant.project.slug}/"
    for url in (f"{other}runs/{run.pk}/trajectory/", f"{other}agent-sessions/{chat['id']}/trajectory/"):
        response = outsider.get(url)
        assert response.status_code == 404 and response.json()["error"]["code"] == "not_found"
    assert outsider.get(f"{PROJECT}runs/{run.pk}/trajectory/").status_code == 404


def test_unknown_and_malformed_ids_are_404_and_a_missing_conversation_400(tenant, client_for):
    viewer = client_for(tenant.viewer)
    for url in (
        f"{PROJECT}runs/999999/trajectory/",
        f"{PROJECT}runs/99999999999999999999999/trajectory/",
        f"{PROJECT}runs/abc/trajectory/",
        f"{SESSIONS}999999/trajectory/",
        f"{SESSIONS}99999999999999999999999/trajectory/",
        f"{SESSIONS}-1/trajectory/",
    ):
        assert viewer.get(url).status_code == 404, url
    missing = viewer.get(f"{PROJECT}runs/trajectory/")
    assert missing.status_code == 400 and "session" in missing.json()["error"]["message"]
    for session_id in ("nobody", "x" * 500):
        response = viewer.get(f"{PROJECT}runs/trajectory/", {"session": session_id})
        assert response.status_code == 404 and response.json()["error"]["message"] == "session not found"
    # A NUL character is refused before any lookup, as in every query parameter of the API.
    response = viewer.get(f"{PROJECT}runs/trajectory/", {"session": "a\x00b"})
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "session: contains a NUL character, which cannot be stored"


def test_an_error_is_json_even_when_the_client_asks_for_json_lines(tenant, client_for):
    response = client_for(tenant.viewer).get(f"{PROJECT}runs/424242/trajectory/", HTTP_ACCEPT="application/x-ndjson")
    assert response.status_code == 404
    assert json.loads(response.content)["error"]["message"] == "run not found"


def test_api_keys_need_the_read_scope(tenant, key_client, chat):
    url = f"{SESSIONS}{chat['id']}/trajectory/"
    assert len(_lines(key_client(tenant.project, scopes=("read",)).get(url))) == 2
    assert key_client(tenant.project, scopes=("ingest",)).get(url).status_code == 403


def test_a_turn_s_run_page_links_to_its_session_s_trajectory(tenant, signed_in, other_tenant, chat):
    with organization_scope(tenant.organization):
        run = Run.objects.get(agent_session_id=chat["id"], turn=1)
    client = signed_in(tenant.viewer)
    page = client.get(f"/o/acme/p/agent/runs/{run.pk}/").content.decode()
    link = re.search(r'href="([^"]+)" id="run-session-trajectory" download', page)
    assert link and link[1] == f"/o/acme/p/agent/runs/chat/{chat['id']}/trajectory/"
    assert [line["turn"] for line in _lines(client.get(link[1]))] == [1, 2]
    assert client.get("/o/acme/p/agent/runs/chat/999999/trajectory/").status_code == 404
    outsider = signed_in(other_tenant.owner)
    assert outsider.get(link[1]).status_code == 404


def test_under_asgi_the_download_is_an_async_stream(tenant, chat):
    """Under ASGI the body is an async iterator, one run per chunk (Django would read a
    synchronous one to its end, in memory, before sending the first byte)."""
    client = AsyncClient()
    client.force_login(tenant.viewer)

    async def fetch():
        response = await client.get(f"{SESSIONS}{chat['id']}/trajectory/")
        assert response.is_async
        return response.status_code, [chunk async for chunk in response.streaming_content]

    status, chunks = async_to_sync(fetch)()
    assert status == 200
    assert [json.loads(chunk)["turn"] for chunk in chunks] == [1, 2], "one line per chunk"
