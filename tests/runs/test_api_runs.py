"""The read API of the trace store: runs list (filters, sorting, cursor pagination),
run detail, steps, messages, tool calls, memory, sessions and the JSON Lines export."""

from __future__ import annotations

import base64
import gc
import io
import json
import weakref
from datetime import UTC, datetime, timedelta
from zoneinfo import ZoneInfo

import pytest
from asgiref.sync import async_to_sync
from django.test import AsyncClient

from agentops.scoping import organization_scope
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.models import Run
from runs.selectors import SORTABLE
from tests.runs.factories import agent_run

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)

RUN_FIELDS = {
    "id",
    "trace_id",
    "name",
    "status",
    "session_id",
    "parent_run_id",
    "agent_name",
    "agent_version",
    "environment",
    "release",
    "tags",
    "end_user_id",
    "started_at",
    "ended_at",
    "latency_ms",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "total_cost",
    "unpriced_step_count",
    "step_count",
    "error_count",
    "models_used",
    "error",
}
STEP_FIELDS = {
    "id",
    "span_id",
    "parent_id",
    "kind",
    "name",
    "model",
    "provider",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "cost",
    "unpriced",
    "started_at",
    "ended_at",
    "duration_ms",
    "status",
    "error",
    "input",
    "output",
    "attributes",
}


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def load(project, *, runs=(), steps=(), messages=(), tool_calls=(), snapshots=()):
    with organization_scope(project.organization):
        ingest(
            project=project,
            runs=runs,
            steps=steps,
            messages=messages,
            tool_calls=tool_calls,
            snapshots=snapshots,
            announce=False,
        )


def run_pk(project, trace_id) -> int:
    with organization_scope(project.organization):
        return Run.objects.get(project=project, trace_id=trace_id).pk


def llm_step(trace_id, span_id, model, input_tokens, output_tokens, start, parent="root", **kwargs):
    return StepEvent(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        kind="llm",
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        started_at=at(start),
        ended_at=at(start + 1),
        status="ok",
        **kwargs,
    )


@pytest.fixture
def three_runs(tenant):
    """r1: support/prod, succeeded in 2 s, small model; r2: billing/staging, failed in 5 s,
    large model, most expensive; r3: support/prod, still running, no model."""
    project = tenant.project
    load(
        project,
        runs=[
            RunEvent(
                "r1",
                {
                    "name": "refund question",
                    "agent_name": "support",
                    "environment": "prod",
                    "session_id": "s-1",
                    "tags": ["vip"],
                    "end_user_id": "u-1",
                    "input": {"question": "where is my refund"},
                    "output": {"answer": "sent yesterday"},
                    "metadata": {"channel": "chat"},
                    "started_at": at(0),
                    "ended_at": at(2),
                    "status": "succeeded",
                },
            ),
            RunEvent(
                "r2",
                {
                    "name": "invoice run",
                    "agent_name": "billing",
                    "environment": "staging",
                    "session_id": "s-1",
                    "end_user_id": "u-2",
                    "output": {"text": "the invoice could not be generated"},
                    "started_at": at(60),
                    "ended_at": at(65),
                    "status": "failed",
                    "error": "generator crashed",
                },
            ),
            RunEvent(
                "r3",
                {
                    "name": "weather",
                    "agent_name": "support",
                    "environment": "prod",
                    "session_id": "s-2",
                    "started_at": at(120),
                    "status": "running",
                },
            ),
        ],
        steps=[
            StepEvent(trace_id="r1", span_id="root", kind="agent", started_at=at(0), ended_at=at(2), status="ok"),
            llm_step("r1", "llm", "mistral-small-2603", 1000, 1000, 0.5),
            StepEvent(trace_id="r2", span_id="root", kind="agent", started_at=at(60), ended_at=at(65), status="error"),
            llm_step("r2", "llm", "mistral-large-2512", 1000, 500, 61),
            llm_step("r2", "llm-unpriced", "homegrown-model", 10, 10, 62),
        ],
    )
    return project


def runs_url(tenant, suffix=""):
    return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/runs/{suffix}"


@pytest.fixture
def reader(tenant, key_client):
    return key_client(tenant.project, ["read"])


def trace_ids(response) -> list[str]:
    assert response.status_code == 200, response.content
    return [run["trace_id"] for run in response.json()["results"]]


# --- Runs list -----------------------------------------------------------------------


def test_runs_list_has_the_contract_fields_newest_first_with_decimal_string_cost(tenant, three_runs, reader):
    response = reader.get(runs_url(tenant))
    assert trace_ids(response) == ["r3", "r2", "r1"]
    body = response.json()
    assert body["next"] is None and body["previous"] is None
    r3, r2, r1 = body["results"]
    assert RUN_FIELDS <= set(r1)
    assert "input" not in r1 and "search" not in r1
    assert r1["total_cost"] == "0.000750000"  # mistral-small: 0.15 in + 0.60 out per million
    assert r2["total_cost"] == "0.001250000"
    assert (r2["unpriced_step_count"], r2["error_count"], r2["step_count"]) == (1, 1, 3)
    assert sorted(r2["models_used"]) == ["homegrown-model", "mistral-large-2512"]
    assert (r1["latency_ms"], r3["latency_ms"]) == (2000, None)
    assert r1["started_at"] == "2026-11-20T12:00:00Z"


