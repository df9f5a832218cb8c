"""The metrics section of a comparison: tokens, cost, latency and counts of both runs,
each with its delta (b - a) and percent of a. No queries: the run rows carry their
totals, and tool calls are counted from the steps already loaded."""

from __future__ import annotations

from collections.abc import Sequence
from decimal import Decimal

from runs.compare.items import StepItem
from runs.compare.values import decimal_text
from runs.models import Run, Step

METRICS = (
    "input_tokens",
    "output_tokens",
    "total_cost",
    "latency_ms",
    "step_count",
    "llm_calls",
    "tool_calls",
    "errors",
)


def run_metrics(a: Run, b: Run, items_a: Sequence[StepItem], items_b: Sequence[StepItem]) -> dict[str, dict]:
    """Each metric of both runs with ``delta`` (b - a) and ``percent`` (of a; null when a
    is 0 or either is unknown). Costs are decimal strings, the rest numbers."""

    def tools(items: Sequence[StepItem]) -> int:
        return sum(1 for item in items if item.kind == Step.Kind.TOOL)

    values = {
        "input_tokens": (a.input_tokens, b.input_tokens),
        "output_tokens": (a.output_tokens, b.output_tokens),
        "total_cost": (a.total_cost, b.total_cost),
        "latency_ms": (a.latency_ms, b.latency_ms),
        "step_count": (a.step_count, b.step_count),
        "llm_calls": (a.llm_call_count, b.llm_call_count),
        "tool_calls": (tools(items_a), tools(items_b)),
        "errors": (a.error_count, b.error_count),
    }
    return {name: metric(*values[name]) for name in METRICS}


def metric(a: int | Decimal | None, b: int | Decimal | None) -> dict:
    delta = b - a if a is not None and b is not None else None
    percent = round(float(delta) / float(a) * 100, 2) if delta is not None and a else None
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return {"a": decimal_text(a), "b": decimal_text(b), "delta": decimal_text(delta), "percent": percent}
    return {"a": a, "b": b, "delta": delta, "percent": percent}
