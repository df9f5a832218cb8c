"""A run's steps as the units the comparison aligns (``StepItem``), each with its key.

- Each run's steps are taken in execution order (start time, then id). The root step
  that the other steps hang from stands for the run itself (its output is the run's
  output, its totals the run's metrics), so it is left out. A tool call recorded
  without a tool step of its own counts as a tool step.
- Each step has a key: a tool step, its tool's name and its arguments as canonical
  JSON; an LLM call, its position among the run's LLM calls; any other step, its kind
  and name.
- What a pair of units compares (``StepItem.compared``): for tools the arguments, the
  result and the error; for LLM calls what the model answered (``values.llm_answer``)
  and the error; for other steps their input, output and error.

Two queries for any number of runs (``load_step_items``), through the tenant-scoped
managers; an LLM call's input (the whole conversation so far) is never loaded.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import datetime
from functools import cached_property
from typing import Any

from django.db.models import Case, F, Q, When

from agentops.jsonsafe import SHOWN_JSON_CHARS, json_from_text
from runs.compare.values import canonical_json, llm_answer
from runs.fields import PayloadJSONField
from runs.models import Run, Step, ToolCall

# Steps whose input is never compared (an LLM call's input is the whole conversation so
# far: large, and different as soon as anything before it differed).
INPUT_UNUSED_KINDS = (Step.Kind.LLM,)
STEP_COLUMNS = (
    "id",
    "run_id",
    "span_id",
    "parent_span_id",
    "kind",
    "name",
    "started_at",
    "duration_ms",
    "status",
    "error",
    "model",
    "input_tokens",
    "output_tokens",
    "cost",
    "output",
)
TOOL_CALL_COLUMNS = ("id", "run_id", "step_id", "call_id", "tool_name", "arguments", "result", "error", "started_at")


@dataclass(eq=False)  # compared by identity: the steps' payloads can be large
class StepItem:
    """One unit of a run's step sequence: a step, its tool call, or a tool call alone."""

    kind: str
    name: str
    step: Step | None
    call: ToolCall | None
    position: int = 0
    key: tuple = ()

    @property
    def arguments(self) -> Any:
        if self.call is not None:
            return json_from_text(self.call.arguments, max_chars=SHOWN_JSON_CHARS)
        return json_from_text(self.step.compared_input, max_chars=SHOWN_JSON_CHARS) if self.step is not None else None

    @property
    def result(self) -> Any:
        return self.call.result if self.call is not None else self.step.output

    @property
    def error(self) -> str:
        if self.call is not None and self.call.error:
            return self.call.error
        if self.step is not None:
            return self.step.error or ("error" if self.step.status == Step.Status.ERROR else "")
        return ""

    @cached_property
    def answer(self) -> Any:
        """An LLM step's answer (``llm_answer``), worked out once: it parses tool arguments."""
        return llm_answer(self.step.output)

    @property
    def started_at(self) -> datetime | None:
        return self.step.started_at if self.step is not None else self.call.started_at

    def compared(self) -> dict[str, Any]:
        """The values a pair compares, by field name (see the module docstring)."""
        if self.kind == Step.Kind.TOOL:
            return {"arguments": self.arguments, "result": self.result, "error": self.error}
        if self.kind == Step.Kind.LLM:
            return {"output": self.answer, "error": self.error}
        return {"input": self.step.compared_input, "output": self.step.output, "error": self.error}


def load_step_items(runs: Sequence[Run]) -> dict[int, list[StepItem]]:
    """Each run's steps as aligned units, in execution order (two queries for all runs)."""
    run_ids = [run.pk for run in runs]
    steps = list(
        Step.objects.filter(run_id__in=run_ids)
        .only(*STEP_COLUMNS)
        .annotate(
            compared_input=Case(When(~Q(kind__in=INPUT_UNUSED_KINDS), then=F("input")), output_field=PayloadJSONField())
        )
        .order_by("run_id", "started_at", "id")
    )
    calls = list(
        ToolCall.objects.filter(run_id__in=run_ids).only(*TOOL_CALL_COLUMNS).order_by("run_id", "started_at", "id")
    )
    return {
        run_id: step_items(
            [step for step in steps if step.run_id == run_id], [call for call in calls if call.run_id == run_id]
        )
        for run_id in run_ids
    }


def step_items(steps: Sequence[Step], calls: Sequence[ToolCall]) -> list[StepItem]:
    """``steps`` and ``calls`` of one run as units in execution order, root left out, each
    tool step joined with its first tool call, each with its alignment key."""
    parents = {step.parent_span_id for step in steps if step.parent_span_id}
    kept = [
        step
        for step in steps
        # The root that other steps hang from is the run itself (see the module docstring).
        if step.parent_span_id or step.span_id not in parents or step.kind in (Step.Kind.LLM, Step.Kind.TOOL)
    ]
    tool_steps = {step.pk: step for step in kept if step.kind == Step.Kind.TOOL}
    call_of: dict[int, ToolCall] = {}
    lone_calls: list[ToolCall] = []
    for call in calls:
        if call.step_id in tool_steps and call.step_id not in call_of:
            call_of[call.step_id] = call
        else:
            lone_calls.append(call)

    items = []
    for step in kept:
        call = call_of.get(step.pk)
        name = call.tool_name if call is not None else step.name
        items.append(StepItem(kind=step.kind, name=name, step=step, call=call))
    items += [StepItem(kind=Step.Kind.TOOL, name=call.tool_name, step=None, call=call) for call in lone_calls]
    if lone_calls:
        # Steps and lone tool calls interleaved by start time; unknown times last, as SQL sorts them.
        order = {id(item): index for index, item in enumerate(items)}
        items.sort(key=lambda item: (item.started_at is None, _sortable_time(item.started_at), order[id(item)]))

    llm_count = 0
    for position, item in enumerate(items, start=1):
        item.position = position
        if item.kind == Step.Kind.TOOL:
            item.key = (item.kind, item.name, canonical_json(item.arguments))
        elif item.kind == Step.Kind.LLM:
            llm_count += 1
            item.key = (item.kind, llm_count)
        else:
            item.key = (item.kind, item.name)
    return items


def _sortable_time(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0
