"""Comparing two runs (``runs.compare.compare_runs``): the step alignment of two known
runs, the word and line diffs of their outputs, their memory, metrics and settings; the
API (shape, 400s, isolation, roles) and the shareable page. Runs are stored through
``runs.ingest.ingest``. The alignment and text diffs alone:
test_compare_alignment.py, test_compare_text.py."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta

import pytest

from agentops.scoping import organization_scope
from runs import compare
from runs.events import MemoryEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.models import Run

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)
MODEL = "mistral-large-2512"  # priced: $0.50 in and $1.50 out per million tokens


def at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def completion(response_id: str, call_id: str, *, content: str = "", tool: str = "", arguments: str = "") -> dict:
    """An LLM step's output as the executor stores it: the provider's whole response,
    whose ids and timestamp differ in every call."""
    calls = [{"id": call_id, "type": "function", "function": {"name": tool, "arguments": arguments}}] if tool else None
    return {
        "id": response_id,
        "object": "chat.completion",
        "created": hash(response_id) % 1000,
        "model": MODEL,
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls" if tool else "stop",
                "message": {"role": "assistant", "content": content, "tool_calls": calls},
            }
        ],
        "usage": {"prompt_tokens": len(response_id), "completion_tokens": 1},
    }


def agent_run(project, trace_id: str, *, plan: list[tuple], answer: str, memory: dict, seconds: float) -> Run:
    """A run: a root agent step, then ``plan`` in order, each ("llm", output, input
    tokens, output tokens) or ("tool", name, arguments, result, error); two memory
    snapshots, the last one ``memory``."""
    steps = [
        StepEvent(
            trace_id=trace_id,
            span_id="root",
            kind="agent",
            name="calculator agent",
            started_at=at(0),
            ended_at=at(seconds),
            status="ok",
            input={"question": "What is 1+1?"},
            output={"answer": answer},
        )
    ]
    calls = []
    for index, entry in enumerate(plan):
        span_id = f"s{index}"
        if entry[0] == "llm":
            _, output, input_tokens, output_tokens = entry
            steps.append(
                StepEvent(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id="root",
                    kind="llm",
                    name="chat",
                    model=MODEL,
                    started_at=at(index * 0.5 + 0.1),
                    ended_at=at(index * 0.5 + 0.4),
                    status="ok",
                    input_tokens=input_tokens,
                    output_tokens=output_tokens,
                    input={"messages": [{"role": "user", "content": f"history of {trace_id} up to {index}"}]},
                    output=output,
                )
            )
        else:
            _, name, arguments, result, error = entry
            steps.append(
                StepEvent(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id="root",
                    kind="tool",
                    name=name,
                    started_at=at(index * 0.5 + 0.1),
                    ended_at=at(index * 0.5 + 0.4),
                    status="error" if error else "ok",
                    error=error,
                    input=arguments,
                    output=result,
                )
            )
            calls.append(
                ToolCallEvent(
                    trace_id=trace_id,
                    call_id=f"{trace_id}-call-{index}",
                    tool_name=name,
                    span_id=span_id,
                    arguments=arguments,
                    result=result,
                    error=error,
                    latency_ms=300.0,
                    started_at=at(index * 0.5 + 0.1),
                )
            )
    snapshots = [
        MemoryEvent(trace_id, "m0", 0, {"x": None}, span_id="s0"),
        MemoryEvent(trace_id, "m1", 1, memory, span_id=f"s{len(plan) - 1}"),
    ]
    with organization_scope(project.organization):
        ingest(
            project=project,
            runs=[RunEvent(trace_id, {"name": f"run {trace_id}", "agent_name": "calc"})],
            steps=steps,
            tool_calls=calls,
            snapshots=snapshots,
            announce=False,
        )
        return Run.objects.get(project=project, trace_id=trace_id)


def run_a(project, trace_id: str = "run-a") -> Run:
    """llm, calc(1+1) = 2, llm, memory_set(x), llm."""
    return agent_run(
        project,
        trace_id,
        plan=[
            ("llm", completion("cmpl-a1", "call-a1", tool="calc", arguments='{"expression": "1+1"}'), 100, 10),
            ("tool", "calc", {"expression": "1+1"}, {"value": 2}, ""),
            (
                "llm",
                {"content": "", "tool_calls": [{"name": "memory_set", "arguments": {"key": "x", "value": 2}}]},
                100,
                10,
            ),
            ("tool", "memory_set", {"key": "x", "value": 2}, "ok", ""),
            ("llm", {"content": "The answer is 2."}, 100, 10),
        ],
        answer="The answer is 2. Memory saved.",
        memory={"x": 2, "user": "ann", "history": ["q1"]},
        seconds=4,
    )


def run_b(project, trace_id: str = "run-b") -> Run:
    """llm (same answer, other ids), calc(1+1) = 3, llm asking for http_fetch,
    http_fetch (failed), llm."""
    return agent_run(
        project,
        trace_id,
        plan=[
            ("llm", completion("cmpl-b1", "call-b1", tool="calc", arguments='{"expression":"1+1"}'), 100, 10),
            ("tool", "calc", {"expression": "1+1"}, {"value": 3}, ""),
            (
                "llm",
                {"content": "", "tool_calls": [{"name": "http_fetch", "arguments": {"url": "https://example.com"}}]},
                120,
                12,
            ),
            ("tool", "http_fetch", {"url": "https://example.com"}, None, "timeout"),
            ("llm", {"content": "The answer is 3."}, 150, 30),
        ],
        answer="The answer is 3. I fetched the docs.",
        memory={"x": 3, "history": ["q1"], "source": "docs"},
        seconds=6,
    )


@pytest.fixture
def two_runs(tenant):
    return run_a(tenant.project), run_b(tenant.project)


def compared(project, a: Run, b: Run) -> dict:
    with organization_scope(project.organization):
        return compare.compare_runs(a, b)


def alignment(result: dict) -> list[tuple]:
    return [
        (pair["status"], pair["a"]["name"] if pair["a"] else None, pair["b"]["name"] if pair["b"] else None)
        for pair in result["steps"]["pairs"]
    ]


# --- Steps -----------------------------------------------------------------------------------


def test_the_diff_of_two_known_runs_matches_the_expected_alignment_exactly(tenant, two_runs):
    result = compared(tenant.project, *two_runs)

    assert alignment(result) == [
        ("same", "chat", "chat"),  # same answer: response and tool call ids are left out
        ("changed", "calc", "calc"),  # same tool and arguments, another result
        ("changed", "chat", "chat"),  # asked for another tool
        ("removed", "memory_set", None),
        ("added", None, "http_fetch"),
        ("changed", "chat", "chat"),
    ]
    assert result["steps"]["summary"] == {"same": 1, "changed": 3, "added": 1, "removed": 1}
    pairs = result["steps"]["pairs"]
    assert pairs[0]["differences"] == []
    assert pairs[1]["differences"] == [{"field": "result", "path": "value", "kind": "changed", "a": 2, "b": 3}]
    assert pairs[2]["differences"] == [
        {"field": "output", "path": "tool_calls[0].name", "kind": "changed", "a": "memory_set", "b": "http_fetch"},
        {
            "field": "output",
            "path": "tool_calls[0].arguments.url",
            "kind": "added",
            "a": None,
            "b": "https://example.com",
        },
        {"field": "output", "path": "tool_calls[0].arguments.key", "kind": "removed", "a": "x", "b": None},
        {"field": "output", "path": "tool_calls[0].arguments.value", "kind": "removed", "a": 2, "b": None},
    ]
    assert pairs[5]["differences"] == [
        {"field": "output", "path": "content", "kind": "changed", "a": "The answer is 2.", "b": "The answer is 3."}
    ]
    # Each side says which step it is, where it sits in its run, and previews it.
    calc_a, calc_b = pairs[1]["a"], pairs[1]["b"]
    assert (calc_a["position"], calc_a["kind"], calc_a["span_id"]) == (2, "tool", "s1")
    assert calc_a["preview"] == '{"expression": "1+1"}' and calc_b["outcome"] == '{"value": 3}'
    assert pairs[4]["b"]["status"] == "error" and pairs[4]["b"]["outcome"] == "timeout"
    assert pairs[0]["a"]["outcome"] == 'calc({"expression": "1+1"})'
    assert pairs[5]["b"]["preview"] == MODEL and pairs[5]["b"]["outcome"] == "The answer is 3."


def test_the_same_tool_with_other_arguments_at_the_same_place_is_one_changed_pair(tenant):
    a = run_a(tenant.project)
    b = agent_run(
        tenant.project,
        "run-c",
        plan=[
            ("llm", completion("cmpl-c1", "call-c1", tool="calc", arguments='{"expression": "1+2"}'), 100, 10),
            ("tool", "calc", {"expression": "1+2"}, {"value": 3}, ""),
            (
                "llm",
                {"content": "", "tool_calls": [{"name": "memory_set", "arguments": {"key": "x", "value": 2}}]},
                100,
                10,
            ),
            ("tool", "memory_set", {"key": "x", "value": 2}, "ok", ""),
            ("llm", {"content": "The answer is 2."}, 100, 10),
        ],
        answer="The answer is 2. Memory saved.",
        memory={"x": 2, "user": "ann", "history": ["q1"]},
        seconds=4,
    )

    result = compared(tenant.project, a, b)

    assert alignment(result) == [
        ("changed", "chat", "chat"),
        ("changed", "calc", "calc"),
        ("same", "chat", "chat"),
        ("same", "memory_set", "memory_set"),
        ("same", "chat", "chat"),
    ]
    assert result["steps"]["pairs"][1]["differences"] == [
        {"field": "arguments", "path": "expression", "kind": "changed", "a": "1+1", "b": "1+2"},
        {"field": "result", "path": "value", "kind": "changed", "a": 2, "b": 3},
    ]


def test_a_run_compared_with_itself_is_the_same_everywhere(tenant):
    a = run_a(tenant.project)

    result = compared(tenant.project, a, a)

    assert [pair["status"] for pair in result["steps"]["pairs"]] == ["same"] * 5
    assert result["output"]["equal"] and result["output"]["inline"] == [
        {"op": "equal", "text": "The answer is 2. Memory saved."}
    ]
    assert result["memory"]["equal"] and result["memory"]["changes"] == []
    assert all(metric["delta"] in (0, "0E-9", "0.000000000") for metric in result["metrics"].values())


def test_the_root_step_is_the_run_itself_and_is_not_aligned(tenant, two_runs):
    result = compared(tenant.project, *two_runs)

    names = {pair["a"]["name"] for pair in result["steps"]["pairs"] if pair["a"]}
    assert "calculator agent" not in names


def test_a_tool_call_without_a_step_is_aligned_as_a_tool_step(tenant):
    with organization_scope(tenant.organization):
        for trace_id, city in (("lone-a", "Paris"), ("lone-b", "Rome")):
            ingest(
                project=tenant.project,
                runs=[RunEvent(trace_id, {"name": trace_id})],
                steps=[StepEvent(trace_id, "l1", kind="llm", name="chat", started_at=at(0), ended_at=at(1))],
                tool_calls=[
                    ToolCallEvent(trace_id, "c1", "weather", arguments={"city": city}, started_at=at(2)),
                    ToolCallEvent(trace_id, "c0", "clock", arguments={}, started_at=at(0.5)),
                ],
                announce=False,
            )
        a, b = (Run.objects.get(trace_id=trace_id) for trace_id in ("lone-a", "lone-b"))

    result = compared(tenant.project, a, b)

    assert alignment(result) == [
        ("same", "chat", "chat"),
        ("same", "clock", "clock"),
        ("changed", "weather", "weather"),
    ]


def test_other_steps_are_paired_by_kind_and_name_and_compare_input_output_and_error(tenant):
    with organization_scope(tenant.organization):
        for trace_id, query, documents in (("rag-a", "refund policy", ["d1", "d2"]), ("rag-b", "refunds", ["d1"])):
            ingest(
                project=tenant.project,
                runs=[RunEvent(trace_id, {"name": trace_id})],
                steps=[
                    StepEvent(trace_id, "root", kind="chain", name="rag", started_at=at(0), ended_at=at(3)),
                    StepEvent(
                        trace_id,
                        "r1",
                        parent_span_id="root",
                        kind="retrieval",
                        name="search",
                        started_at=at(1),
                        ended_at=at(2),
                        input={"query": query},
                        output=documents,
                    ),
                ],
                announce=False,
            )
        a, b = (Run.objects.get(trace_id=trace_id) for trace_id in ("rag-a", "rag-b"))

    pairs = compared(tenant.project, a, b)["steps"]["pairs"]

    assert [(pair["status"], pair["kind"], pair["name"]) for pair in pairs] == [("changed", "retrieval", "search")]
    assert pairs[0]["differences"] == [
        {"field": "input", "path": "query", "kind": "changed", "a": "refund policy", "b": "refunds"},
        {"field": "output", "path": "[1]", "kind": "removed", "a": "d2", "b": None},
    ]
    assert pairs[0]["a"]["preview"] == '{"query": "refund policy"}'


def test_comparing_costs_a_fixed_number_of_queries_whatever_the_runs_size(tenant, django_assert_num_queries):
    small_a, small_b = run_a(tenant.project), run_b(tenant.project)
    big = [("tool", "calc", {"expression": f"{n}+1"}, {"value": n + 1}, "") for n in range(60)]
    big_a = agent_run(tenant.project, "big-a", plan=big, answer="a", memory={"n": 1}, seconds=60)
    big_b = agent_run(tenant.project, "big-b", plan=big[::-1], answer="b", memory={"n": 2}, seconds=60)

    with organization_scope(tenant.organization):
        # Steps, tool calls, snapshots, the settings in the runs' state; and for each
        # ingested run its first model call and (when it has one) its tool definitions.
        with django_assert_num_queries(8):
            compare.compare_runs(small_a, small_b)
        with django_assert_num_queries(6):  # no model call: no tool definitions to read
            result = compare.compare_runs(big_a, big_b)
    assert len(result["steps"]["pairs"]) >= 60


def test_runs_of_two_projects_are_not_compared(tenant):
    from tests.agentops.factories import ProjectFactory

    other = ProjectFactory(organization=tenant.organization, slug="other")
    a, b = run_a(tenant.project), run_a(other, "elsewhere")
    with organization_scope(tenant.organization), pytest.raises(ValueError):
        compare.compare_runs(a, b)


# --- Outputs, memory, metrics ------------------------------------------------------------------


def test_the_word_diff_of_the_final_outputs_is_exact(tenant, two_runs):
    output = compared(tenant.project, *two_runs)["output"]

    assert output["a"] == {"text": "The answer is 2. Memory saved.", "truncated": False}
    assert output["b"] == {"text": "The answer is 3. I fetched the docs.", "truncated": False}
    assert output["inline"] == [
        {"op": "equal", "text": "The answer is "},
        {"op": "delete", "text": "2"},
        {"op": "insert", "text": "3"},
        {"op": "equal", "text": ". "},
        {"op": "delete", "text": "Memory"},
        {"op": "insert", "text": "I"},
        {"op": "equal", "text": " "},
        {"op": "delete", "text": "saved"},
        {"op": "insert", "text": "fetched the docs"},
        {"op": "equal", "text": "."},
    ]
    assert output["equal"] is False
    assert output["side_by_side"] == [
        {
            "op": "changed",
            "a": {"number": 1, "segments": [s for s in output["inline"] if s["op"] != "insert"]},
            "b": {"number": 1, "segments": [s for s in output["inline"] if s["op"] != "delete"]},
        }
    ]
    assert output["changes"] == [
        {
            "field": "output",
            "path": "answer",
            "kind": "changed",
            "a": "The answer is 2. Memory saved.",
            "b": "The answer is 3. I fetched the docs.",
        }
    ]


def test_memory_diff_lists_keys_added_removed_and_changed_between_the_final_snapshots(tenant, two_runs):
    memory = compared(tenant.project, *two_runs)["memory"]

    assert memory["changes"] == [
        {"field": "memory", "path": "x", "kind": "changed", "a": 2, "b": 3},
        {"field": "memory", "path": "source", "kind": "added", "a": None, "b": "docs"},
        {"field": "memory", "path": "user", "kind": "removed", "a": "ann", "b": None},
    ]
    assert memory["a"]["sequence"] == 1 and memory["b"]["snapshot_id"] == "m1"
    assert memory["equal"] is False and memory["changes_truncated"] is False


def test_metrics_have_both_values_and_their_deltas(tenant, two_runs):
    metrics = compared(tenant.project, *two_runs)["metrics"]

    assert metrics["input_tokens"] == {"a": 300, "b": 370, "delta": 70, "percent": 23.33}
    assert metrics["output_tokens"] == {"a": 30, "b": 52, "delta": 22, "percent": 73.33}
    # $0.50 and $1.50 per million tokens in and out.
    assert metrics["total_cost"] == {"a": "0.000195000", "b": "0.000263000", "delta": "0.000068000", "percent": 34.87}
    assert metrics["latency_ms"] == {"a": 4000, "b": 6000, "delta": 2000, "percent": 50.0}
    assert metrics["step_count"] == {"a": 6, "b": 6, "delta": 0, "percent": 0.0}
    assert metrics["llm_calls"] == {"a": 3, "b": 3, "delta": 0, "percent": 0.0}
    assert metrics["tool_calls"] == {"a": 2, "b": 2, "delta": 0, "percent": 0.0}
    assert metrics["errors"] == {"a": 0, "b": 1, "delta": 1, "percent": None}


# --- The API ------------------------------------------------------------------------------------

API = "/api/v1/projects/acme/agent/compare/"


def test_api_returns_the_diff_as_json(tenant, two_runs, client_for):
    a, b = two_runs

    response = client_for(tenant.owner).get(API, {"a": a.pk, "b": b.pk})

    assert response.status_code == 200, response.content
    body = response.json()
    assert set(body) == {"a", "b", "settings", "metrics", "output", "steps", "memory"}
    assert body["a"]["id"] == a.pk and body["b"]["trace_id"] == "run-b"
    assert [pair["status"] for pair in body["steps"]["pairs"]] == [
        "same",
        "changed",
        "changed",
        "removed",
        "added",
        "changed",
    ]
    assert body["metrics"]["total_cost"]["delta"] == "0.000068000"
    assert body == compared(tenant.project, a, b)


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ({"b": 1}, "a: This field is required."),
        ({"a": 1}, "b: This field is required."),
        ({"a": "x", "b": 1}, "a: A valid integer is required."),
        ({"a": 1, "b": "2.5"}, "b: A valid integer is required."),
        ({"a": 0, "b": 1}, "a: Ensure this value is greater than or equal to 1."),
    ],
)
def test_api_answers_400_naming_a_missing_or_malformed_run_id(tenant, client_for, query, message):
    response = client_for(tenant.owner).get(API, query)

    assert response.status_code == 400
    assert response.json()["error"]["code"] == "invalid"
    assert response.json()["error"]["message"] == message


def test_api_answers_404_for_a_run_of_another_tenant_or_none(tenant, other_tenant, two_runs, client_for):
    a, _b = two_runs
    foreign = run_b(other_tenant.project, "globex-secret")
    client = client_for(tenant.owner)

    for query, missing in (
        ({"a": a.pk, "b": foreign.pk}, "b"),
        ({"a": foreign.pk, "b": a.pk}, "a"),
        ({"a": a.pk, "b": 999_999}, "b"),
    ):
        response = client.get(API, query)
        assert response.status_code == 404, query
        assert response.json()["error"] == {"code": "not_found", "message": f"run {missing} not found", "details": None}
        assert "globex" not in response.content.decode()
    # The other organization's own URL is not reachable either.
    outsider = client_for(other_tenant.owner).get(API, {"a": a.pk, "b": a.pk})
    assert outsider.status_code == 404
    foreign_url = "/api/v1/projects/globex/agent/compare/"
    assert client.get(foreign_url, {"a": foreign.pk, "b": foreign.pk}).status_code == 404


def test_api_is_readable_by_a_viewer_and_a_read_key_of_the_project(
    tenant, other_tenant, two_runs, client_for, key_client
):
    a, b = two_runs
    query = {"a": a.pk, "b": b.pk}

    assert client_for(tenant.viewer).get(API, query).status_code == 200
    assert key_client(tenant.project, ["read"]).get(API, query).status_code == 200
    assert key_client(tenant.project, ["ingest"]).get(API, query).status_code == 403
    assert key_client(other_tenant.project, ["read"]).get(API, query).status_code in (403, 404)


def test_api_is_in_the_openapi_schema(client):
    document = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").json()

    operation = document["paths"]["/api/v1/projects/{org_slug}/{project_slug}/compare/"]["get"]
    assert {parameter["name"] for parameter in operation["parameters"]} >= {"a", "b"}


# --- The page -----------------------------------------------------------------------------------

PAGE = "/o/acme/p/agent/runs/compare/"


def test_compare_page_shows_both_runs_metrics_outputs_steps_and_memory(client, tenant, two_runs):
    a, b = two_runs
    client.force_login(tenant.viewer)

    response = client.get(PAGE, {"a": a.pk, "b": b.pk})

    assert response.status_code == 200
    html = response.content.decode()
    for marker in ("compare-runs", "compare-metrics", "compare-output", "compare-steps", "compare-memory"):
        assert f'id="{marker}"' in html, marker
    assert f'href="/o/acme/p/agent/runs/{a.pk}/"' in html and f'href="/o/acme/p/agent/runs/{b.pk}/"' in html
    assert '<del class="diff-old"><span class="visually-hidden">[deleted: </span>Memory' in html
    assert '<ins class="diff-new"><span class="visually-hidden">[inserted: </span>fetched the docs' in html
    assert html.count('<tr class="pair-') == 6
    assert 'class="pair-removed"' in html and 'class="pair-added"' in html
    assert "memory_set" in html and "http_fetch" in html
    assert "<code>result.value</code>" in html
    assert "<code>source</code>" in html and "<code>user</code>" in html
    assert "+70" in html and "+$0.000068" in html and "+50.0%" in html


def test_compare_page_can_hide_unchanged_steps(client, tenant, two_runs):
    a, b = two_runs
    client.force_login(tenant.member)

    html = client.get(PAGE, {"a": a.pk, "b": b.pk, "only": "changes"}).content.decode()

    assert html.count('<tr class="pair-') == 5 and 'class="pair-same"' not in html


def test_compare_page_without_runs_shows_the_form_and_names_a_bad_id(client, tenant, two_runs):
    client.force_login(tenant.viewer)

    empty = client.get(PAGE)
    started = client.get(PAGE, {"a": two_runs[0].pk})
    bad = client.get(PAGE, {"a": "x", "b": two_runs[1].pk})

    assert empty.status_code == 200 and 'id="compare-form"' in empty.content.decode()
    assert 'id="compare-steps"' not in empty.content.decode()
    assert f'value="{two_runs[0].pk}"' in started.content.decode()
    assert "This field is required." not in started.content.decode()
    assert bad.status_code == 200 and "Enter a whole number." in bad.content.decode()
    assert 'id="compare-steps"' not in bad.content.decode()


def test_compare_page_is_404_for_another_tenants_run_and_for_outsiders(client, tenant, other_tenant, two_runs):
    a, _b = two_runs
    foreign = run_b(other_tenant.project, "globex-secret")

    client.force_login(tenant.owner)
    response = client.get(PAGE, {"a": a.pk, "b": foreign.pk})
    assert response.status_code == 404
    assert "globex-secret" not in response.content.decode()

    client.force_login(other_tenant.owner)
    assert client.get(PAGE, {"a": a.pk, "b": a.pk}).status_code == 404


def test_the_runs_list_links_to_the_compare_page(client, tenant, two_runs):
    client.force_login(tenant.viewer)

    html = client.get("/o/acme/p/agent/runs/").content.decode()

    assert f'href="{PAGE}"' in html


# --- Settings: what a replay changed -------------------------------------------------------------


@pytest.fixture
def replayed(tenant):
    """An executed run of an offline agent, and a replay of it with another temperature,
    seed, system prompt and tool set, its tool calls served from the recording."""
    from runs.execution import run_execute, run_start
    from runs.services.agents import agent_create
    from runs.services.replay import replay_start

    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="calc",
            model="offline",
            system_prompt="You are a careful calculator.",
            tools=["calculator", "memory_set"],
            parameters={"temperature": 0.1, "random_seed": 1},
        )
        source = run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6*7?")
        run_execute(run_id=source.pk)
        source.refresh_from_db()
        (replay,) = replay_start(
            source=source,
            actor=tenant.member,
            overrides={
                "temperature": 0.9,
                "random_seed": 3,
                "system_prompt": "You are a hasty calculator.",
                "tools": ["calculator"],
            },
            tool_mode="recorded",
        )
        run_execute(run_id=replay.pk)
        replay.refresh_from_db()
    return source, replay


def test_a_replay_compared_with_its_source_names_the_settings_it_changed_first(tenant, replayed, client_for):
    source, replay = replayed

    body = client_for(tenant.viewer).get(API, {"a": source.pk, "b": replay.pk}).json()

    assert list(body)[:3] == ["a", "b", "settings"]
    settings = body["settings"]
    assert settings["equal"] is False
    changes = {change["name"]: change for change in settings["changes"]}
    assert list(changes) == ["temperature", "random_seed", "system_prompt", "tools", "tool_mode"]
    assert (changes["temperature"]["a"], changes["temperature"]["b"]) == (0.1, 0.9)
    assert (changes["random_seed"]["a"], changes["random_seed"]["b"]) == (1, 3)
    assert changes["system_prompt"]["inline"] == [
        {"op": "equal", "text": "You are a "},
        {"op": "delete", "text": "careful"},
        {"op": "insert", "text": "hasty"},
        {"op": "equal", "text": " calculator."},
    ]
    assert changes["tools"]["removed"] == ["memory_set"] and changes["tools"]["added"] == []
    assert (changes["tool_mode"]["a"], changes["tool_mode"]["b"]) == ("live", "recorded")
    # What did not change is there too, for reference.
    assert settings["a"]["model"] == settings["b"]["model"] == "offline"
    assert settings["a"]["top_p"] is None and settings["b"]["max_tokens"] is None


def test_a_run_compared_with_itself_has_no_setting_changes(tenant, replayed, client_for):
    source, _replay = replayed

    body = client_for(tenant.viewer).get(API, {"a": source.pk, "b": source.pk}).json()

    assert body["settings"]["equal"] is True and body["settings"]["changes"] == []


def test_ingested_runs_settings_are_read_from_their_first_model_call(tenant):
    def ingested(trace_id: str, temperature: float, system: str) -> Run:
        ingest(
            project=tenant.project,
            steps=[
                StepEvent(
                    trace_id=trace_id,
                    span_id="llm",
                    kind="llm",
                    name="chat",
                    model=MODEL,
                    started_at=at(0),
                    ended_at=at(1),
                    status="ok",
                    input={
                        "messages": [{"role": "system", "content": system}, {"role": "user", "content": "Hi"}],
                        "tools": [{"type": "function", "function": {"name": "lookup", "parameters": {}}}],
                    },
                    attributes={"gen_ai.request.temperature": temperature, "gen_ai.request.seed": 7},
                )
            ],
        )
        return Run.objects.get(project=tenant.project, trace_id=trace_id)

    with organization_scope(tenant.organization):
        a, b = ingested("otel-a", 0.2, "Be brief."), ingested("otel-b", 0.7, "Be brief.")
        settings = compare.compare_runs(a, b)["settings"]

    assert settings["a"]["model"] == MODEL and settings["a"]["tools"] == ["lookup"]
    assert settings["a"]["system_prompt"] == "Be brief." and settings["a"]["random_seed"] == 7
    assert settings["changes"] == [{"name": "temperature", "a": 0.2, "b": 0.7}]


def test_compare_page_shows_what_changed_before_anything_else(client, tenant, replayed):
    source, replay = replayed
    client.force_login(tenant.viewer)

    html = client.get(PAGE, {"a": source.pk, "b": replay.pk}).content.decode()

    assert html.index('id="compare-settings"') < html.index('id="compare-runs"') < html.index('id="compare-metrics"')
    changed = html[
        html.index('id="compare-settings-changes"') : html.index("</table>", html.index('id="compare-settings"'))
    ]
    assert 'id="setting-temperature"' in changed and "0.1" in changed and "0.9" in changed
    assert 'id="setting-random_seed"' in changed
    assert '<del class="diff-old"><span class="visually-hidden">[deleted: </span>careful' in changed
    assert "removed memory_set" in changed
    assert "served from the recording" in changed and "made for real" in changed
    assert 'id="setting-model"' not in changed


def test_compare_page_says_when_no_setting_changed(client, tenant, replayed):
    source, _replay = replayed
    client.force_login(tenant.viewer)

    html = client.get(PAGE, {"a": source.pk, "b": source.pk}).content.decode()

    assert 'id="compare-settings-equal"' in html and 'id="compare-settings-changes"' not in html
