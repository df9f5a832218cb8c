"""What an evaluator looks at and what it gives: the ``Subject`` (a dataset item's input,
expected output and metadata, the run's final output, cost, latency, tokens and
trajectory) and the ``Outcome`` (a score from 0 to 1, or none and the reason).

A subject is built from a stored run (``Subject.from_run``, two queries) or from an
output reported from outside (``Subject.reported``); every evaluator kind reads the
same fields, so a kind never queries the database for the run itself.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from evals.scoring.values import decimal_or_none


@dataclass
class StepView:
    """One step of the trajectory, in run order (started_at, id)."""

    kind: str
    name: str
    status: str
    model: str
    input: Any
    output: Any
    error: str
    latency_ms: int | None


@dataclass
class ToolCallView:
    name: str
    arguments: Any
    result: Any
    error: str


def _item_fields(item) -> tuple[Any, Any, dict]:
    """(input, expected, metadata) of a dataset item, a dict with those keys, or None."""
    if item is None:
        return None, None, {}
    if isinstance(item, dict):
        metadata = item.get("metadata")
        return item.get("input"), item.get("expected"), metadata if isinstance(metadata, dict) else {}
    metadata = getattr(item, "metadata", None)
    return item.input, item.expected, metadata if isinstance(metadata, dict) else {}


def _step_view(step: StepView | dict) -> StepView:
    if isinstance(step, StepView):
        return step
    latency = step.get("latency_ms")
    return StepView(
        kind=str(step.get("kind") or "custom"),
        name=str(step.get("name") or ""),
        status=str(step.get("status") or ""),
        model=str(step.get("model") or ""),
        input=step.get("input"),
        output=step.get("output"),
        error=str(step.get("error") or ""),
        latency_ms=int(latency) if isinstance(latency, int | float) and not isinstance(latency, bool) else None,
    )


def _tool_call_view(call: ToolCallView | dict) -> ToolCallView:
    if isinstance(call, ToolCallView):
        return call
    return ToolCallView(
        name=str(call.get("name") or call.get("tool_name") or ""),
        arguments=call.get("arguments"),
        result=call.get("result"),
        error=str(call.get("error") or ""),
    )


def _calls_from_steps(steps: list[StepView]) -> list[ToolCallView]:
    """Tool calls read from tool steps, for trajectories that only have steps."""
    return [
        ToolCallView(name=step.name, arguments=step.input, result=step.output, error=step.error)
        for step in steps
        if step.kind == "tool"
    ]


@dataclass
class Subject:
    """What an evaluator looks at: the item (input, expected, metadata), the final output,
    the run's cost, latency and tokens, and its trajectory."""

    input: Any
    expected: Any
    metadata: dict
    output: Any
    cost: Decimal | None
    latency_ms: int | None
    tokens: int
    steps: list[StepView] = field(default_factory=list)
    tool_calls: list[ToolCallView] = field(default_factory=list)
    run_id: int | None = None
    run_status: str = ""

    @classmethod
    def from_run(cls, run, *, item=None, trajectory: bool = True) -> Subject:
        """The run's output and trajectory (two queries: steps, tool calls; none without
        ``trajectory``, for evaluators that read only the output); the item,
        when given, supplies input, expected and metadata (else the run's input and
        metadata, and no expected output). Needs the run's organization in scope."""
        steps, calls = _trajectory(run) if trajectory else ([], [])
        if item is not None:
            item_input, expected, metadata = _item_fields(item)
        else:
            item_input, expected = run.input, None
            metadata = run.metadata if isinstance(run.metadata, dict) else {}
        return cls(
            input=item_input,
            expected=expected,
            metadata=dict(metadata),
            output=run.output,
            cost=run.total_cost,
            latency_ms=run.latency_ms,
            tokens=(run.input_tokens or 0) + (run.output_tokens or 0),
            steps=steps,
            tool_calls=calls or _calls_from_steps(steps),
            run_id=run.pk,
            run_status=run.status,
        )

    @classmethod
    def reported(
        cls,
        *,
        item,
        output,
        cost=None,
        latency_ms: int | None = None,
        tokens: int = 0,
        steps: list | None = None,
        tool_calls: list | None = None,
    ) -> Subject:
        """An output reported from outside (no run). ``item`` is a dataset item, a dict
        ``{input, expected, metadata}`` or None; steps and tool calls may be views or
        plain dicts, and with steps but no tool calls, the tool steps are the calls."""
        item_input, expected, metadata = _item_fields(item)
        step_views = [_step_view(step) for step in steps or [] if isinstance(step, StepView | dict)]
        if tool_calls is None:
            call_views = _calls_from_steps(step_views)
        else:
            call_views = [_tool_call_view(call) for call in tool_calls if isinstance(call, ToolCallView | dict)]
        return cls(
            input=item_input,
            expected=expected,
            metadata=dict(metadata),
            output=output,
            cost=decimal_or_none(cost),
            latency_ms=latency_ms,
            tokens=tokens or 0,
            steps=step_views,
            tool_calls=call_views,
        )


@dataclass
class Outcome:
    value: float | None  # 0..1; None when the evaluator could not score (error says why)
    reasoning: str = ""
    details: dict = field(default_factory=dict)
    error: str = ""
    # A paid model call the evaluator made (the LLM judge): ``evaluate`` writes it to the
    # billing ledger as evaluation spend. Keys: model, input_tokens, cached_input_tokens,
    # output_tokens, cost (Decimal or None: unpriced), price_id.
    model_call: dict | None = None


def _trajectory(run) -> tuple[list[StepView], list[ToolCallView]]:
    """The run's steps and tool calls, in the order they started (two queries)."""
    from runs.models import Step, ToolCall

    steps = [
        StepView(
            kind=row.kind,
            name=row.name,
            status=row.status,
            model=row.model,
            input=row.input,
            output=row.output,
            error=row.error,
            latency_ms=round(row.duration_ms) if row.duration_ms is not None else None,
        )
        for row in Step.objects.filter(run=run)
        .order_by("started_at", "id")
        .only("kind", "name", "status", "model", "input", "output", "error", "duration_ms", "started_at")
    ]
    calls = [
        ToolCallView(name=row.tool_name, arguments=row.arguments, result=row.result, error=row.error)
        for row in ToolCall.objects.filter(run=run)
        .order_by("started_at", "id")
        .only("tool_name", "arguments", "result", "error", "started_at")
    ]
    return steps, calls
