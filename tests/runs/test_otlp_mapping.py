"""OTLP spans and log records -> ingest events: one test per attribute vocabulary
(GenAI current and deprecated names, OpenInference, Langfuse), unknown spans,
exceptions, both message formats, tool calls, memory, logs, and hostile values."""

from __future__ import annotations

import base64
import json
import math
from datetime import UTC, datetime

import pytest
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from runs.events import MAX_DEPTH, TRUNCATED
from runs.otlp import map_logs, map_traces

TRACE = bytes.fromhex("5b8efff798038103d269b633813fc60c")
ROOT = bytes.fromhex("eee19b7ec3c1b174")
CHILD = bytes.fromhex("eee19b7ec3c1b173")
SECOND = 1_000_000_000
T0 = int(datetime(2026, 11, 19, 9, 46, 40, tzinfo=UTC).timestamp()) * SECOND  # unix nanoseconds


# --- Builders -------------------------------------------------------------------------------


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


# --- Kinds --------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("LLM", "llm"),
        ("CHAIN", "chain"),
        ("TOOL", "tool"),
        ("AGENT", "agent"),
        ("RETRIEVER", "retrieval"),
        ("RERANKER", "retrieval"),
        ("EMBEDDING", "embedding"),
        ("GUARDRAIL", "guardrail"),
        ("EVALUATOR", "custom"),
        ("PROMPT", "custom"),
        ("UNKNOWN", "custom"),
    ],
)
def test_openinference_span_kind(value, kind):
    assert step_of(make_span({"openinference.span.kind": value})).kind == kind


@pytest.mark.parametrize(
    ("value", "kind"),
    [
        ("generation", "llm"),
        ("agent", "agent"),
        ("tool", "tool"),
        ("retriever", "retrieval"),
        ("embedding", "embedding"),
        ("chain", "chain"),
        ("guardrail", "guardrail"),
        ("evaluator", "custom"),
        ("event", "custom"),
        ("span", "custom"),
    ],
)
def test_langfuse_observation_type(value, kind):
    assert step_of(make_span({"langfuse.observation.type": value})).kind == kind


@pytest.mark.parametrize(
    ("operation", "kind"),
    [
        ("chat", "llm"),
        ("generate_content", "llm"),
        ("text_completion", "llm"),
        ("embeddings", "embedding"),
        ("retrieval", "retrieval"),
        ("create_agent", "agent"),
        ("invoke_agent", "agent"),
        ("invoke_workflow", "chain"),
        ("execute_tool", "tool"),
    ],
)
def test_gen_ai_operation_name(operation, kind):
    assert step_of(make_span({"gen_ai.operation.name": operation})).kind == kind


@pytest.mark.parametrize("key", ["gen_ai.request.model", "gen_ai.system", "gen_ai.provider.name", "llm.model_name"])
def test_a_span_naming_a_model_or_provider_is_an_llm_call(key):
    assert step_of(make_span({key: "mistral-large-2512"})).kind == "llm"


def test_a_generic_kind_lets_the_next_vocabulary_decide():
    span = make_span({"openinference.span.kind": "UNKNOWN", "gen_ai.operation.name": "execute_tool"})
    assert step_of(span).kind == "tool"


def test_agentops_span_kind_overrides_the_detection():
    span = make_span({"agentops.span.kind": "memory", "gen_ai.operation.name": "chat"})
    assert step_of(span).kind == "memory"


def test_a_span_nobody_recognises_is_a_custom_step_with_its_attributes():
    step = step_of(make_span({"http.method": "GET", "db.system": "postgresql"}, name="SELECT runs"))
    assert (step.kind, step.name, step.model, step.input, step.output) == ("custom", "SELECT runs", "", None, None)
    assert step.attributes == {"http.method": "GET", "db.system": "postgresql", "resource": {}}
    assert (step.input_tokens, step.output_tokens) == (0, 0)


# --- GenAI semantic conventions ------------------------------------------------------------------


