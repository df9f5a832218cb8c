"""GenAI log events -> messages of their trace and span (``runs.otlp.logs``); other log
records ignored."""

from __future__ import annotations

import json

from opentelemetry.proto.common.v1.common_pb2 import AnyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord

from runs.otlp import map_logs
from tests.runs.otlp_helpers import (
    CHILD,
    T0,
    TRACE,
    make_log,
    make_logs_request,
)

# --- Logs -----------------------------------------------------------------------------------------


def test_gen_ai_log_events_become_messages_of_their_span():
    span_id = CHILD.hex()
    request = make_logs_request(
        make_log("gen_ai.system.message", {"content": "Be brief."}),
        make_log("gen_ai.user.message", {"content": "Weather?"}, time=T0 + 1000, as_attribute=True),
        make_log(
            "gen_ai.assistant.message",
            {"tool_calls": [{"id": "c1", "type": "function", "function": {"name": "weather", "arguments": "{}"}}]},
            time=T0 + 2000,
        ),
        make_log("gen_ai.tool.message", {"content": "21C", "id": "c1"}, time=T0 + 3000),
        make_log(
            "gen_ai.choice",
            {"index": 0, "finish_reason": "stop", "message": {"content": "It is 21C."}},
            time=T0 + 4000,
        ),
    )
    batch = map_logs(request)

    assert (batch.received, batch.rejected) == (5, 0)
    assert [(m.role, m.content) for m in batch.messages] == [
        ("system", "Be brief."),
        ("user", "Weather?"),
        ("assistant", None),
        ("tool", "21C"),
        ("assistant", "It is 21C."),
    ]
    assert batch.messages[2].tool_calls == [{"id": "c1", "name": "weather", "arguments": {}}]
    assert batch.messages[3].tool_call_id == "c1"
    assert batch.messages[4].finish_reason == "stop"
    assert [m.message_id for m in batch.messages] == [
        f"{span_id}:log:{T0 + offset}:0" for offset in (0, 1000, 2000, 3000, 4000)
    ]
    assert [m.position for m in batch.messages] == [
        (T0 + offset) // 1000 * 1000 for offset in (0, 1000, 2000, 3000, 4000)
    ]
    assert {(m.trace_id, m.span_id) for m in batch.messages} == {(TRACE.hex(), span_id)}


def test_inference_details_log_event_gives_input_and_output_messages():
    record = make_log(
        "gen_ai.client.inference.operation.details",
        attributes={
            "gen_ai.input.messages": json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Hi"}]}]),
            "gen_ai.output.messages": [
                {"role": "assistant", "parts": [{"type": "text", "content": "Hello"}], "finish_reason": "stop"}
            ],
        },
    )
    messages = map_logs(make_logs_request(record)).messages
    assert [(m.role, m.content, m.finish_reason) for m in messages] == [
        ("user", "Hi", ""),
        ("assistant", "Hello", "stop"),
    ]
    assert [m.message_id.rsplit(":", 1)[1] for m in messages] == ["0", "1"]
    assert [m.position for m in messages] == [T0 // 1000 * 1000, T0 // 1000 * 1000 + 1]


def test_log_events_at_the_same_time_on_the_same_span_get_distinct_ids():
    request = make_logs_request(
        make_log("gen_ai.system.message", {"content": "a"}), make_log("gen_ai.user.message", {"content": "b"})
    )
    assert [m.message_id[-2:] for m in map_logs(request).messages] == [":0", ":1"]


def test_gen_ai_log_events_without_a_trace_are_rejected_and_other_logs_ignored():
    request = make_logs_request(
        make_log("gen_ai.user.message", {"content": "lost"}, trace_id=b""),
        make_log("app.started", "boot", trace_id=b""),
        make_log("gen_ai.user.message", {"content": "kept"}),
        LogRecord(body=AnyValue(string_value="plain log line")),
    )
    batch = map_logs(request)
    assert [m.content for m in batch.messages] == ["kept"]
    assert (batch.received, batch.rejected) == (4, 1)
    assert "gen_ai.user.message log record: invalid trace id" in batch.error_message("log records")


def test_a_log_event_with_a_text_body_is_its_content():
    (message,) = map_logs(make_logs_request(make_log("gen_ai.user.message", "plain words"))).messages
    assert (message.role, message.content) == ("user", "plain words")
