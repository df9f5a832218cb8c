"""The rows of a batch's steps, messages, tool calls and memory snapshots, as ``sql``
writes them: redacted, cut to their columns, each step with its cost (``billing``'s
prices at the step's time) and each item keyed by its client-visible id.
"""

from __future__ import annotations

import json
from datetime import datetime
from typing import Any

from billing.services import step_cost, tool_cost
from runs.ingest.sql import Upsert
from runs.models import MemorySnapshot, Message, Step, ToolCall
from runs.services.redaction import Redactor

# Plain values, looked up once: an enum member read on its class, a model's ``pk`` and a
# run's id through its object cost a descriptor call each, per row.
LLM, TOOL = Step.Kind.LLM.value, Step.Kind.TOOL.value


def _ids(project, run_by_trace) -> tuple[int, int, dict[str, int]]:
    """The project's organization id and id, and each trace's run id."""
    return project.organization_id, project.pk, {trace: run.pk for trace, run in run_by_trace.items()}


STEP_FIELDS = (
    "parent_span_id",
    "kind",
    "name",
    "started_at",
    "ended_at",
    "duration_ms",
    "status",
    "error",
    "model",
    "provider",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "cache_write_input_tokens",
    "reasoning_output_tokens",
    "modality_tokens",
    "cost",
    "reported_cost",
    "reported_cost_currency",
    "reported_cost_source",
    "unpriced",
    "price_id",
    "input",
    "output",
    "attributes",
    "events",
)