def test_gen_ai_current_names():
    inputs = [
        {"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]},
    ]
    outputs = [
        {
            "role": "assistant",
            "parts": [{"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}],
            "finish_reason": "tool_calls",
        }
    ]
    system = [{"type": "text", "content": "You are terse."}]
    span = make_span(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "mistral-large-latest",
            "gen_ai.response.model": "mistral-large-2512",
            "gen_ai.provider.name": "mistral_ai",
            "gen_ai.usage.input_tokens": 1200,
            "gen_ai.usage.output_tokens": 80,
            "gen_ai.usage.cache_read.input_tokens": 1000,
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
            "gen_ai.system_instructions": json.dumps(system),
            "gen_ai.conversation.id": "conv-42",
            "gen_ai.agent.name": "weather-agent",
            "gen_ai.agent.version": "1.4.0",
        },
        name="chat mistral-large-latest",
        span_id=CHILD,
        parent=ROOT,
    )
    step = step_of(span)

    assert (step.kind, step.model, step.provider) == ("llm", "mistral-large-2512", "mistral_ai")
    assert (step.input_tokens, step.cached_input_tokens, step.output_tokens) == (1200, 1000, 80)
    assert step.input == [{"role": "system", "parts": system}, *inputs]
    assert step.output == outputs
    assert step.run_hints == {"session_id": "conv-42", "agent_name": "weather-agent", "agent_version": "1.4.0"}


def test_gen_ai_deprecated_names():
    span = make_span(
        {
            "gen_ai.system": "openai",
            "gen_ai.request.model": "gpt-4o",
            "gen_ai.usage.prompt_tokens": 50,
            "gen_ai.usage.completion_tokens": 7,
        }
    )
    step = step_of(span)
    assert (step.kind, step.model, step.provider) == ("llm", "gpt-4o", "openai")
    assert (step.input_tokens, step.output_tokens) == (50, 7)


def test_current_names_win_over_deprecated_ones():
    span = make_span(
        {
            "gen_ai.provider.name": "mistral_ai",
            "gen_ai.system": "openai",
            "gen_ai.usage.input_tokens": 10,
            "gen_ai.usage.prompt_tokens": 99,
        }
    )
    step = step_of(span)
    assert (step.provider, step.input_tokens) == ("mistral_ai", 10)


def test_gen_ai_tool_span_gives_a_tool_call():
    span = make_span(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.arguments": '{"city": "Paris"}',
            "gen_ai.tool.call.result": '{"temperature": 21}',
        },
        name="execute_tool get_weather",
        start=T0,
        end=T0 + 1_500_000_000,
    )
    batch = mapped(span)
    (step,), (call,) = batch.steps, batch.tool_calls

    assert step.kind == "tool"
    assert (step.input, step.output) == ({"city": "Paris"}, {"temperature": 21})
    assert (call.call_id, call.tool_name, call.span_id) == ("call_1", "get_weather", ROOT.hex())
    assert (call.arguments, call.result, call.error) == ({"city": "Paris"}, {"temperature": 21}, "")
    assert (call.latency_ms, call.started_at) == (1500.0, at(T0))


def test_a_tool_span_gives_the_transcript_the_tools_answer_as_a_tool_message():
    span = make_span(
        {
            "gen_ai.operation.name": "execute_tool",
            "gen_ai.tool.name": "get_weather",
            "gen_ai.tool.call.id": "call_1",
            "gen_ai.tool.call.result": '{"temperature": 21}',
        },
        name="execute_tool get_weather",
    )
    failed = make_span(
        {"openinference.span.kind": "TOOL", "tool.name": "lookup"},
        span_id=CHILD,
        status=Status.STATUS_CODE_ERROR,
        status_message="lookup timed out",
    )

    (message,) = mapped(span).messages
    (failure,) = mapped(failed).messages

    assert (message.role, message.content, message.tool_call_id, message.name) == (
        "tool",
        {"temperature": 21},
        "call_1",
        "get_weather",
    )
    assert message.span_id == ROOT.hex() and message.position > 0
    assert (failure.role, failure.content, failure.name) == ("tool", "lookup timed out", "lookup")


def test_a_failed_tool_without_a_call_id_is_keyed_by_its_span_and_named_by_the_span():
    span = make_span(
        {"openinference.span.kind": "TOOL", "input.value": "Paris"},
        name="lookup",
        status=Status.STATUS_CODE_ERROR,
        status_message="city not found",
    )
    (call,) = mapped(span).tool_calls
    assert (call.call_id, call.tool_name, call.arguments, call.error) == (
        ROOT.hex(),
        "lookup",
        "Paris",
        "city not found",
    )


def test_openinference_tool_name_attribute_names_the_tool():
    (call,) = mapped(make_span({"openinference.span.kind": "TOOL", "tool.name": "search"}, name="x")).tool_calls
    assert call.tool_name == "search"


# --- Messages ---------------------------------------------------------------------------------------


def test_gen_ai_messages_become_transcript_messages():
    inputs = [
        {"role": "user", "parts": [{"type": "text", "content": "Weather"}, {"type": "text", "content": "in Paris?"}]},
        {
            "role": "assistant",
            "parts": [
                {"type": "text", "content": "Let me check."},
                {"type": "tool_call", "id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}},
            ],
        },
        {"role": "tool", "parts": [{"type": "tool_call_response", "id": "call_1", "response": {"temperature": 21}}]},
        {
            "role": "user",
            "parts": [{"type": "text", "content": "And this?"}, {"type": "uri", "uri": "https://x/y.png"}],
        },
    ]
    outputs = [{"role": "assistant", "parts": [{"type": "text", "content": "21 degrees."}], "finish_reason": "stop"}]
    span = make_span(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": json.dumps(inputs),
            "gen_ai.output.messages": json.dumps(outputs),
            "gen_ai.system_instructions": json.dumps([{"type": "text", "content": "Be brief."}]),
        },
        start=T0 + 1_234_567,  # 1234 microseconds after T0
        end=T0 + 2 * SECOND,
    )
    messages = mapped(span).messages
    span_id = ROOT.hex()
    start_us, end_us = (T0 + 1_234_567) // 1000, (T0 + 2 * SECOND) // 1000

    assert [m.message_id for m in messages] == [
        f"{span_id}:in:0",
        f"{span_id}:in:1",
        f"{span_id}:in:2",
        f"{span_id}:in:3",
        f"{span_id}:in:4",
        f"{span_id}:out:0",
    ]
    assert [m.position for m in messages] == [start_us * 1000 + i for i in range(5)] + [end_us * 1000 + 500]
    assert all(m.span_id == span_id and m.trace_id == TRACE.hex() for m in messages)
    system, user, assistant, tool, mixed, answer = messages
    assert (system.role, system.content) == ("system", "Be brief.")
    assert (user.role, user.content) == ("user", "Weather\nin Paris?")
    assert (assistant.content, assistant.tool_calls) == (
        "Let me check.",
        [{"id": "call_1", "name": "get_weather", "arguments": {"city": "Paris"}}],
    )
    assert (tool.role, tool.content, tool.tool_call_id) == ("tool", {"temperature": 21}, "call_1")
    assert mixed.content == [{"type": "text", "content": "And this?"}, {"type": "uri", "uri": "https://x/y.png"}]
    assert (answer.role, answer.content, answer.finish_reason) == ("assistant", "21 degrees.", "stop")


def test_openinference_flattened_messages_become_transcript_messages():
    span = make_span(
        {
            "openinference.span.kind": "LLM",
            "llm.model_name": "mistral-small-2603",
            "llm.provider": "mistralai",
            "llm.token_count.prompt": 300,
            "llm.token_count.completion": 40,
            "llm.token_count.prompt_details.cache_read": 100,
            "llm.input_messages.0.message.role": "system",
            "llm.input_messages.0.message.content": "Be brief.",
            "llm.input_messages.1.message.role": "user",
            "llm.input_messages.1.message.contents.0.message_content.type": "text",
            "llm.input_messages.1.message.contents.0.message_content.text": "Hi",
            "llm.input_messages.10.message.role": "tool",
            "llm.input_messages.10.message.content": "21",
            "llm.input_messages.10.message.tool_call_id": "call_1",
            "llm.output_messages.0.message.role": "assistant",
            "llm.output_messages.0.message.tool_calls.0.tool_call.id": "call_2",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.name": "search",
            "llm.output_messages.0.message.tool_calls.0.tool_call.function.arguments": '{"q": "news"}',
            "input.value": '{"messages": "raw request"}',
            "input.mime_type": "application/json",
        }
    )
    batch = mapped(span)
    (step,), messages = batch.steps, batch.messages

    assert (step.kind, step.model, step.provider) == ("llm", "mistral-small-2603", "mistralai")
    assert (step.input_tokens, step.cached_input_tokens, step.output_tokens) == (300, 100, 40)
    assert [(m.message_id.split(":", 1)[1], m.role, m.content) for m in messages] == [
        ("in:0", "system", "Be brief."),
        ("in:1", "user", "Hi"),
        ("in:2", "tool", "21"),  # index 10 is the third message: ids follow the order
        ("out:0", "assistant", None),
    ]
    assert messages[2].tool_call_id == "call_1"
    assert messages[3].tool_calls == [{"id": "call_2", "name": "search", "arguments": {"q": "news"}}]
    assert step.input[1]["content"] == "Hi" and step.output[0]["tool_calls"][0]["name"] == "search"


def test_openinference_input_and_output_values_follow_their_mime_type():
    span = make_span(
        {
            "openinference.span.kind": "CHAIN",
            "input.value": "42",
            "input.mime_type": "application/json",
            "output.value": '{"looks": "like json"}',
            "output.mime_type": "text/plain",
            "session.id": "s-9",
            "user.id": "u-7",
            "agent.name": "router",
        }
    )
    step = step_of(span)
    assert (step.kind, step.input, step.output) == ("chain", 42, {"looks": "like json"})
    assert step.run_hints == {"session_id": "s-9", "end_user_id": "u-7", "agent_name": "router"}


def test_plain_text_values_stay_text():
    span = make_span({"input.value": "true", "output.value": "not json {"})
    step = step_of(span)
    assert (step.input, step.output) == ("true", "not json {")


def test_messages_are_only_read_from_model_calls():
    messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "hi"}]}])
    batch = mapped(make_span({"gen_ai.operation.name": "invoke_agent", "gen_ai.input.messages": messages}))
    assert batch.messages == []
    assert batch.steps[0].input == json.loads(messages)


