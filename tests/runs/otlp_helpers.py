"""Builders of OTLP export requests (spans, log records) for the tests of ``runs.otlp``
and of the receivers, and the checks they share."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from runs.otlp import map_traces

TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")
ROOT = bytes.fromhex("eee19b7ec3c1b174")
CHILD = bytes.fromhex("eee19b7ec3c1b173")
SECOND = 1_000_000_000
T0 = int(datetime(2026, 11, 19, 9, 46, 40, tzinfo=UTC).timestamp()) * SECOND  # unix nanoseconds


def any_value(value) -> AnyValue:
    if isinstance(value, AnyValue):
        return value
    if isinstance(value, bool):
        return AnyValue(bool_value=value)
    if isinstance(value, int):
        return AnyValue(int_value=value)
    if isinstance(value, float):
        return AnyValue(double_value=value)
    if isinstance(value, bytes):
        return AnyValue(bytes_value=value)
    if isinstance(value, list | tuple):
        result = AnyValue()
        for item in value:
            result.array_value.values.add().CopyFrom(any_value(item))
        return result
    if isinstance(value, dict):
        result = AnyValue()
        for key, item in value.items():
            result.kvlist_value.values.add(key=key).value.CopyFrom(any_value(item))
        return result
    return AnyValue(string_value=str(value))


def key_values(attributes: dict) -> list[KeyValue]:
    return [KeyValue(key=key, value=any_value(value)) for key, value in attributes.items()]


def make_span(
    attributes=None,
    *,
    name="span",
    span_id=ROOT,
    parent=b"",
    start=T0,
    end=T0 + 2 * SECOND,
    status=Status.STATUS_CODE_UNSET,
    status_message="",
    events=(),
    trace_id=TRACE,
) -> Span:
    span = Span(
        trace_id=trace_id,
        span_id=span_id,
        parent_span_id=parent,
        name=name,
        start_time_unix_nano=start,
        end_time_unix_nano=end,
        attributes=key_values(attributes or {}),
        status=Status(code=status, message=status_message),
    )
    for event_name, at, event_attributes in events:
        span.events.add(name=event_name, time_unix_nano=at, attributes=key_values(event_attributes))
    return span


def make_request(*spans: Span, resource=None) -> ExportTraceServiceRequest:
    request = ExportTraceServiceRequest()
    resource_spans = request.resource_spans.add()
    resource_spans.resource.attributes.extend(key_values(resource or {}))
    resource_spans.scope_spans.add().spans.extend(spans)
    return request


def mapped(span: Span, resource=None):
    """The batch of one span (which must be accepted)."""
    batch = map_traces(make_request(span, resource=resource))
    assert batch.rejected == 0, batch.problems
    return batch


def step_of(span: Span, resource=None):
    (step,) = mapped(span, resource).steps
    return step


def storable(value) -> None:
    """Fails unless ``value`` is valid PostgreSQL jsonb: no NaN or Infinity, no NUL
    character, no unpaired surrogate, in any string or key."""
    json.dumps(value, allow_nan=False)

    def check(item):
        if isinstance(item, str):
            assert "\x00" not in item
            item.encode("utf-8")
        elif isinstance(item, dict):
            for key, inner in item.items():
                check(key)
                check(inner)
        elif isinstance(item, list):
            for inner in item:
                check(inner)

    check(value)


def at(nanos: int) -> datetime:
    return datetime.fromtimestamp(nanos // 1000 / 1_000_000, tz=UTC)


def make_log(event_name, body=None, *, attributes=None, time=T0, span_id=CHILD, trace_id=TRACE, as_attribute=False):
    record = LogRecord(time_unix_nano=time, trace_id=trace_id, span_id=span_id, attributes=key_values(attributes or {}))
    if as_attribute:
        record.attributes.append(KeyValue(key="event.name", value=AnyValue(string_value=event_name)))
    else:
        record.event_name = event_name
    if body is not None:
        record.body.CopyFrom(any_value(body))
    return record


def make_logs_request(*records) -> ExportLogsServiceRequest:
    request = ExportLogsServiceRequest()
    request.resource_logs.add().scope_logs.add().log_records.extend(records)
    return request
