"""Aligning two runs' steps (``runs.compare.alignment``), on step sequences written as
plans: LLM calls pair by position between the tools that anchor them, a tool with other
arguments pairs only where no equal call is lost, and long runs are aligned the same
way around their matches."""

from __future__ import annotations

import pytest

from runs.compare import alignment
from runs.compare.items import StepItem


def plan_items(plan: str) -> list[StepItem]:
    """Steps from a plan like "L calc:1 L": L an LLM call, name:arguments a tool call."""
    items, llm_calls = [], 0
    for word in plan.split():
        if word == "L":
            llm_calls += 1
            items.append(StepItem(kind="llm", name="chat", step=None, call=None, key=("llm", llm_calls)))
        else:
            name, _, arguments = word.partition(":")
            items.append(StepItem(kind="tool", name=name, step=None, call=None, key=("tool", name, arguments)))
    return items


def plan_alignment(plan_a: str, plan_b: str) -> list[tuple]:
    def show(item):
        return None if item is None else ("L" if item.kind == "llm" else f"{item.name}:{item.key[2]}")

    return [(show(a), show(b)) for a, b in alignment.aligned_items(plan_items(plan_a), plan_items(plan_b))]


@pytest.mark.parametrize("cells", [alignment.ALIGN_CELLS, 4])  # 4: the anchored alignment of long runs
def test_llm_calls_pair_by_position_between_the_tools_that_anchor_them(monkeypatch, cells):
    monkeypatch.setattr(alignment, "ALIGN_CELLS", cells)

    # An LLM call skipped in the middle is the one removed, not the last one.
    assert plan_alignment("L calc:1 L calc:2 L", "L calc:1 calc:2 L") == [
        ("L", "L"),
        ("calc:1", "calc:1"),
        ("L", None),
        ("calc:2", "calc:2"),
        ("L", "L"),
    ]
    # One more LLM call at the end of a stretch of them: the first ones pair first.
    assert plan_alignment("search:q L L", "search:q L L L") == [
        ("search:q", "search:q"),
        ("L", "L"),
        ("L", "L"),
        (None, "L"),
    ]
    # Nothing in common at either end: the whole runs are aligned.
    assert plan_alignment("calc:0 L calc:2 L calc:3 L fetch:x", "calc:9 L calc:2 L L calc:3 L store:x") == [
        ("calc:0", "calc:9"),
        ("L", "L"),
        ("calc:2", "calc:2"),
        ("L", "L"),
        (None, "L"),
        ("calc:3", "calc:3"),
        ("L", "L"),
        ("fetch:x", None),
        (None, "store:x"),
    ]


def test_a_tool_with_other_arguments_pairs_only_where_no_equal_call_is_lost():
    # calc:2 exists in both runs: it pairs with itself, and calc:1 is removed, calc:3 added.
    assert plan_alignment("calc:1 calc:2", "calc:2 calc:3") == [
        ("calc:1", None),
        ("calc:2", "calc:2"),
        (None, "calc:3"),
    ]
    # Different tools at one place: the removed step comes before the added one.
    assert plan_alignment("L fetch:a L", "L store:b L") == [
        ("L", "L"),
        ("fetch:a", None),
        (None, "store:b"),
        ("L", "L"),
    ]
    assert plan_alignment("", "L calc:1") == [(None, "L"), (None, "calc:1")]