# --- Langfuse --------------------------------------------------------------------------------------


def test_langfuse_attributes():
    span = make_span(
        {
            "langfuse.observation.type": "generation",
            "langfuse.observation.model.name": "mistral-medium-2508",
            "langfuse.observation.usage_details": json.dumps({"input": 500, "output": 60, "input_cache_read": 200}),
            "langfuse.observation.input": json.dumps([{"role": "user", "content": "Summarise"}]),
            "langfuse.observation.output": json.dumps({"role": "assistant", "content": "Done."}),
            "langfuse.observation.metadata.step": "summary",
            "langfuse.trace.name": "nightly digest",
            "langfuse.trace.tags": ["digest", "nightly", "digest"],
            "langfuse.trace.metadata.team": "growth",
            "langfuse.trace.metadata.attempt": 2,
            "langfuse.trace.input": json.dumps({"date": "2026-11-20"}),
            "langfuse.trace.output": "sent",
            "langfuse.session.id": "lf-session",
            "langfuse.user.id": "lf-user",
            "langfuse.environment": "staging",
            "langfuse.release": "2026.11.2",
            "langfuse.version": "v7",
        }
    )
    batch = mapped(span)
    (step,), messages = batch.steps, batch.messages

    assert (step.kind, step.model) == ("llm", "mistral-medium-2508")
    assert (step.input_tokens, step.cached_input_tokens, step.output_tokens) == (500, 200, 60)
    assert step.input == [{"role": "user", "content": "Summarise"}]
    assert step.output == {"role": "assistant", "content": "Done."}
    assert [(m.role, m.content) for m in messages] == [("user", "Summarise"), ("assistant", "Done.")]
    assert step.attributes["langfuse.observation.metadata.step"] == "summary"
    assert step.run_hints == {
        "name": "nightly digest",
        "tags": ["digest", "nightly"],
        "metadata": {"team": "growth", "attempt": 2},  # observation metadata stays on the step
        "input": {"date": "2026-11-20"},
        "output": "sent",
        "session_id": "lf-session",
        "end_user_id": "lf-user",
        "environment": "staging",
        "release": "2026.11.2",
        "agent_version": "v7",
    }