def _characters(value: Any) -> int:
    """How many characters a tool was given (the unit of tools priced per character,
    such as text to speech): the text itself, or the JSON of structured input."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), str):
        return len(next(iter(value.values())))  # {"text": "..."}: the text
    return len(json.dumps(value, default=str))


def _redacted(rows: list[dict], fields: tuple[str, ...], redactor: Redactor) -> list[dict]:
    """``rows`` with the project's redaction applied to ``fields`` (the free text and
    payloads), in place; left as they are when the project has no rules (most: a call
    per field and row saved)."""
    if redactor.active:
        for row in rows:
            for name in fields:
                row[name] = redactor.apply(row[name])
    return rows


def _not_negative(count: int) -> int:
    return count if count > 0 else 0  # not max(): its keyword parsing costs more, per step


def duration_ms(started: datetime | None, ended: datetime | None) -> float | None:
    if started and ended:
        return max((ended - started).total_seconds() * 1000, 0.0)
    return None


def steps_upsert(project, run_by_trace, events, redactor: Redactor, now) -> Upsert:
    organization_id, project_id, run_ids = _ids(project, run_by_trace)
    rows = []
    for event in events:
        cost, unpriced, price_id = None, False, None
        duration = duration_ms(event.started_at, event.ended_at)
        if event.model or event.kind == LLM:
            computed = step_cost(
                model=event.model,
                input_tokens=event.input_tokens,
                cached_input_tokens=event.cached_input_tokens,
                output_tokens=event.output_tokens,
                cache_write_input_tokens=event.cache_write_input_tokens,
                reasoning_output_tokens=event.reasoning_output_tokens,
                at=event.started_at or now,
                organization_id=organization_id,
            )
            cost, price_id = computed.amount, computed.price_id
            unpriced = computed.amount is None and (event.kind == LLM or event.input_tokens or event.output_tokens)
        elif event.kind == TOOL:
            # A tool with a price (per call, character of its input, or second): most
            # have none and cost nothing, which is not "unpriced".
            computed = tool_cost(
                tool_name=event.name,
                characters=lambda event=event: _characters(event.input),
                seconds=(duration or 0) / 1000,
                at=event.started_at or now,
                organization_id=organization_id,
            )
            cost, price_id = computed.amount, computed.price_id
        rows.append(
            {
                "organization_id": organization_id,
                "project_id": project_id,
                "run_id": run_ids[event.trace_id],
                "span_id": event.span_id,
                "parent_span_id": event.parent_span_id or "",
                "kind": event.kind,
                "name": event.name[:500],
                "started_at": event.started_at,
                "ended_at": event.ended_at,
                "duration_ms": duration,
                "status": event.status,
                "error": event.error or "",
                "model": event.model[:200],
                "provider": event.provider[:100],
                "input_tokens": _not_negative(event.input_tokens),
                "cached_input_tokens": _not_negative(event.cached_input_tokens),
                "output_tokens": _not_negative(event.output_tokens),
                "cache_write_input_tokens": _not_negative(event.cache_write_input_tokens),
                "reasoning_output_tokens": _not_negative(event.reasoning_output_tokens),
                "modality_tokens": event.modality_tokens or {},
                "cost": cost,
                "reported_cost": event.reported_cost,
                "reported_cost_currency": event.reported_cost_currency[:3],
                "reported_cost_source": event.reported_cost_source[:16],
                "unpriced": bool(unpriced),
                "price_id": price_id,
                "input": event.input,
                "output": event.output,
                "attributes": event.attributes or {},
                "events": event.events or [],
                "created_at": now,
            }
        )
    return Upsert(
        Step,
        _redacted(rows, ("error", "input", "output", "attributes", "events"), redactor),
        unique_fields=("run", "span_id"),
        update_fields=STEP_FIELDS,
    )


def messages_upsert(project, run_by_trace, events, redactor: Redactor, now) -> Upsert:
    organization_id, project_id, run_ids = _ids(project, run_by_trace)
    rows = [
        {
            "organization_id": organization_id,
            "project_id": project_id,
            "run_id": run_ids[e.trace_id],
            "step_id": None,  # set by ingest() for the rows of new runs
            "span_id": e.span_id,
            "message_id": e.message_id,
            "position": e.position,
            "role": e.role[:32],
            "content": e.content,
            "tool_calls": e.tool_calls or [],
            "tool_call_id": e.tool_call_id[:200],
            "name": e.name[:200],
            "tokens": e.tokens,
            "finish_reason": e.finish_reason[:64],
            "created_at": now,
        }
        for e in events
    ]
    return Upsert(
        Message,
        _redacted(rows, ("content", "tool_calls"), redactor),
        unique_fields=("run", "message_id"),
        update_fields=(
            "span_id",
            "position",
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "name",
            "tokens",
            "finish_reason",
        ),
    )


def tool_calls_upsert(project, run_by_trace, events, redactor: Redactor, now) -> Upsert:
    organization_id, project_id, run_ids = _ids(project, run_by_trace)
    rows = [
        {
            "organization_id": organization_id,
            "project_id": project_id,
            "run_id": run_ids[e.trace_id],
            "step_id": None,  # set by ingest() for the rows of new runs
            "span_id": e.span_id,
            "call_id": e.call_id,
            "tool_name": e.tool_name[:200],
            "arguments": e.arguments,
            "result": e.result,
            "error": e.error or "",
            "latency_ms": e.latency_ms,
            "started_at": e.started_at,
            "created_at": now,
        }
        for e in events
    ]
    return Upsert(
        ToolCall,
        _redacted(rows, ("arguments", "result", "error"), redactor),
        unique_fields=("run", "call_id"),
        update_fields=("span_id", "tool_name", "arguments", "result", "error", "latency_ms", "started_at"),
    )


def snapshots_upsert(project, run_by_trace, events, redactor: Redactor, now) -> Upsert:
    organization_id, project_id, run_ids = _ids(project, run_by_trace)
    rows = [
        {
            "organization_id": organization_id,
            "project_id": project_id,
            "run_id": run_ids[e.trace_id],
            "step_id": None,  # set by ingest() for the rows of new runs
            "span_id": e.span_id,
            "snapshot_id": e.snapshot_id,
            "sequence": e.sequence,
            "state": e.state,
            "taken_at": e.taken_at,
            "created_at": now,
        }
        for e in events
    ]
    return Upsert(
        MemorySnapshot,
        _redacted(rows, ("state",), redactor),
        unique_fields=("run", "snapshot_id"),
        update_fields=("span_id", "sequence", "state", "taken_at"),
    )