@pytest.mark.parametrize(
    ("query", "expected"),
    [
        ("status=failed", ["r2"]),
        ("status=succeeded,failed", ["r2", "r1"]),
        ("status=running", ["r3"]),
        ("agent=support", ["r3", "r1"]),
        ("model=mistral-large-2512", ["r2"]),
        ("tag=vip", ["r1"]),
        ("session=s-1", ["r2", "r1"]),
        ("environment=staging", ["r2"]),
        ("end_user=u-1", ["r1"]),
        ("trace_id=r2", ["r2"]),
        ("started_after=2026-11-20T12:01:00Z", ["r3", "r2"]),
        ("started_before=2026-11-20T12:01:00Z", ["r1"]),
        ("started_after=2026-11-20T12:00:30Z&started_before=2026-11-20T12:01:30Z", ["r2"]),
        ("min_cost=0.001", ["r2"]),
        ("max_cost=0.001", ["r3", "r1"]),
        ("min_cost=0.0005&max_cost=0.001", ["r1"]),
        ("min_latency_ms=3000", ["r2"]),
        ("max_latency_ms=3000", ["r1"]),
        ("q=refund", ["r1"]),
        ("q=invoice", ["r2"]),
        ("agent=support&environment=prod&status=succeeded", ["r1"]),
        ("status=", ["r3", "r2", "r1"]),
    ],
)
def test_each_filter_narrows_the_runs_list(tenant, three_runs, reader, query, expected):
    assert trace_ids(reader.get(runs_url(tenant, f"?{query}"))) == expected


@pytest.mark.parametrize(
    ("sort", "expected"),
    [
        ("started_at", ["r1", "r2", "r3"]),
        ("-started_at", ["r3", "r2", "r1"]),
        ("cost", ["r3", "r1", "r2"]),
        ("-cost", ["r2", "r1", "r3"]),
        # A run still running has no latency: last ascending, first descending (PostgreSQL's order).
        ("latency", ["r1", "r2", "r3"]),
        ("-latency", ["r3", "r2", "r1"]),
    ],
)
def test_sort_orders_the_runs_list(tenant, three_runs, reader, sort, expected):
    assert trace_ids(reader.get(runs_url(tenant, f"?sort={sort}"))) == expected


@pytest.mark.parametrize(
    ("query", "field"),
    [
        ("status=done", "status"),
        ("status=failed,nope", "status"),
        ("started_after=yesterday", "started_after"),
        ("started_before=2026-02-30T00:00:00Z", "started_before"),
        ("min_cost=abc", "min_cost"),
        ("max_cost=NaN", "max_cost"),
        ("min_cost=-1", "min_cost"),
        ("min_cost=1e400", "min_cost"),
        ("min_latency_ms=-5", "min_latency_ms"),
        ("max_latency_ms=1.5", "max_latency_ms"),
        ("max_latency_ms=99999999999999999999999", "max_latency_ms"),
        ("sort=name", "sort"),
        ("q=a%00b", "q"),
        ("agent=" + "a" * 201, "agent"),
    ],
)
def test_bad_filter_value_is_400_naming_the_field(tenant, three_runs, reader, query, field):
    for url in (runs_url(tenant, f"?{query}"), runs_url(tenant, f"export/?{query}")):
        response = reader.get(url)
        assert response.status_code == 400, (url, response.content)
        error = response.json()["error"]
        assert error["code"] == "invalid"
        assert error["message"].startswith(f"{field}: "), error["message"]