def test_langfuse_error_level_marks_the_step_failed():
    span = make_span({"langfuse.observation.level": "ERROR", "langfuse.observation.status_message": "quota"})
    step = step_of(span)
    assert (step.status, step.error) == ("error", "quota")


# --- Run hints from the resource ----------------------------------------------------------------


def test_resource_gives_agent_name_environment_and_release_and_the_root_only_names_the_agent():
    resource = {"service.name": "billing-agent", "service.version": "3.1.0", "deployment.environment.name": "prod"}
    root = make_span({"agentops.parent_trace_id": "AB" * 16})
    child = make_span(span_id=CHILD, parent=ROOT)

    assert step_of(root, resource).run_hints == {
        "agent_name": "billing-agent",
        "environment": "prod",
        "release": "3.1.0",
        "parent_trace_id": "ab" * 16,
    }
    assert step_of(child, resource).run_hints == {"environment": "prod", "release": "3.1.0"}


def test_the_sdks_placeholder_service_name_is_not_an_agent_name():
    hints = step_of(make_span(), {"service.name": "unknown_service:python", "deployment.environment": "dev"}).run_hints
    assert hints == {"environment": "dev"}


def test_root_spans_come_first_so_their_hints_win():
    batch = map_traces(
        make_request(
            make_span({"gen_ai.agent.name": "sub-agent"}, span_id=CHILD, parent=ROOT),
            make_span({"gen_ai.agent.name": "main-agent"}),
        )
    )
    assert [step.run_hints["agent_name"] for step in batch.steps] == ["main-agent", "sub-agent"]


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


