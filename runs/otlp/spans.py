"""OTLP spans -> events: every span a step whatever it carries (a span nobody
recognises is a ``custom`` step with its attributes). LLM steps also give the
transcript's messages, tool steps a tool call and the tool's answer as a ``tool``
message, and ``agentops.memory`` (or a memory step's output) a memory snapshot.

A span whose end time is unset (0) is refused: an SDK exports a span once it has ended.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from runs.events import MemoryEvent, MessageEvent, StepEvent, ToolCallEvent, clean_text, noting
from runs.models import Step
from runs.otlp.attributes import (
    MAX_POSITION,
    attributes_dict,
    first_text,
    hex_id,
    parse_json_text,
    position,
    text_value,
    timestamp,
)
from runs.otlp.conventions import (
    LLM,
    MODEL_KEYS,
    OPERATION_DETAILS_EVENT,
    PROVIDER_KEYS,
    reported_cost,
    resource_hints,
    run_hints,
    span_kind,
    span_payloads,
    usage,
)
from runs.otlp.messages import genai_messages, message_event, span_messages
from runs.otlp.partial_success import UNREADABLE, InvalidItem, MappedBatch

# Plain strings: an enum member looked up on its class costs a descriptor call, per span.
ERROR, OK, UNSET = Step.Status.ERROR.value, Step.Status.OK.value, Step.Status.UNSET.value
TOOL, MEMORY = Step.Kind.TOOL.value, Step.Kind.MEMORY.value


@dataclass
class SpanEvents:
    step: StepEvent
    messages: list[MessageEvent] = field(default_factory=list)
    tool_calls: list[ToolCallEvent] = field(default_factory=list)
    snapshots: list[MemoryEvent] = field(default_factory=list)


def span_status(span: Span, attributes: dict, events) -> tuple[str, str]:
    """(status, error text): the span status, Langfuse's ERROR level, and the span's
    exception events (type, message and stack trace; ``events``: ``_events``')."""
    errors: list[str] = []
    if span.status.code == Status.STATUS_CODE_ERROR:
        status = ERROR
        if span.status.message:
            errors.append(clean_text(span.status.message))
    elif span.status.code == Status.STATUS_CODE_OK:
        status = OK
    else:
        status = UNSET
    if text_value(attributes.get("langfuse.observation.level"), 20).upper() == "ERROR":
        if status == UNSET:
            status = ERROR
        message = text_value(attributes.get("langfuse.observation.status_message"), 100_000)
        if message:
            errors.append(message)
    for event in events:
        if event.name != "exception":
            continue
        details = attributes_dict(event.attributes)
        kind = text_value(details.get("exception.type"), 1000)
        message = text_value(details.get("exception.message"), 100_000)
        text = ": ".join(part for part in (kind, message) if part)
        stacktrace = text_value(details.get("exception.stacktrace"), 1_000_000)
        if stacktrace:
            text = f"{text}\n{stacktrace}" if text else stacktrace
        if text:
            errors.append(text)
    if not errors:
        return status, ""  # most spans
    # The SDKs often repeat the exception's "Type: message" as the status message.
    kept = [text for index, text in enumerate(errors) if not any(text in other for other in errors[index + 1 :])]
    return status, "\n\n".join(dict.fromkeys(kept))


def _events(span: Span):
    """The span's events, () when it has none (most spans): upb's repeated fields are
    iterated by index until an IndexError, whose message is formatted even for an empty
    list. Read once per span (each read builds the field's wrapper again)."""
    return span.events or ()


def span_events(events) -> list[dict]:
    return [
        {
            "name": clean_text(event.name),
            "time": timestamp(event.time_unix_nano, "event time").isoformat() if event.time_unix_nano else None,
            "attributes": attributes_dict(event.attributes),
        }
        for event in events
    ]


def operation_details(events) -> dict:
    """The attributes of the span's ``gen_ai.client.inference.operation.details`` events
    (the last wins), where instrumentations may put the call's usage and cost."""
    merged: dict = {}
    for event in events:
        if event.name == OPERATION_DETAILS_EVENT:
            merged.update(attributes_dict(event.attributes))
    return merged


def map_span(span: Span, resource: dict, from_resource: dict[str, str]) -> SpanEvents:
    """The events of one span (``resource``: its resource's attributes, ``from_resource``
    their ``resource_hints``); InvalidItem when its ids are not valid."""
    trace_id = hex_id(span.trace_id, 16, "trace id")
    span_id = hex_id(span.span_id, 8, "span id")
    # An all-zero parent is how some SDKs say "no parent".
    parent_span_id = hex_id(span.parent_span_id, 8, "parent span id") if any(span.parent_span_id) else ""
    attributes = attributes_dict(span.attributes)
    kind = span_kind(attributes)
    events = _events(span)
    status, error = span_status(span, attributes, events)
    if not span.end_time_unix_nano:
        # An SDK exports a span once it has ended; without an end its run would stay
        # running forever.
        raise InvalidItem("end_time_unix_nano is 0 (unset): send a span once it has ended")
    started_at = timestamp(span.start_time_unix_nano, "start_time_unix_nano")
    ended_at = timestamp(span.end_time_unix_nano, "end_time_unix_nano")
    # Usage and cost may also come on the span's operation-details event: the span's
    # own attributes win.
    details = operation_details(events)
    measured = {**details, **attributes} if details else attributes
    counts = usage(measured)
    cost = reported_cost(measured)
    parsed_messages = genai_messages(attributes)
    inputs, outputs = span_messages(attributes, parsed_messages) if kind == LLM else ([], [])
    input_payload, output_payload = span_payloads(attributes, kind, inputs, outputs, parsed_messages)
    name = text_value(span.name, 500)

    step = StepEvent(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent_span_id,
        kind=kind,
        name=name,
        started_at=started_at,
        ended_at=ended_at,
        status=status,
        error=error,
        model=first_text(attributes, MODEL_KEYS, 200),
        provider=first_text(attributes, PROVIDER_KEYS, 100),
        **counts,
        **cost,
        input=input_payload,
        output=output_payload,
        attributes={**attributes, "resource": resource},
        events=span_events(events),
        run_hints=run_hints(attributes, from_resource, is_root=not parent_span_id),
    )
    result = SpanEvents(step=step)

    # Inputs are ordered at the call's start, outputs at its end (never before its start).
    start_nanos = span.start_time_unix_nano or span.end_time_unix_nano
    end_nanos = max(span.end_time_unix_nano, start_nanos)
    for index, message in enumerate(inputs):
        result.messages.append(
            message_event(trace_id, span_id, f"{span_id}:in:{index}", position(start_nanos, index), message)
        )
    for index, message in enumerate(outputs):
        result.messages.append(
            message_event(trace_id, span_id, f"{span_id}:out:{index}", position(end_nanos, 500 + index), message)
        )

    if kind == TOOL:
        tool_call_id = first_text(attributes, ("gen_ai.tool.call.id",), 200)
        tool_name = first_text(attributes, ("gen_ai.tool.name", "tool.name"), 200) or name[:200] or "tool"
        # The tool's answer is a message of the conversation (what the model reads next):
        # instrumentations put it on the tool span only, not on the next model call.
        answer = output_payload if output_payload is not None else (error or None)
        if answer is not None:
            result.messages.append(
                message_event(
                    trace_id,
                    span_id,
                    f"{span_id}:tool",
                    position(end_nanos, 0),
                    {
                        "role": "tool",
                        "content": answer,
                        "tool_calls": [],
                        "tool_call_id": tool_call_id,
                        "name": tool_name,
                        "finish_reason": "",
                    },
                )
            )
        result.tool_calls.append(
            ToolCallEvent(
                trace_id=trace_id,
                call_id=tool_call_id or span_id,
                tool_name=tool_name,
                span_id=span_id,
                arguments=input_payload,
                result=output_payload,
                error=error if status == ERROR else "",
                latency_ms=(
                    max((ended_at - started_at).total_seconds() * 1000, 0.0) if started_at and ended_at else None
                ),
                started_at=started_at,
            )
        )

    state = parse_json_text(attributes.get("agentops.memory"), any_json=True)
    if state is None and kind == MEMORY:
        state = output_payload
    if state is not None:
        result.snapshots.append(
            MemoryEvent(
                trace_id=trace_id,
                snapshot_id=span_id,
                sequence=min(end_nanos // 1000, MAX_POSITION),
                state=state,
                span_id=span_id,
                taken_at=ended_at or started_at,
            )
        )
    return result


def map_traces(request: ExportTraceServiceRequest) -> MappedBatch:
    """Every span of an export request as events; invalid spans are counted as
    rejected with the reason, the others are kept."""
    batch = MappedBatch()
    for resource_spans in request.resource_spans:
        with noting() as resource_notes:
            resource = attributes_dict(resource_spans.resource.attributes)
            from_resource = resource_hints(resource)
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                batch.received += 1
                try:
                    with noting() as notes:
                        events = map_span(span, resource, from_resource)
                except UNREADABLE as exc:  # InvalidItem among them
                    batch.reject_item(f"span {span.span_id.hex() or '(no id)'}", exc)
                    continue
                if notes or resource_notes:
                    batch.change(f"span {span.span_id.hex()}", notes | resource_notes)
                batch.steps.append(events.step)
                batch.messages.extend(events.messages)
                batch.tool_calls.extend(events.tool_calls)
                batch.snapshots.extend(events.snapshots)
    # Root spans first: ingest fills a run's empty fields from the first span that
    # has them, and the root's agent name and session should win over a sub-agent's.
    batch.steps.sort(key=lambda step: bool(step.parent_span_id))
    return batch
