"""OTLP spans -> events (``runs.otlp.spans``): ids, times, status and exception events,
memory snapshots, and spans rejected alone."""

from __future__ import annotations

import base64
import json
from datetime import UTC, datetime

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from runs.otlp import map_traces
from tests.runs.otlp_helpers import (
    CHILD,
    ROOT,
    SECOND,
    T0,
    TRACE,
    at,
    make_request,
    make_span,
    mapped,
    step_of,
)

# --- Ids, times, status, attributes ---------------------------------------------------------


def test_ids_times_name_and_all_attribute_types_are_mapped():
    span = make_span(
        {
            "text": "hello",
            "flag": True,
            "count": 7,
            "ratio": 0.25,
            "blob": b"\x00\xffbinary",
            "list": ["a", 1, False],
            "nested": {"inner": {"deep": [1.5, "x"]}},
        },
        name="plan",
        span_id=CHILD,
        parent=ROOT,
        start=T0 + 123_456_789,
        end=T0 + 3 * SECOND,
    )
    step = step_of(span, resource={"service.name": "support-bot", "host.name": "box-1"})

    assert (step.trace_id, step.span_id, step.parent_span_id) == (TRACE.hex(), CHILD.hex(), ROOT.hex())
    assert step.trace_id == "5b8efff798038103d269b633813fc60c"  # lowercase hex
    assert step.name == "plan"
    assert step.started_at == datetime(2026, 11, 19, 9, 46, 40, 123456, tzinfo=UTC)
    assert step.ended_at == datetime(2026, 11, 19, 9, 46, 43, tzinfo=UTC)
    assert step.attributes == {
        "text": "hello",
        "flag": True,
        "count": 7,
        "ratio": 0.25,
        "blob": base64.b64encode(b"\x00\xffbinary").decode(),
        "list": ["a", 1, False],
        "nested": {"inner": {"deep": [1.5, "x"]}},
        "resource": {"service.name": "support-bot", "host.name": "box-1"},
    }
    assert (step.kind, step.status, step.error) == ("custom", "unset", "")


@pytest.mark.parametrize(
    ("code", "message", "status", "error"),
    [
        (Status.STATUS_CODE_ERROR, "upstream timed out", "error", "upstream timed out"),
        (Status.STATUS_CODE_OK, "", "ok", ""),
        (Status.STATUS_CODE_UNSET, "", "unset", ""),
    ],
)
def test_span_status_maps_to_step_status(code, message, status, error):
    step = step_of(make_span(status=code, status_message=message))
    assert (step.status, step.error) == (status, error)


def test_exception_events_become_the_error_text_and_every_event_is_kept():
    stacktrace = 'Traceback (most recent call last):\n  File "agent.py", line 3\nValueError: bad plan'
    span = make_span(
        status=Status.STATUS_CODE_ERROR,
        status_message="ValueError: bad plan",  # the SDKs repeat it: kept once
        events=[
            ("retry", T0 + SECOND, {"attempt": 2}),
            (
                "exception",
                T0 + 2 * SECOND,
                {"exception.type": "ValueError", "exception.message": "bad plan", "exception.stacktrace": stacktrace},
            ),
        ],
    )
    step = step_of(span)

    assert step.status == "error"
    assert step.error == f"ValueError: bad plan\n{stacktrace}"
    assert step.events == [
        {"name": "retry", "time": "2026-11-19T09:46:41+00:00", "attributes": {"attempt": 2}},
        {
            "name": "exception",
            "time": "2026-11-19T09:46:42+00:00",
            "attributes": {
                "exception.type": "ValueError",
                "exception.message": "bad plan",
                "exception.stacktrace": stacktrace,
            },
        },
    ]


# --- Memory ----------------------------------------------------------------------------------------


def test_memory_attribute_gives_a_snapshot_ordered_by_end_time():
    span = make_span({"agentops.memory": json.dumps({"facts": ["likes tea"]})}, end=T0 + 5 * SECOND + 777_000)
    (snapshot,) = mapped(span).snapshots
    assert (snapshot.snapshot_id, snapshot.span_id, snapshot.state) == (
        ROOT.hex(),
        ROOT.hex(),
        {"facts": ["likes tea"]},
    )
    assert snapshot.sequence == (T0 + 5 * SECOND + 777_000) // 1000
    assert snapshot.taken_at == at(T0 + 5 * SECOND + 777_000)


def test_a_memory_steps_output_is_its_snapshot():
    span = make_span({"agentops.span.kind": "memory", "output.value": '{"summary": "user in Paris"}'})
    (snapshot,) = mapped(span).snapshots
    assert snapshot.state == {"summary": "user in Paris"}


def test_a_span_without_memory_gives_no_snapshot():
    assert mapped(make_span({"output.value": '{"a": 1}'})).snapshots == []


# --- Rejections ----------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"trace_id": b""}, "invalid trace id (empty)"),
        ({"trace_id": b"\x01" * 8}, "invalid trace id"),
        ({"trace_id": b"\x00" * 16}, "invalid trace id"),
        ({"span_id": b""}, "invalid span id (empty)"),
        ({"span_id": b"\x01" * 16}, "invalid span id"),
        ({"parent": b"\x01" * 3}, "invalid parent span id"),
    ],
)
def test_spans_with_invalid_ids_are_rejected_alone(fields, reason):
    bad = make_span(span_id=fields.pop("span_id", CHILD), **fields)
    batch = map_traces(make_request(bad, make_span()))
    assert [step.span_id for step in batch.steps] == [ROOT.hex()]
    assert (batch.received, batch.rejected) == (2, 1)
    assert reason in batch.error_message("spans")
    assert batch.error_message("spans").startswith("1 of 2 spans rejected: span ")


def test_an_all_zero_parent_means_no_parent():
    assert step_of(make_span(parent=b"\x00" * 8)).parent_span_id == ""


def test_a_span_whose_parent_id_is_not_hex_is_rejected_not_made_a_root():
    """In OTLP/JSON a parent id that is not hex stood in as b"\\x00", which reads as "no
    parent": the span became a second root (overriding the run's name, input, output
    and status) instead of being rejected like a bad trace or span id."""
    import json

    from runs.otlp import decode, map_traces

    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "parentSpanId": "not-hex!",
        "name": "child",
        "startTimeUnixNano": "1763640000000000000",
        "endTimeUnixNano": "1763640001000000000",
    }
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    batch = map_traces(decode.decode_traces(body, decode.JSON))
    assert (batch.rejected, batch.steps) == (1, [])
    assert "parent span id" in batch.problems[0]