# --- Hostile values --------------------------------------------------------------------------------


def test_nan_and_infinite_doubles_are_kept_as_strings():
    step = step_of(
        make_span({"score": math.nan, "high": math.inf, "low": -math.inf, "in_json": '{"x": NaN, "y": [Infinity]}'})
    )
    assert (step.attributes["score"], step.attributes["high"], step.attributes["low"]) == (
        "NaN",
        "Infinity",
        "-Infinity",
    )
    storable(step.attributes)


def test_nul_characters_and_unpaired_surrogates_are_removed():
    span = make_span(
        {
            "ke\x00y": "va\x00lue",
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "a\\u0000b\\ud800c"}]}]',
            "session.id": "s\x00-1",
        },
        name="na\x00me",
    )
    batch = mapped(span)
    (step,), (message,) = batch.steps, batch.messages
    assert step.attributes["key"] == "value"
    assert step.name == "name"
    assert step.run_hints["session_id"] == "s-1"
    assert message.content == "ab?c"
    storable(step.input)
    storable(step.attributes)
    # Stored, and the client is told what changed (partial_success, nothing rejected).
    assert batch.error_message("spans") == (
        f"1 of 1 spans stored with changes: span {ROOT.hex()}: "
        "NUL characters removed, unpaired surrogates replaced by ?"
    )


def test_a_span_stored_as_sent_gets_no_message():
    batch = mapped(make_span({"gen_ai.usage.input_tokens": 12, "text": "plain"}))
    assert (batch.rejected, batch.changed, batch.error_message("spans")) == (0, 0, "")


def test_a_span_without_an_end_time_is_rejected_not_left_running():
    batch = map_traces(make_request(make_span(end=0)))
    assert (batch.rejected, batch.steps) == (1, [])
    assert batch.error_message("spans") == (
        f"1 of 1 spans rejected: span {ROOT.hex()}: end_time_unix_nano is 0 (unset): send a span once it has ended"
    )


@pytest.mark.parametrize(("start", "end"), [(2**64 - 1, T0), (T0, 2**64 - 1), (2**63, 2**63 + SECOND)])
def test_a_span_with_a_time_after_2262_is_rejected(start, end):
    batch = map_traces(make_request(make_span(start=start, end=end)))
    assert (batch.rejected, batch.steps) == (1, [])
    assert "is after 2262: an overflow, not a time" in batch.error_message("spans")


