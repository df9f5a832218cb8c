"""A model call's messages (``runs.otlp.messages``): GenAI parts and the chat format,
OpenInference's flattened messages and mime-typed values, only from model calls."""

from __future__ import annotations

import json

from tests.runs.otlp_helpers import (
    ROOT,
    SECOND,
    T0,
    TRACE,
    make_span,
    mapped,
    step_of,
)

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
