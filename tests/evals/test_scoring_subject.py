"""What an evaluator sees of a run (``evals.scoring.subject``): ``Subject.from_run``
and ``Subject.reported``."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from agentops.scoping import organization_scope
from evals.scoring import reads_trajectory
from evals.scoring.subject import Subject, ToolCallView
from runs.events import RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.models import Run
from tests.evals.scoring_helpers import score

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


# --- What an evaluator sees of a run ---------------------------------------------------------------


def make_run(tenant) -> Run:
    trace = "trace-eval"
    with organization_scope(tenant.organization):
        ingest(
            project=tenant.project,
            runs=[
                RunEvent(
                    trace,
                    {"input": "Refund ORD-1", "output": "Refunded.", "status": "succeeded", "metadata": {"team": "a"}},
                )
            ],
            steps=[
                StepEvent(
                    trace,
                    "s2",
                    kind="tool",
                    name="lookup_order",
                    started_at=T0 + timedelta(seconds=2),
                    ended_at=T0 + timedelta(seconds=2, milliseconds=40),
                    input={"order_id": "ORD-1"},
                ),
                StepEvent(
                    trace,
                    "s1",
                    kind="llm",
                    name="chat",
                    model="mistral-small-latest",
                    started_at=T0,
                    input=[{"role": "user", "content": "Refund ORD-1"}],
                    output="calling lookup_order",
                ),
            ],
            tool_calls=[
                ToolCallEvent(trace, "c2", "issue_refund", started_at=T0 + timedelta(seconds=3), arguments={"id": 1}),
                ToolCallEvent(
                    trace,
                    "c1",
                    "lookup_order",
                    started_at=T0 + timedelta(seconds=2),
                    arguments={"order_id": "ORD-1"},
                    result={"status": "paid"},
                ),
            ],
            announce=False,
        )
        return Run.objects.get(project=tenant.project, trace_id=trace)


def test_subject_from_run_loads_the_trajectory_in_order_in_two_queries(tenant, django_assert_num_queries):
    run = make_run(tenant)
    with organization_scope(tenant.organization), django_assert_num_queries(2):
        seen = Subject.from_run(run)
    assert [(step.kind, step.name) for step in seen.steps] == [("llm", "chat"), ("tool", "lookup_order")]
    assert seen.steps[1].latency_ms == 40 and seen.steps[0].model == "mistral-small-latest"
    assert [call.name for call in seen.tool_calls] == ["lookup_order", "issue_refund"]
    assert seen.tool_calls[0].result == {"status": "paid"}
    assert (seen.input, seen.output, seen.expected, seen.metadata) == ("Refund ORD-1", "Refunded.", None, {"team": "a"})
    assert seen.run_id == run.pk and seen.run_status == "succeeded"


def test_subject_from_run_takes_input_and_expected_from_the_item(tenant):
    run = make_run(tenant)
    item = {"input": {"q": "refund"}, "expected": "Refunded.", "metadata": {"split": "test"}}
    with organization_scope(tenant.organization):
        seen = Subject.from_run(run, item=item)
    assert (seen.input, seen.expected, seen.metadata) == ({"q": "refund"}, "Refunded.", {"split": "test"})
    assert score("exact_match", {}, seen).value == 1.0


def test_output_only_evaluators_score_a_run_without_reading_its_trajectory(tenant, django_assert_num_queries):
    """Rules that read the output (an experiment's usual evaluators) score from the run row
    alone; an evaluator reading steps or tool calls gets the trajectory."""
    run = make_run(tenant)
    rules = [{"kind": "exact_match"}, {"kind": "contains"}, {"kind": "latency_limit"}]
    assert not reads_trajectory(rules)
    assert reads_trajectory([*rules, {"kind": "trajectory"}])
    assert reads_trajectory([{"kind": "no-such-kind"}])  # unknown: assumed to read it
    with organization_scope(tenant.organization), django_assert_num_queries(0):
        seen = Subject.from_run(run, item={"input": "Refund ORD-1", "expected": "Refunded."}, trajectory=False)
    assert (seen.steps, seen.tool_calls) == ([], [])
    assert score("exact_match", {}, seen).value == 1.0


def test_reported_subject_reads_tool_calls_from_tool_steps():
    seen = Subject.reported(
        item={"input": "x", "expected": "y"},
        output="y",
        cost="0.002",
        steps=[{"kind": "llm", "name": "chat"}, {"kind": "tool", "name": "search", "input": {"q": "x"}}],
    )
    assert seen.cost == Decimal("0.002") and seen.expected == "y"
    assert seen.tool_calls == [ToolCallView(name="search", arguments={"q": "x"}, result=None, error="")]
    assert score("trajectory", {"tool": "search", "arguments": {"q": "x"}}, seen).value == 1.0