def test_invalid_utf8_bytes_are_base64():
    step = step_of(make_span({"raw": b"\xff\xfe\xc3\x28"}))
    assert base64.b64decode(step.attributes["raw"]) == b"\xff\xfe\xc3\x28"


def test_deeply_nested_values_are_kept_to_the_maximum_depth_and_cut_beyond():
    # Protobuf refuses messages nested deeper than 100 (about 45 levels of attribute
    # lists, a 400 at the endpoint); JSON inside a string attribute can go deeper.
    nested = "leaf"
    for _ in range(40):
        nested = [nested]
    deeper = "[" * 100 + "]" * 100
    deepest = "[" * 5000 + "]" * 5000  # beyond what Python's JSON parser accepts
    step = step_of(make_span({"nested": nested, "gen_ai.output.messages": deeper, "input.value": deepest}))

    def depth_of(value):
        depth = 0
        while isinstance(value, list) and value:
            value, depth = value[0], depth + 1
        return depth, value

    assert depth_of(step.attributes["nested"]) == (40, "leaf")
    assert depth_of(step.output) == (MAX_DEPTH, TRUNCATED)
    assert step.input == deepest  # not parsable: kept as the text it was
    storable(step.attributes)
    storable(step.output)


def test_huge_values_are_kept():
    big = "x" * 5_000_000
    step = step_of(make_span({"input.value": big}))
    assert step.input == big


@pytest.mark.parametrize(
    "value", [-5, math.nan, math.inf, 2.5, "many", "12abc", True, 10**15, 2**63 - 1, [1, 2], {"n": 1}], ids=repr
)
def test_a_span_whose_token_count_is_not_a_count_is_rejected_naming_it(value):
    good = make_span({"gen_ai.usage.input_tokens": 5}, span_id=CHILD, parent=ROOT)
    bad = make_span({"gen_ai.usage.input_tokens": value, "gen_ai.usage.output_tokens": 3})

    batch = map_traces(make_request(bad, good))

    assert [step.span_id for step in batch.steps] == [CHILD.hex()]  # never stored as 0
    assert batch.rejected == 1
    assert f"span {ROOT.hex()}: gen_ai.usage.input_tokens: " in batch.error_message("spans")
    assert "is not a token count" in batch.error_message("spans")


def test_token_counts_sent_as_text_or_whole_doubles_are_read():
    step = step_of(make_span({"gen_ai.usage.input_tokens": "120", "gen_ai.usage.output_tokens": 7.0}))
    assert (step.input_tokens, step.output_tokens) == (120, 7)


def test_a_span_ending_before_it_starts_keeps_outputs_after_inputs_and_no_negative_latency():
    messages = '[{"role": "user", "parts": [{"type": "text", "content": "x"}]}]'
    span = make_span(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": messages,
            "gen_ai.output.messages": messages.replace("user", "assistant"),
        },
        start=T0 + 10 * SECOND,
        end=T0,
    )
    incoming, outgoing = mapped(span).messages
    assert outgoing.position > incoming.position
    tool = make_span({"gen_ai.operation.name": "execute_tool"}, start=T0 + 10 * SECOND, end=T0)
    assert mapped(tool).tool_calls[0].latency_ms == 0.0


def test_overlong_texts_are_cut_to_their_columns():
    step = step_of(
        make_span(
            {"gen_ai.request.model": "m" * 1000, "session.id": "s" * 1000, "langfuse.trace.tags": ["t" * 500]},
            name="n" * 2000,
        )
    )
    assert (len(step.name), len(step.model), len(step.run_hints["session_id"])) == (500, 200, 200)
    assert step.run_hints["tags"] == ["t" * 100]


def test_resending_the_same_request_maps_to_the_same_ids():
    span = make_span(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "x"}]}]',
        }
    )
    first, second = mapped(span), mapped(span)
    assert [m.message_id for m in first.messages] == [m.message_id for m in second.messages]
    assert first.steps == second.steps


# --- Logs -----------------------------------------------------------------------------------------


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
