"""The trajectory evaluator kind (``evals.scoring.trajectory``)."""

from __future__ import annotations

import pytest

from evals.scoring.subject import StepView, Subject, ToolCallView
from tests.evals.scoring_helpers import score, subject


def trajectory(*calls: tuple[str, dict], steps: int | None = None) -> Subject:
    tool_calls = [ToolCallView(name=name, arguments=arguments, result="ok", error="") for name, arguments in calls]
    step_views = [
        StepView(kind=kind, name=name, status="ok", model="", input=None, output=None, error="", latency_ms=5)
        for kind, name in [("agent", "agent")] + [("llm", "chat")] * (steps or 0)
    ]
    return subject("done", steps=step_views if steps is not None else [], tool_calls=tool_calls)


def test_trajectory_passes_every_check():
    config = {
        "tool": "lookup_order",
        "arguments": {"order_id": r"ORD-\d+", "options.refund": True},
        "max_steps": 3,
        "forbidden_tools": ["delete_order"],
        "order": ["lookup_order", "issue_refund"],
    }
    run = trajectory(
        ("lookup_order", {"order_id": "nope"}),
        ("lookup_order", {"order_id": "ORD-12", "options": {"refund": True}}),
        ("issue_refund", {}),
    )
    outcome = score("trajectory", config, run)
    assert outcome.value == 1.0 and outcome.reasoning == "all 4 checks passed"
    assert [check["check"] for check in outcome.details["checks"]] == ["tool", "max_steps", "forbidden_tools", "order"]


def test_trajectory_score_is_the_share_of_checks_that_pass():
    config = {"tool": "lookup_order", "arguments": {"order_id": "ORD-1"}, "max_steps": 2, "forbidden_tools": ["rm"]}
    run = trajectory(("lookup_order", {"order_id": "ORD-2"}), ("rm", {}), steps=2)
    outcome = score("trajectory", config, run)
    # The agent span is not counted: 2 LLM steps are within the budget.
    assert outcome.value == pytest.approx(1 / 3)
    assert outcome.details["failed"] == ["tool", "forbidden_tools"]
    assert "never with matching order_id" in outcome.reasoning and "called rm" in outcome.reasoning


def test_trajectory_order_is_a_subsequence_and_missing_tools_fail():
    config = {"order": ["search", "answer"], "tool": "search"}
    assert score("trajectory", config, trajectory(("search", {}), ("fetch", {}), ("answer", {}))).value == 1.0
    outcome = score("trajectory", config, trajectory(("answer", {}), ("search", {})))
    assert outcome.value == 0.5 and "calls were: answer → search" in outcome.reasoning
    assert score("trajectory", {"tool": "search"}, trajectory()).reasoning == "failed: tool: search was never called"
    # With no steps recorded, max_steps counts the tool calls.
    assert score("trajectory", {"max_steps": 1}, trajectory(("a", {}), ("b", {}))).value == 0.0