def make_many_runs(project, count=9):
    """Runs that tie on every sort field (same cost, pairs with the same start, some
    without latency), so only the cursor's tie-breaker keeps the pages right."""
    events, steps = [], []
    for n in range(count):
        trace = f"p{n}"
        fields = {"started_at": at(n // 2), "status": "succeeded"}
        if n % 3:
            fields["ended_at"] = at(n // 2 + 1)
        events.append(RunEvent(trace, fields))
        if n % 4 == 0:
            steps.append(llm_step(trace, "llm", "mistral-small-2603", 1000, 0, n // 2, parent=""))
    load(project, runs=events, steps=steps)


@pytest.mark.parametrize("sort", list(SORTABLE))
def test_cursor_pagination_walks_every_run_once_forwards_and_backwards(tenant, reader, sort):
    make_many_runs(tenant.project)
    everything = trace_ids(reader.get(runs_url(tenant, f"?sort={sort}&page_size=100")))
    assert len(everything) == 9

    pages, url = [], runs_url(tenant, f"?sort={sort}&page_size=2")
    while url:
        body = reader.get(url).json()
        pages.append([run["trace_id"] for run in body["results"]])
        url = body["next"]
        last = body
    assert [trace for page in pages for trace in page] == everything
    assert [len(page) for page in pages] == [2, 2, 2, 2, 1]

    backwards, url = [], last["previous"]
    while url:
        body = reader.get(url).json()
        backwards.insert(0, [run["trace_id"] for run in body["results"]])
        url = body["previous"]
    assert backwards == pages[:-1]


def test_cursor_of_another_sort_or_garbage_is_404(tenant, reader):
    make_many_runs(tenant.project)
    next_link = reader.get(runs_url(tenant, "?sort=cost&page_size=2")).json()["next"]
    cursor = next_link.split("cursor=")[1].split("&")[0]
    assert reader.get(runs_url(tenant, f"?sort=cost&page_size=2&cursor={cursor}")).status_code == 200
    assert reader.get(runs_url(tenant, f"?sort=latency&cursor={cursor}")).status_code == 404
    garbage = reader.get(runs_url(tenant, "?cursor=bm90LWpzb24"))
    assert (garbage.status_code, garbage.json()["error"]["code"]) == (404, "not_found")


# --- One run -------------------------------------------------------------------------


def test_run_detail_has_totals_payloads_and_decimal_string_cost(tenant, three_runs, reader):
    response = reader.get(runs_url(tenant, f"{run_pk(tenant.project, 'r2')}/"))
    assert response.status_code == 200
    run = response.json()
    assert RUN_FIELDS | {"input", "output", "metadata"} <= set(run)
    assert run["total_cost"] == "0.001250000" and isinstance(run["total_cost"], str)
    assert (run["input_tokens"], run["output_tokens"], run["step_count"]) == (1010, 510, 3)
    assert (run["status"], run["error"], run["latency_ms"]) == ("failed", "generator crashed", 5000)
    assert run["output"] == {"text": "the invoice could not be generated"}
    r1 = reader.get(runs_url(tenant, f"{run_pk(tenant.project, 'r1')}/")).json()
    assert (r1["input"], r1["metadata"]) == ({"question": "where is my refund"}, {"channel": "chat"})


def test_steps_are_a_flat_list_in_tree_order_with_depth_or_nested_with_tree(tenant, reader):
    load(
        tenant.project,
        steps=[
            StepEvent(trace_id="t", span_id="root", kind="agent", name="agent", started_at=at(0), ended_at=at(9)),
            llm_step("t", "llm-2", "mistral-large-2512", 100, 100, 5, input={"m": 2}, output={"r": 2}),
            llm_step("t", "llm-1", "mistral-large-2512", 1000, 500, 1, attributes={"gen_ai.system": "mistral"}),
            StepEvent(trace_id="t", span_id="tool", parent_span_id="llm-1", kind="tool", started_at=at(2)),
            llm_step("t", "mystery", "homegrown", 5, 5, 3),
            StepEvent(trace_id="t", span_id="orphan", parent_span_id="never-arrived", started_at=at(8)),
        ],
    )
    pk = run_pk(tenant.project, "t")
    steps = reader.get(runs_url(tenant, f"{pk}/steps/")).json()
    assert [(s["span_id"], s["parent_id"], s["depth"]) for s in steps] == [
        ("root", "", 0),
        ("llm-1", "root", 1),
        ("tool", "llm-1", 2),
        ("mystery", "root", 1),
        ("llm-2", "root", 1),
        ("orphan", "never-arrived", 0),
    ]
    by_span = {s["span_id"]: s for s in steps}
    assert STEP_FIELDS <= set(by_span["llm-1"])
    assert by_span["llm-1"]["cost"] == "0.001250000"
    assert (by_span["mystery"]["cost"], by_span["mystery"]["unpriced"]) == (None, True)
    assert (by_span["tool"]["cost"], by_span["tool"]["unpriced"]) == (None, False)
    assert by_span["llm-1"]["attributes"] == {"gen_ai.system": "mistral"}
    assert (by_span["llm-2"]["input"], by_span["llm-2"]["output"]) == ({"m": 2}, {"r": 2})
    assert by_span["llm-1"]["duration_ms"] == 1000.0

    tree = reader.get(runs_url(tenant, f"{pk}/steps/?tree=1")).json()
    assert [node["span_id"] for node in tree] == ["root", "orphan"]
    assert [child["span_id"] for child in tree[0]["children"]] == ["llm-1", "mystery", "llm-2"]
    assert [grandchild["span_id"] for grandchild in tree[0]["children"][0]["children"]] == ["tool"]
    assert reader.get(runs_url(tenant, f"{pk}/steps/?tree=maybe")).status_code == 400


def test_steps_tree_too_deep_to_nest_is_400_and_flat_list_still_works(tenant, reader):
    chain = [StepEvent(trace_id="deep", span_id="s0", started_at=at(0))]
    chain += [
        StepEvent(trace_id="deep", span_id=f"s{n}", parent_span_id=f"s{n - 1}", started_at=at(n)) for n in range(1, 250)
    ]
    load(tenant.project, steps=chain)
    pk = run_pk(tenant.project, "deep")
    flat = reader.get(runs_url(tenant, f"{pk}/steps/")).json()
    assert [s["depth"] for s in flat] == list(range(250))
    response = reader.get(runs_url(tenant, f"{pk}/steps/?tree=1"))
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("tree: this run's steps nest 250 levels deep")


def test_steps_whose_parent_ids_form_a_cycle_are_still_listed(tenant, reader):
    load(
        tenant.project,
        steps=[
            StepEvent(trace_id="loop", span_id="a", parent_span_id="c", started_at=at(1)),
            StepEvent(trace_id="loop", span_id="b", parent_span_id="a", started_at=at(2)),
            StepEvent(trace_id="loop", span_id="c", parent_span_id="b", started_at=at(3)),
            StepEvent(trace_id="loop", span_id="root", started_at=at(0)),
        ],
    )
    pk = run_pk(tenant.project, "loop")
    steps = reader.get(runs_url(tenant, f"{pk}/steps/")).json()
    assert [(s["span_id"], s["depth"]) for s in steps] == [("root", 0), ("a", 0), ("b", 1), ("c", 2)]
    tree = reader.get(runs_url(tenant, f"{pk}/steps/?tree=1")).json()
    assert [node["span_id"] for node in tree] == ["root", "a"]


def test_messages_are_the_transcript_and_all_returns_every_stored_message(tenant, reader):
    load(
        tenant.project,
        steps=[
            llm_step("chat", "llm-1", "mistral-small-2603", 10, 10, 0, parent=""),
            llm_step("chat", "llm-2", "x", 1, 1, 5),
        ],
        messages=[
            MessageEvent("chat", "llm-1:in:0", 10, "user", "What's the weather?", span_id="llm-1"),
            MessageEvent("chat", "llm-1:out:0", 20, "assistant", "Sunny.", span_id="llm-1", finish_reason="stop"),
            # The second call re-sends the history: the transcript shows it once.
            MessageEvent("chat", "llm-2:in:0", 30, "user", "What's the weather?", span_id="llm-2"),
            MessageEvent("chat", "llm-2:in:1", 31, "assistant", "Sunny.", span_id="llm-2"),
            MessageEvent("chat", "llm-2:in:2", 32, "user", "And tomorrow?", span_id="llm-2", tokens=4),
        ],
    )
    pk = run_pk(tenant.project, "chat")
    transcript = reader.get(runs_url(tenant, f"{pk}/messages/")).json()
    assert [(m["role"], m["content"]) for m in transcript] == [
        ("user", "What's the weather?"),
        ("assistant", "Sunny."),
        ("user", "And tomorrow?"),
    ]
    assert transcript[1]["finish_reason"] == "stop" and transcript[2]["tokens"] == 4
    every = reader.get(runs_url(tenant, f"{pk}/messages/?all=1")).json()
    assert [m["message_id"] for m in every] == ["llm-1:in:0", "llm-1:out:0", "llm-2:in:0", "llm-2:in:1", "llm-2:in:2"]
    assert every[0]["step_id"] is not None and every[0]["span_id"] == "llm-1"


def test_tool_calls_and_memory_snapshots_are_listed_in_order(tenant, reader):
    load(
        tenant.project,
        steps=[StepEvent(trace_id="tools", span_id="tool-a", kind="tool", started_at=at(1))],
        tool_calls=[
            ToolCallEvent("tools", "call-2", "lookup", arguments={"id": 2}, error="not found", started_at=at(3)),
            ToolCallEvent(
                "tools", "call-1", "search", span_id="tool-a", result=["a"], latency_ms=12.5, started_at=at(1)
            ),
        ],
        snapshots=[
            MemoryEvent("tools", "after-2", 2, {"items": ["a", "b"]}, taken_at=at(4)),
            MemoryEvent("tools", "after-1", 1, {"items": ["a"]}, span_id="tool-a", taken_at=at(2)),
        ],
    )
    pk = run_pk(tenant.project, "tools")
    calls = reader.get(runs_url(tenant, f"{pk}/tool-calls/")).json()
    assert [(c["call_id"], c["tool_name"], c["result"], c["error"], c["latency_ms"]) for c in calls] == [
        ("call-1", "search", ["a"], "", 12.5),
        ("call-2", "lookup", None, "not found", None),
    ]
    assert calls[0]["step_id"] is not None and calls[1]["step_id"] is None
    memory = reader.get(runs_url(tenant, f"{pk}/memory/")).json()
    assert [(m["snapshot_id"], m["sequence"], m["state"]) for m in memory] == [
        ("after-1", 1, {"items": ["a"]}),
        ("after-2", 2, {"items": ["a", "b"]}),
    ]


# --- Sessions ------------------------------------------------------------------------


def sessions_url(tenant, suffix=""):
    return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/sessions/{suffix}"


def test_sessions_list_totals_most_recent_first(tenant, three_runs, reader):
    body = reader.get(sessions_url(tenant)).json()
    assert [s["session_id"] for s in body["results"]] == ["s-2", "s-1"]
    s2, s1 = body["results"]
    assert (s1["run_count"], s1["failed"], s1["total_cost"]) == (2, 1, "0.002000000")
    assert (s1["input_tokens"], s1["output_tokens"]) == (2010, 1510)
    assert (s1["first_started_at"], s1["last_started_at"]) == ("2026-11-20T12:00:00Z", "2026-11-20T12:01:00Z")
    assert s2["run_count"] == 1
    recent = reader.get(sessions_url(tenant, "?started_after=2026-11-20T12:00:30Z")).json()["results"]
    assert [(s["session_id"], s["run_count"]) for s in recent] == [("s-2", 1), ("s-1", 1)]
    assert reader.get(sessions_url(tenant, "?started_after=soon")).status_code == 400


def test_sessions_list_pages_with_a_cursor(tenant, reader):
    load(
        tenant.project,
        runs=[RunEvent(f"r{n}", {"session_id": f"s{n}", "started_at": at(n // 2)}) for n in range(5)]
        + [RunEvent("no-start", {"session_id": "s-none"})],
    )
    seen, url = [], sessions_url(tenant, "?page_size=2")
    while url:
        body = reader.get(url).json()
        seen += [s["session_id"] for s in body["results"]]
        url = body["next"]
    # A session whose runs have no start time sorts first (PostgreSQL puts NULLs first descending).
    assert seen == ["s-none", "s4", "s3", "s2", "s1", "s0"]


def test_session_detail_lists_its_runs_oldest_first(tenant, three_runs, reader):
    body = reader.get(sessions_url(tenant, "s-1/")).json()
    assert (body["session_id"], body["run_count"], body["total_cost"]) == ("s-1", 2, "0.002000000")
    assert [run["trace_id"] for run in body["runs"]] == ["r1", "r2"]
    assert RUN_FIELDS <= set(body["runs"][0])
    assert reader.get(sessions_url(tenant, "unknown/")).status_code == 404


def test_session_id_with_a_slash_is_reachable(tenant, reader):
    load(tenant.project, runs=[RunEvent("slashed", {"session_id": "team/alpha", "started_at": at(0)})])
    body = reader.get(sessions_url(tenant, "team%2Falpha/")).json()
    assert [run["trace_id"] for run in body["runs"]] == ["slashed"]


# --- Export --------------------------------------------------------------------------


def export_lines(response) -> list[dict]:
    assert response.status_code == 200, response.content
    assert response["Content-Type"] == "application/x-ndjson"
    text = b"".join(response.streaming_content).decode()
    assert text == "" or text.endswith("\n")
    return [json.loads(line) for line in text.splitlines()]


def test_export_streams_one_run_per_line_with_the_list_fields(tenant, three_runs, reader):
    lines = export_lines(reader.get(runs_url(tenant, "export/")))
    assert [run["trace_id"] for run in lines] == ["r3", "r2", "r1"]
    listed = reader.get(runs_url(tenant)).json()["results"]
    assert lines == listed
    assert lines[1]["total_cost"] == "0.001250000"


def test_export_honours_the_filters_and_sort_of_the_list(tenant, three_runs, reader):
    response = reader.get(runs_url(tenant, "export/?status=succeeded,failed&sort=-cost"))
    assert [run["trace_id"] for run in export_lines(response)] == ["r2", "r1"]
    response = reader.get(runs_url(tenant, "export/?agent=support&sort=started_at"))
    assert [run["trace_id"] for run in export_lines(response)] == ["r1", "r3"]
    assert export_lines(reader.get(runs_url(tenant, "export/?trace_id=nothing"))) == []


def test_export_accepts_an_ndjson_accept_header(tenant, three_runs, reader):
    response = reader.get(runs_url(tenant, "export/?sort=started_at"), HTTP_ACCEPT="application/x-ndjson")
    assert [run["trace_id"] for run in export_lines(response)] == ["r1", "r2", "r3"]


def test_export_spans_several_database_chunks(tenant, reader, monkeypatch):
    from runs.api import views

    monkeypatch.setattr(views, "EXPORT_CHUNK_SIZE", 2)
    load(tenant.project, runs=[RunEvent(f"e{n}", {"started_at": at(n)}) for n in range(7)])
    lines = export_lines(reader.get(runs_url(tenant, "export/?sort=started_at")))
    assert [run["trace_id"] for run in lines] == [f"e{n}" for n in range(7)]


def test_export_under_asgi_is_an_async_stream_with_the_same_lines(tenant, three_runs, reader, make_api_key):
    """Under ASGI the body is an async iterator (Django would read a synchronous one to its
    end, in memory, before sending the first byte), and it holds what the export holds."""
    _key, raw = make_api_key(tenant.project, ("read",))
    client = AsyncClient()

    async def fetch():
        response = await client.get(
            runs_url(tenant, "export/?sort=started_at"), headers={"Authorization": f"Bearer {raw}"}
        )
        assert response.is_async
        return response, b"".join([chunk async for chunk in response.streaming_content])

    response, body = async_to_sync(fetch)()
    assert response.status_code == 200
    assert response["Content-Type"] == "application/x-ndjson"
    assert (
        response["Content-Disposition"]
        == f'attachment; filename="runs-{tenant.organization.slug}-{tenant.project.slug}.jsonl"'
    )
    expected = b"".join(reader.get(runs_url(tenant, "export/?sort=started_at")).streaming_content)
    assert body == expected
    assert [json.loads(line)["trace_id"] for line in body.decode().splitlines()] == ["r1", "r2", "r3"]


# --- Who may read --------------------------------------------------------------------


@pytest.mark.parametrize("role", ["owner", "admin", "member", "viewer"])
def test_every_member_can_read_runs(tenant, three_runs, client_for, role):
    client = client_for(tenant.user(role))
    assert client.get(runs_url(tenant)).status_code == 200
    assert client.get(sessions_url(tenant)).status_code == 200


@pytest.mark.parametrize(("scopes", "status"), [(["read"], 200), (["ingest"], 403), (["execute"], 403)])
def test_api_key_needs_the_read_scope(tenant, three_runs, key_client, scopes, status):
    client = key_client(tenant.project, scopes)
    pk = run_pk(tenant.project, "r1")
    for url in (
        runs_url(tenant),
        runs_url(tenant, f"{pk}/"),
        runs_url(tenant, f"{pk}/steps/"),
        runs_url(tenant, "export/"),
        sessions_url(tenant),
    ):
        assert client.get(url).status_code == status, url


def test_anonymous_caller_is_401(api_client, tenant, three_runs):
    assert api_client.get(runs_url(tenant)).status_code == 401


def test_runs_list_and_steps_take_the_same_number_of_queries_for_more_rows(tenant, reader):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    def queries_for(url) -> int:
        with CaptureQueriesContext(connection) as captured:
            assert reader.get(url).status_code == 200
        return len(captured)

    load(tenant.project, steps=[llm_step("small", f"s{n}", "mistral-small-2603", 1, 1, n) for n in range(2)])
    load(tenant.project, runs=[RunEvent("first", {"started_at": at(0)})])
    reader.get(runs_url(tenant))  # the key's first use also records last_used_at
    few = (queries_for(runs_url(tenant)), queries_for(runs_url(tenant, f"{run_pk(tenant.project, 'small')}/steps/")))
    load(tenant.project, steps=[llm_step("big", f"s{n}", "mistral-small-2603", 1, 1, n) for n in range(20)])
    load(tenant.project, runs=[RunEvent(f"more-{n}", {"started_at": at(n)}) for n in range(20)])
    many = (queries_for(runs_url(tenant)), queries_for(runs_url(tenant, f"{run_pk(tenant.project, 'big')}/steps/")))
    assert many == few


def test_listed_times_are_written_in_the_current_time_zone(tenant, three_runs, reader):
    """As DRF writes times: in the time zone current when answering (UTC as "Z"), each
    zone's answer from its own serializer, whichever answered first; the export's too."""
    from django.utils import timezone

    with timezone.override(ZoneInfo("Asia/Tokyo")):
        tokyo = reader.get(runs_url(tenant)).json()["results"]
        exported = reader.get(runs_url(tenant, "export/"))
    # The export's lines are written as it is sent, after the view returned: in the zone
    # of the request all the same.
    assert export_lines(exported) == tokyo
    utc = reader.get(runs_url(tenant)).json()["results"]
    with timezone.override(ZoneInfo("America/New_York")):
        new_york = reader.get(runs_url(tenant)).json()["results"]
    assert [run["started_at"][-6:] for run in tokyo] == ["+09:00"] * 3
    assert [run["started_at"][-1] for run in utc] == ["Z"] * 3
    assert {run["started_at"][-6:] for run in new_york} <= {"-05:00", "-04:00"}
    for answers in (tokyo, new_york):
        assert [datetime.fromisoformat(run["started_at"]) for run in answers] == [
            datetime.fromisoformat(run["started_at"]) for run in utc
        ]


def _served(path: str, raw_key: str, protocol: str):
    """The answer to ``GET path`` from the handler the test client uses (WSGI or ASGI),
    without the client, which ties each response to itself and keeps it: returns the
    response, closed as a server leaves it, and its body."""
    from django.test.client import AsyncClientHandler, ClientHandler

    if protocol == "wsgi":
        response = ClientHandler()(
            {
                "REQUEST_METHOD": "GET",
                "PATH_INFO": path,
                "QUERY_STRING": "",
                "SERVER_NAME": "testserver",
                "SERVER_PORT": "80",
                "SERVER_PROTOCOL": "HTTP/1.1",
                "HTTP_HOST": "testserver",
                "HTTP_AUTHORIZATION": f"Bearer {raw_key}",
                "wsgi.url_scheme": "http",
                "wsgi.input": io.BytesIO(b""),
                "wsgi.errors": io.StringIO(),
            }
        )
    else:
        scope = {
            "type": "http",
            "asgi": {"version": "3.0"},
            "http_version": "1.1",
            "method": "GET",
            "scheme": "http",
            "path": path,
            "query_string": b"",
            "headers": [(b"host", b"testserver"), (b"authorization", f"Bearer {raw_key}".encode())],
            "server": ("testserver", 80),
            "client": ("127.0.0.1", 50000),
        }
        response = async_to_sync(AsyncClientHandler())(scope)
    return response, response.content


@pytest.mark.parametrize("protocol", ["wsgi", "asgi"])
def test_a_served_list_and_the_rows_read_for_it_are_freed_when_sent(tenant, make_api_key, protocol):
    """DRF keeps an answer on its view and in its renderer's context, and its list
    serializer binds each list to itself: reference cycles through which every answer,
    and the rows read for it, waited for the garbage collector's next pass (on a web
    process, tens of milliseconds in the request that happened to trigger it). The runs
    list and a run's steps are freed as soon as the server closes the answer."""
    from runs.api.listed import ListedRow

    load(tenant.project, steps=[llm_step("t", f"s{n}", "mistral-small-2603", 1, 1, n) for n in range(30)])
    load(tenant.project, runs=[RunEvent(f"run-{n}", {"started_at": at(n)}) for n in range(30)])
    _key, raw = make_api_key(tenant.project, ["read"])
    for path, items in (
        (runs_url(tenant), lambda answer: answer["results"]),
        (runs_url(tenant, f"{run_pk(tenant.project, 't')}/steps/"), lambda answer: answer),
    ):
        _served(path, raw, protocol)  # the first request of a path sets up what every later one reuses
        gc.collect()
        gc.disable()
        try:
            response, body = _served(path, raw, protocol)
            answer = weakref.ref(response)
            del response
            outlived = answer() is not None
            # By type, not isinstance(): that would evaluate lazy objects (a request's user).
            left = [thing for thing in gc.get_objects() if ListedRow in type(thing).__mro__]
        finally:
            gc.enable()
        assert len(items(json.loads(body))) >= 30
        assert not outlived, f"{path}: the answer outlived its request"
        assert left == [], f"{path}: {len(left)} rows outlived the request"


@pytest.mark.parametrize(
    "payload",
    [
        {"f": "-started_at", "v": ["raw", None], "t": "not-an-id", "r": False},
        {"f": "-started_at", "v": ["raw", "not-a-time"], "t": 1, "r": False},
    ],
)
def test_a_forged_api_cursor_is_404_not_a_server_error(tenant, client_for, payload):
    agent_run(tenant.project, "paged")
    cursor = base64.urlsafe_b64encode(json.dumps(payload).encode()).decode()

    response = client_for(tenant.viewer).get("/api/v1/projects/acme/agent/runs/", {"cursor": cursor})

    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def _generic(serializer_class, instance):
    """What DRF's own ``to_representation`` makes of ``instance``, rendered as the API renders."""
    from rest_framework import serializers
    from rest_framework.renderers import JSONRenderer

    return json.loads(
        JSONRenderer().render(serializers.ModelSerializer.to_representation(serializer_class(), instance))
    )


def _ordered(value) -> str:
    """``value`` as JSON text that keeps its keys' order (``==`` on dicts ignores it)."""
    return json.dumps(value, ensure_ascii=False)


def test_runs_list_and_steps_answer_exactly_what_drfs_serializers_would(tenant, three_runs, reader):
    """The lists' faster path (``ListedSerializer``, rows read without model instances,
    payloads as their stored JSON text, the orjson renderer) gives every field as DRF's
    serializers and renderer do, keys in the same order: decimal strings, "Z" times with
    microseconds, None, lists, JSON payloads with nested objects, unicode, line
    separators, large and small numbers; flat and as a tree."""
    from runs import selectors
    from runs.api import serializers as s

    project = tenant.project
    payload = {
        "zeta": {"b": [1, 2.5, None, True, False], "a": 'héllo ✓ \u2028 \x1f "quoted"'},
        "big": 12345678901234567890123,
        "small": 1.5e-07,
        "exp": 3e20,
        "": [],
    }
    load(
        project,
        runs=[RunEvent("r1", {"input": payload, "output": "ok ✓", "metadata": {"z": 1, "a": payload}})],
        steps=[
            llm_step(
                "r1",
                "odd",
                "mistral-small-2603",
                7,
                3,
                0.123457,
                input={"messages": [{"role": "user", "content": "héllo ✓"}]},
                output=payload,
                attributes={"n": [1, 2.5, None, True], "nested": payload},
            ),
            llm_step("r1", "child", "mistral-small-2603", 1, 1, 0.5, parent="odd", output=None, input="text"),
        ],
    )
    response = reader.get(runs_url(tenant))
    listed = response.json()["results"]
    steps = reader.get(runs_url(tenant, f"{run_pk(project, 'r1')}/steps/")).json()
    tree = reader.get(runs_url(tenant, f"{run_pk(project, 'r1')}/steps/"), {"tree": "1"}).json()
    detail = reader.get(runs_url(tenant, f"{run_pk(project, 'r1')}/")).json()
    with organization_scope(project.organization):
        runs = {run.pk: run for run in selectors.run_list(project=project)}
        assert _ordered(listed) == _ordered([_generic(s.RunSerializer, runs[item["id"]]) for item in listed])
        run = Run.objects.get(pk=run_pk(project, "r1"))
        assert _ordered(detail) == _ordered(_generic(s.RunDetailSerializer, run))
        assert detail["input"] == payload and detail["metadata"] == {"z": 1, "a": payload}
        nodes = selectors.flatten_tree(selectors.step_tree(run=runs[run_pk(project, "r1")]))
        for node in nodes:
            node.step.depth = node.depth
        expected = [_generic(s.StepListItemSerializer, node.step) for node in nodes]
    assert _ordered(steps) == _ordered(expected)
    assert any(step["started_at"].endswith(".123457Z") for step in steps)
    assert [step["output"] for step in steps if step["span_id"] == "odd"] == [payload]

    def flat(items):
        for item in items:
            yield {key: value for key, value in item.items() if key != "children"}
            yield from flat(item["children"])

    assert _ordered(list(flat(tree))) == _ordered(expected)
    # Outside the payloads the bytes are DRF's own (compact, UTF-8).
    assert response.content == _drf_rendered(response.json())


def _drf_rendered(data) -> bytes:
    from rest_framework.renderers import JSONRenderer

    return JSONRenderer().render(data)


def test_the_orjson_renderer_writes_what_drfs_renderer_writes():
    """``agentops.api.renderers.JSONRenderer`` gives DRF's bytes for what the API answers;
    what orjson cannot write goes through DRF's renderer; ``RawJSON`` is written as it is,
    and parsed where DRF's renderer writes the answer (indented, the browsable API)."""
    from decimal import Decimal

    from rest_framework.exceptions import ErrorDetail

    from agentops.api.renderers import JSONRenderer, RawJSON

    data = {
        "text": 'héllo ✓ \u2028 \u2029 \x00 \x1f \x7f \n \t "q" \\ </script>',
        "numbers": [0, -1, 2**63 - 1, -(2**63), 1.5, 0.1, 1e20, 123456.789, True, False, None],
        "when": datetime(2026, 11, 20, 12, 0, 0, 123456, tzinfo=UTC),
        "cost": Decimal("0.000500000"),
        "error": ErrorDetail("not found", code="not_found"),
        "nested": {"b": [], "a": {}, "": ()},
    }
    renderer = JSONRenderer()
    assert renderer.render(data) == _drf_rendered(data)
    huge = {"n": 2**70, 1: "a key that is not a string"}
    assert renderer.render(huge) == _drf_rendered(huge)
    assert renderer.render(None) == b""

    raw = {"payload": RawJSON('{"z": 1, "a": [1, 2.5, null]}'), "none": None}
    assert renderer.render(raw) == b'{"payload":{"z": 1, "a": [1, 2.5, null]},"none":null}'
    indented = renderer.render(raw, "application/json; indent=2")
    assert indented == JSONRenderer.__mro__[1]().render(
        {"payload": {"z": 1, "a": [1, 2.5, None]}, "none": None}, "application/json; indent=2"
    )


def test_listed_rows_are_read_only_inside_an_organization_scope(tenant, three_runs):
    """``ListedSerializer.read`` runs its statement itself: it refuses a queryset built
    with no organization in scope, as running the queryset would."""
    from agentops.scoping import UnscopedQueryError
    from runs.api import serializers as s

    with pytest.raises(UnscopedQueryError):
        s.RunSerializer.read(Run.objects.all())
    with organization_scope(tenant.project.organization):
        assert len(s.RunSerializer.read(Run.objects.all())) == 3


@pytest.mark.parametrize(
    "value",
    ["0.000500000", "0E-9", "-0E-9", "123456789.123456789", "999999999.999999999", "1.5", "2", "1E+3", "0.1234567891"],
)
def test_the_listed_decimal_string_is_drfs(value):
    """A cost as loaded (9 decimal places) is written as it is; any other decimal goes
    through DRF's field, so both give DRF's string."""
    from decimal import Decimal

    from runs.api import serializers as s
    from runs.api.listed import _plain

    field = s.StepSerializer.listed_fields()[[f.field_name for f in s.StepSerializer.listed_fields()].index("cost")]
    assert _plain(field)(Decimal(value)) == field.to_representation(Decimal(value))
