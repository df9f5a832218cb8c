"""OTLP log records -> messages: the GenAI message events (the deprecated per-message
events older instrumentations send, and ``gen_ai.client.inference.operation.details``)
become messages of their trace and span. A GenAI event without a valid trace id is
rejected; every other log record is ignored (accepted, not stored): this is a trace
store, not a log store.
"""

from __future__ import annotations

from collections import defaultdict

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from runs.events import noting
from runs.otlp.attributes import any_value, attributes_dict, hex_id, parse_json_text, position, text_value
from runs.otlp.conventions import OPERATION_DETAILS_EVENT
from runs.otlp.messages import message_event, message_list, normalize_message, system_message
from runs.otlp.partial_success import UNREADABLE, MappedBatch

# Deprecated GenAI events that older instrumentations send as log records.
LOG_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
    "gen_ai.choice": "assistant",
}


def log_event_name(record: LogRecord) -> str:
    """The event name: the record's ``event_name`` field, or the ``event.name`` attribute
    that SDKs used before the field existed."""
    if record.event_name:
        return record.event_name
    for kv in record.attributes:
        if kv.key == "event.name":
            return kv.value.string_value
    return ""


def log_messages(event_name: str, record: LogRecord) -> list[dict]:
    """The messages one GenAI log event carries."""
    if event_name == OPERATION_DETAILS_EVENT:
        attributes = attributes_dict(record.attributes)
        inputs = message_list(parse_json_text(attributes.get("gen_ai.input.messages")), "user")
        system = system_message(attributes.get("gen_ai.system_instructions"))
        outputs = message_list(parse_json_text(attributes.get("gen_ai.output.messages")), "assistant")
        return ([system] if system else []) + inputs + outputs
    role = LOG_EVENT_ROLES[event_name]
    body = any_value(record.body)
    if not isinstance(body, dict):
        return [normalize_message({"role": role, "content": body}, role)]
    if event_name == "gen_ai.choice":
        inner = body.get("message") if isinstance(body.get("message"), dict) else {}
        message = normalize_message({**inner, "finish_reason": body.get("finish_reason")}, role)
        return [message]
    message = normalize_message(body, role)
    if role == "tool" and not message["tool_call_id"]:
        message["tool_call_id"] = text_value(body.get("id"), 200)
    return [message]


def map_logs(request: ExportLogsServiceRequest) -> MappedBatch:
    """The GenAI message events among the log records, as messages of their trace and
    span. A GenAI event without a valid trace id is rejected; every other log record is
    ignored (accepted, not stored): this is a trace store, not a log store."""
    batch = MappedBatch()
    # Several messages may share a span and a timestamp: number them on, so their ids differ.
    used: dict[tuple[str, str, int], int] = defaultdict(int)
    for resource_logs in request.resource_logs:
        for scope_logs in resource_logs.scope_logs:
            for record in scope_logs.log_records:
                batch.received += 1
                event_name = log_event_name(record)
                if event_name not in LOG_EVENT_ROLES and event_name != OPERATION_DETAILS_EVENT:
                    continue
                try:
                    trace_id = hex_id(record.trace_id, 16, "trace id")
                    span_id = hex_id(record.span_id, 8, "span id") if record.span_id else ""
                    with noting() as notes:
                        messages = log_messages(event_name, record)
                except UNREADABLE as exc:  # InvalidItem among them
                    batch.reject_item(f"{event_name} log record", exc)
                    continue
                batch.change(f"{event_name} log record", notes)
                nanos = record.time_unix_nano or record.observed_time_unix_nano
                for message in messages:
                    index = used[(trace_id, span_id, nanos)]
                    used[(trace_id, span_id, nanos)] += 1
                    batch.messages.append(
                        message_event(
                            trace_id, span_id, f"{span_id}:log:{nanos}:{index}", position(nanos, index), message
                        )
                    )
    return batch
