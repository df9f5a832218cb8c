"""The attribute vocabularies (``runs.otlp.conventions``): step kinds, GenAI current and
deprecated names and tool spans, Langfuse, and what spans hint about their run."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from runs.otlp import map_traces
from tests.runs.otlp_helpers import (
    CHILD,
    ROOT,
    T0,
    at,
    make_request,
    make_span,
    mapped,
    step_of,
)

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


# --- Usage parts and reported cost ---------------------------------------------------------------


def test_current_usage_attributes_give_cache_writes_reasoning_and_modalities():
    step = step_of(
        make_span(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "claude-sonnet-4-5",
                "gen_ai.usage.input_tokens": 10_000,
                "gen_ai.usage.cache_read.input_tokens": 6_000,
                "gen_ai.usage.cache_creation.input_tokens": 2_000,
                "gen_ai.usage.output_tokens": 3_000,
                "gen_ai.usage.reasoning.output_tokens": 1_000,
                "gen_ai.usage.image.input_tokens": 1_500,
                "gen_ai.usage.output_tokens.audio": 40,
            }
        )
    )
    assert (step.input_tokens, step.cached_input_tokens, step.cache_write_input_tokens) == (10_000, 6_000, 2_000)
    assert (step.output_tokens, step.reasoning_output_tokens) == (3_000, 1_000)
    assert step.modality_tokens == {"input": {"image": 1_500}, "output": {"audio": 40}}


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        # The pending rename of cache_creation, and OpenInference's names.
        ({"gen_ai.usage.cache_write.input_tokens": 7}, (7, 0)),
        (
            {
                "llm.token_count.prompt_details.cache_write": 5,
                "llm.token_count.completion_details.reasoning": 9,
            },
            (5, 9),
        ),
        # Langfuse's usage details.
        (
            {
                "langfuse.observation.usage_details": json.dumps(
                    {"input": 100, "output": 50, "cache_creation_input_tokens": 30, "output_reasoning": 20}
                )
            },
            (30, 20),
        ),
    ],
)
def test_other_vocabularies_name_cache_writes_and_reasoning_too(attributes, expected):
    step = step_of(make_span({"gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 100, **attributes}))
    assert (step.cache_write_input_tokens, step.reasoning_output_tokens) == expected


def test_usage_and_cost_on_the_operation_details_event_are_read_and_the_span_wins():
    step = step_of(
        make_span(
            {"gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 100},
            events=[
                (
                    "gen_ai.client.inference.operation.details",
                    T0,
                    {
                        "gen_ai.usage.input_tokens": 999,
                        "gen_ai.usage.cache_creation.input_tokens": 40,
                        "gen_ai.usage.cost.amount": 0.0025,
                        "gen_ai.usage.cost.currency": "USD",
                        "gen_ai.usage.cost.source": "provider",
                    },
                )
            ],
        )
    )
    assert (step.input_tokens, step.cache_write_input_tokens) == (100, 40)
    assert (step.reported_cost, step.reported_cost_currency, step.reported_cost_source) == (
        Decimal("0.0025"),
        "USD",
        "provider",
    )


@pytest.mark.parametrize(
    ("attributes", "expected"),
    [
        ({"gen_ai.usage.cost": 0.5}, (Decimal("0.5"), "USD", "")),
        ({"gen_ai.usage.cost": "0.000123", "gen_ai.usage.cost.currency": "usd"}, (Decimal("0.000123"), "USD", "")),
        (
            {"gen_ai.usage.cost": {"amount": 2, "currency": "USD", "source": "local"}},
            (Decimal("2"), "USD", "local"),
        ),
        ({}, (None, "", "")),
    ],
)
def test_a_reported_cost_is_read_in_each_shape_clients_send(attributes, expected):
    step = step_of(make_span({"gen_ai.request.model": "gpt-4o", **attributes}))
    assert (step.reported_cost, step.reported_cost_currency, step.reported_cost_source) == expected


@pytest.mark.parametrize(
    ("attributes", "problem"),
    [
        ({"gen_ai.usage.cache_creation.input_tokens": -5}, "gen_ai.usage.cache_creation.input_tokens: -5"),
        ({"gen_ai.usage.reasoning.output_tokens": "lots"}, "gen_ai.usage.reasoning.output_tokens: 'lots'"),
        ({"gen_ai.usage.image.input_tokens": 1.5}, "gen_ai.usage.image.input_tokens: 1.5"),
        ({"gen_ai.usage.cost": -0.01}, "gen_ai.usage.cost: cost -0.01 is not an amount"),
        ({"gen_ai.usage.cost": "free"}, "gen_ai.usage.cost: cost 'free' is not an amount"),
        ({"gen_ai.usage.cost": True}, "gen_ai.usage.cost: cost True is not an amount"),
        (
            {"gen_ai.usage.cost": 0.01, "gen_ai.usage.cost.currency": "XYZ"},
            "gen_ai.usage.cost: unknown currency 'XYZ'",
        ),
    ],
)
def test_bad_usage_or_cost_rejects_the_span_and_keeps_the_others(attributes, problem):
    good = make_span({"gen_ai.request.model": "gpt-4o", "gen_ai.usage.input_tokens": 10}, span_id=CHILD, parent=ROOT)
    bad = make_span({"gen_ai.request.model": "gpt-4o", **attributes})
    batch = map_traces(make_request(bad, good))
    assert batch.rejected == 1 and problem in batch.problems[0]
    assert [step.span_id for step in batch.steps] == [CHILD.hex()]
