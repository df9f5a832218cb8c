"""The attribute vocabularies a span is read in, asked in turn (names in the ``docs`` of
each project, summarised in ``shared/reference/integrations.md`` section 2):

- OpenTelemetry GenAI semantic conventions, current and deprecated names (``gen_ai.*``);
- OpenInference (``openinference.span.kind``, ``llm.*``, ``tool.*``, ``input.value``...);
- Langfuse (``langfuse.*``).

Two attributes of our own complete them: ``agentops.span.kind`` (any step kind, e.g.
``memory``, overriding the detection) and ``agentops.parent_trace_id`` (the trace of the
parent run, for a sub-agent traced separately). Here: a span's step kind, token usage,
input and output, and what it tells about its run. Its messages are ``messages``'.
"""

from __future__ import annotations

from typing import Any

from runs.events import clean_reported_cost
from runs.models import Step
from runs.otlp.attributes import first_count, first_text, first_value, parse_json_text, text_value
from runs.otlp.partial_success import InvalidItem

MAX_TAGS = 50

LLM, CUSTOM = Step.Kind.LLM.value, Step.Kind.CUSTOM.value
STEP_KINDS = frozenset(Step.Kind.values)

OPENINFERENCE_KINDS = {
    "LLM": "llm",
    "CHAIN": "chain",
    "TOOL": "tool",
    "AGENT": "agent",
    "RETRIEVER": "retrieval",
    "RERANKER": "retrieval",
    "EMBEDDING": "embedding",
    "GUARDRAIL": "guardrail",
    "EVALUATOR": CUSTOM,
    "PROMPT": CUSTOM,
    "UNKNOWN": CUSTOM,
}
LANGFUSE_KINDS = {
    "generation": "llm",
    "agent": "agent",
    "tool": "tool",
    "retriever": "retrieval",
    "embedding": "embedding",
    "chain": "chain",
    "guardrail": "guardrail",
    "evaluator": CUSTOM,
    "event": CUSTOM,
    "span": CUSTOM,
}
GEN_AI_OPERATION_KINDS = {
    "chat": "llm",
    "generate_content": "llm",
    "text_completion": "llm",
    "embeddings": "embedding",
    "retrieval": "retrieval",
    "create_agent": "agent",
    "invoke_agent": "agent",
    "invoke_workflow": "chain",
    "execute_tool": "tool",
}
# A span carrying any of these is a model call even without a kind.
MODEL_CALL_HINTS = ("gen_ai.request.model", "gen_ai.system", "gen_ai.provider.name", "llm.model_name")
MODEL_KEYS = ("gen_ai.response.model", "gen_ai.request.model", "llm.model_name", "langfuse.observation.model.name")
PROVIDER_KEYS = ("gen_ai.provider.name", "gen_ai.system", "llm.provider", "llm.system")
INPUT_TOKEN_KEYS = ("gen_ai.usage.input_tokens", "gen_ai.usage.prompt_tokens", "llm.token_count.prompt")
OUTPUT_TOKEN_KEYS = ("gen_ai.usage.output_tokens", "gen_ai.usage.completion_tokens", "llm.token_count.completion")
CACHED_TOKEN_KEYS = (
    "gen_ai.usage.cache_read.input_tokens",
    "gen_ai.usage.cache_read_input_tokens",
    "llm.token_count.prompt_details.cache_read",
)
# Cache writes (cache_creation, with a rename to cache_write pending) are part of the
# input count, reasoning tokens part of the output count.
CACHE_WRITE_TOKEN_KEYS = (
    "gen_ai.usage.cache_creation.input_tokens",
    "gen_ai.usage.cache_write.input_tokens",
    "gen_ai.usage.cache_creation_input_tokens",
    "llm.token_count.prompt_details.cache_write",
)
REASONING_TOKEN_KEYS = (
    "gen_ai.usage.reasoning.output_tokens",
    "gen_ai.usage.reasoning_tokens",
    "llm.token_count.completion_details.reasoning",
)
USAGE_DETAILS_CACHE_WRITE_KEYS = (
    "cache_creation_input_tokens",
    "input_cache_creation",
    "input_cache_write",
    "cache_write",
    "cache_creation",
)
USAGE_DETAILS_REASONING_KEYS = ("reasoning_tokens", "output_reasoning", "output_reasoning_tokens", "reasoning")
# Per-modality counts: gen_ai.usage.<modality>.input_tokens (the parts' style), the
# gen_ai.usage.input_tokens.<modality> form some clients send, and OpenInference's
# llm.token_count.prompt_details.<modality> / completion_details.<modality>.
MODALITIES = ("text", "image", "audio", "video")
MODALITY_KEYS = {
    direction: {
        modality: (
            f"gen_ai.usage.{modality}.{direction}_tokens",
            f"gen_ai.usage.{direction}_tokens.{modality}",
            f"llm.token_count.{details}_details.{modality}",
        )
        for modality in MODALITIES
    }
    for direction, details in (("input", "prompt"), ("output", "completion"))
}
_ALL_MODALITY_KEYS = frozenset(
    key for keys_by_modality in MODALITY_KEYS.values() for keys in keys_by_modality.values() for key in keys
)
# A cost the client reports: gen_ai.usage.cost.{amount,currency,source} (merged, not yet
# released), or one gen_ai.usage.cost (a number, or an object with those keys).
COST_KEY = "gen_ai.usage.cost"
_COST_KEYS = frozenset((COST_KEY, f"{COST_KEY}.amount", f"{COST_KEY}.currency", f"{COST_KEY}.source"))
# The event (a log record, or an event of the span) with a call's details.
OPERATION_DETAILS_EVENT = "gen_ai.client.inference.operation.details"
USAGE_DETAILS_CACHED_KEYS = (
    "cache_read_input_tokens",
    "input_cache_read",
    "input_cached_tokens",
    "cached_input_tokens",
    "cache_read",
)
LANGFUSE_TRACE_METADATA = "langfuse.trace.metadata"


def span_kind(attributes: dict) -> str:
    """The step kind. Each vocabulary is asked in turn; one that only says "generic"
    (OpenInference UNKNOWN, a Langfuse span...) lets the next one decide."""
    explicit = text_value(attributes.get("agentops.span.kind"), 16).lower()
    if explicit in STEP_KINDS:
        return explicit
    for key, table, normalise in (
        ("openinference.span.kind", OPENINFERENCE_KINDS, str.upper),
        ("langfuse.observation.type", LANGFUSE_KINDS, str.lower),
        ("gen_ai.operation.name", GEN_AI_OPERATION_KINDS, str.lower),
    ):
        kind = table.get(normalise(text_value(attributes.get(key), 100)))
        if kind and kind != CUSTOM:
            return kind
    if first_value(attributes, MODEL_CALL_HINTS) is not None:
        return LLM
    return CUSTOM


# Every attribute usage() reads: a span with none of them (most but model calls) has no usage.
_USAGE_KEYS = frozenset(
    (
        *INPUT_TOKEN_KEYS,
        *OUTPUT_TOKEN_KEYS,
        *CACHED_TOKEN_KEYS,
        *CACHE_WRITE_TOKEN_KEYS,
        *REASONING_TOKEN_KEYS,
        "langfuse.observation.usage_details",
        *_ALL_MODALITY_KEYS,
    )
)


def usage(attributes: dict) -> dict[str, Any]:
    """The token counts of a span as ``StepEvent`` fields: input, cached input (cache
    reads), cache writes, output, reasoning output (0 when not reported) and the counts
    per modality (only those reported). InvalidItem for a count that is not one."""
    if _USAGE_KEYS.isdisjoint(attributes):
        return {
            "input_tokens": 0,
            "cached_input_tokens": 0,
            "cache_write_input_tokens": 0,
            "output_tokens": 0,
            "reasoning_output_tokens": 0,
            "modality_tokens": {},
        }
    details = parse_json_text(attributes.get("langfuse.observation.usage_details"))
    details = details if isinstance(details, dict) else {}
    langfuse = "langfuse.observation.usage_details"
    input_tokens = first_count(attributes, INPUT_TOKEN_KEYS, details.get("input"), f"{langfuse}.input")
    output_tokens = first_count(attributes, OUTPUT_TOKEN_KEYS, details.get("output"), f"{langfuse}.output")
    cached = first_count(
        attributes, CACHED_TOKEN_KEYS, first_value(details, USAGE_DETAILS_CACHED_KEYS), f"{langfuse} (cached)"
    )
    cache_write = first_count(
        attributes,
        CACHE_WRITE_TOKEN_KEYS,
        first_value(details, USAGE_DETAILS_CACHE_WRITE_KEYS),
        f"{langfuse} (cache write)",
    )
    reasoning = first_count(
        attributes, REASONING_TOKEN_KEYS, first_value(details, USAGE_DETAILS_REASONING_KEYS), f"{langfuse} (reasoning)"
    )
    modality_tokens: dict[str, dict[str, int]] = {}
    for direction, keys_by_modality in MODALITY_KEYS.items() if not _ALL_MODALITY_KEYS.isdisjoint(attributes) else ():
        for modality, keys in keys_by_modality.items():
            count = first_count(attributes, keys)
            if count is not None:
                modality_tokens.setdefault(direction, {})[modality] = count
    return {
        "input_tokens": input_tokens or 0,
        "cached_input_tokens": cached or 0,
        "cache_write_input_tokens": cache_write or 0,
        "output_tokens": output_tokens or 0,
        "reasoning_output_tokens": reasoning or 0,
        "modality_tokens": modality_tokens,
    }


def reported_cost(attributes: dict) -> dict[str, Any]:
    """The cost the client reported, as ``StepEvent`` fields (none when it sent none);
    InvalidItem for an amount that is not one or a currency the platform cannot compare."""
    if _COST_KEYS.isdisjoint(attributes):
        return {}  # as below with nothing sent
    cost = parse_json_text(attributes.get(COST_KEY))
    parts = cost if isinstance(cost, dict) else {"amount": cost}

    def part(name: str) -> Any:
        # The dotted attribute first (the released name), then the object's key.
        value = attributes.get(f"{COST_KEY}.{name}")
        return parts.get(name) if value in (None, "") else value

    amount, currency, source = part("amount"), part("currency"), part("source")
    try:
        value, currency, source = clean_reported_cost(amount, currency, source)
    except ValueError as error:
        raise InvalidItem(f"{COST_KEY}: {error}") from None
    if value is None:
        return {}
    return {"reported_cost": value, "reported_cost_currency": currency, "reported_cost_source": source}


def _mime_value(attributes: dict, prefix: str) -> Any:
    """OpenInference ``input.value`` / ``output.value``, parsed when its mime type says
    JSON or when it holds a JSON object or array."""
    value = attributes.get(f"{prefix}.value")
    mime = text_value(attributes.get(f"{prefix}.mime_type"), 100).lower()
    return parse_json_text(value, any_json="json" in mime)


def _payload_with_system(messages: Any, instructions: Any) -> Any:
    instructions = parse_json_text(instructions)
    if instructions in (None, "", []):
        return messages
    system = {
        "role": "system",
        "parts": instructions if isinstance(instructions, list) else [{"type": "text", "content": instructions}],
    }
    if isinstance(messages, list):
        return [system, *messages]
    return [system] if messages is None else messages


def span_payloads(
    attributes: dict, kind: str, inputs: list[dict], outputs: list[dict], parsed_messages: dict[str, Any]
) -> tuple[Any, Any]:
    """(input, output) of a step: Langfuse's observation input/output, the GenAI
    messages (``parsed_messages``: those the span has, parsed, by attribute),
    OpenInference's messages, the tool call's arguments/result, then ``input.value`` /
    ``output.value``."""
    input_payload = _payload(
        attributes,
        kind,
        inputs,
        parsed_messages,
        langfuse_key="langfuse.observation.input",
        messages_key="gen_ai.input.messages",
        tool_key="gen_ai.tool.call.arguments",
        mime_prefix="input",
        system_instructions=attributes.get("gen_ai.system_instructions"),
    )
    output_payload = _payload(
        attributes,
        kind,
        outputs,
        parsed_messages,
        langfuse_key="langfuse.observation.output",
        messages_key="gen_ai.output.messages",
        tool_key="gen_ai.tool.call.result",
        mime_prefix="output",
    )
    return input_payload, output_payload


def _payload(
    attributes: dict,
    kind: str,
    messages: list[dict],
    parsed_messages: dict[str, Any],
    *,
    langfuse_key: str,
    messages_key: str,
    tool_key: str,
    mime_prefix: str,
    system_instructions: Any = None,
) -> Any:
    """One side (input or output) of a step, from the first convention that states it, in
    the order ``span_payloads`` gives; the GenAI input messages carry the system
    instructions, the output ones none."""
    payload = parse_json_text(attributes.get(langfuse_key), any_json=True)
    if payload is None and messages_key in parsed_messages:
        payload = parsed_messages[messages_key]
        if system_instructions is not None:
            payload = _payload_with_system(payload, system_instructions)
    if payload is None and kind == LLM and messages:
        payload = messages
    if payload is None and tool_key in attributes:
        payload = parse_json_text(attributes[tool_key])
    if payload is None:
        payload = _mime_value(attributes, mime_prefix)
    return payload


def _tags(raw: Any) -> list[str]:
    raw = parse_json_text(raw)
    if isinstance(raw, str):
        raw = raw.split(",")
    if not isinstance(raw, list):
        return []
    tags = [text_value(tag, 100) for tag in raw]
    return list(dict.fromkeys(tag for tag in tags if tag))[:MAX_TAGS]


def _trace_metadata(attributes: dict) -> dict:
    """Langfuse trace metadata: ``langfuse.trace.metadata.<key>`` attributes, or one
    ``langfuse.trace.metadata`` JSON object."""
    metadata = parse_json_text(attributes.get(LANGFUSE_TRACE_METADATA))
    metadata = dict(metadata) if isinstance(metadata, dict) else {}
    prefix = LANGFUSE_TRACE_METADATA + "."
    for key, value in attributes.items():
        if key.startswith(prefix) and len(key) > len(prefix):
            metadata[key[len(prefix) :]] = parse_json_text(value)
    return metadata


SESSION_KEYS = ("session.id", "gen_ai.conversation.id", "langfuse.session.id")
END_USER_KEYS = ("user.id", "langfuse.user.id", "enduser.id")
AGENT_NAME_KEYS = ("gen_ai.agent.name", "agent.name")
AGENT_VERSION_KEYS = ("gen_ai.agent.version", "langfuse.version")
ENVIRONMENT_KEYS = ("langfuse.environment", "deployment.environment.name", "deployment.environment")
RELEASE_KEYS = ("langfuse.release", "service.version")
TRACE_NAME_KEY, TRACE_TAGS_KEY = "langfuse.trace.name", "langfuse.trace.tags"
TRACE_INPUT_KEY, TRACE_OUTPUT_KEY = "langfuse.trace.input", "langfuse.trace.output"
PARENT_TRACE_KEY = "agentops.parent_trace_id"
# Every span attribute run_hints() reads but the langfuse.trace.metadata.<key> ones.
_HINT_KEYS = frozenset(
    (
        *SESSION_KEYS,
        *END_USER_KEYS,
        *AGENT_NAME_KEYS,
        *AGENT_VERSION_KEYS,
        *ENVIRONMENT_KEYS,
        *RELEASE_KEYS,
        TRACE_NAME_KEY,
        TRACE_TAGS_KEY,
        LANGFUSE_TRACE_METADATA,
        TRACE_INPUT_KEY,
        TRACE_OUTPUT_KEY,
        PARENT_TRACE_KEY,
    )
)


def resource_hints(resource: dict) -> dict[str, str]:
    """What a resource (the process that sent the spans) tells about their runs, read once
    per resource: the session, user, environment and release its attributes name, and its
    service as the agent's name (the root span's run only). Empty when not stated."""
    service = text_value(resource.get("service.name"), 200)
    if service.startswith("unknown_service"):
        service = ""  # the SDK's placeholder when the application set no name
    return {
        "session_id": first_text(resource, SESSION_KEYS, 200),
        "end_user_id": first_text(resource, END_USER_KEYS, 200),
        "agent_name": service,
        "environment": first_text(resource, ENVIRONMENT_KEYS, 100),
        "release": first_text(resource, RELEASE_KEYS, 100),
    }


def run_hints(attributes: dict, from_resource: dict[str, str], *, is_root: bool) -> dict[str, Any]:
    """What a span tells about its run (session, user, agent, environment, Langfuse
    trace fields), its attributes first, then its resource's (``from_resource``:
    ``resource_hints``'); ingest fills the run's empty fields with them. Only non-empty
    hints are returned: an empty one would hide the root span's name."""
    service = from_resource["agent_name"] if is_root else ""
    metadata_prefix = LANGFUSE_TRACE_METADATA + "."
    # The prefix searched in the keys joined (a tenth of a generator's time over them); a
    # key with a line break holding it only takes the full path below, which is exact.
    if _HINT_KEYS.isdisjoint(attributes) and metadata_prefix not in "\n".join(attributes):
        # Most spans carry none: only their resource's hints.
        hints: dict[str, Any] = {**from_resource, "agent_name": service}
        return {name: value for name, value in hints.items() if value}
    hints = {
        "session_id": first_text(attributes, SESSION_KEYS, 200) or from_resource["session_id"],
        "end_user_id": first_text(attributes, END_USER_KEYS, 200) or from_resource["end_user_id"],
        "agent_name": first_text(attributes, AGENT_NAME_KEYS, 200) or service,
        "agent_version": first_text(attributes, AGENT_VERSION_KEYS, 100),
        "environment": first_text(attributes, ENVIRONMENT_KEYS, 100) or from_resource["environment"],
        "release": first_text(attributes, RELEASE_KEYS, 100) or from_resource["release"],
        "name": first_text(attributes, (TRACE_NAME_KEY,), 500),
        "tags": _tags(attributes.get(TRACE_TAGS_KEY)),
        "metadata": _trace_metadata(attributes),
        "input": parse_json_text(attributes.get(TRACE_INPUT_KEY), any_json=True),
        "output": parse_json_text(attributes.get(TRACE_OUTPUT_KEY), any_json=True),
        "parent_trace_id": first_text(attributes, (PARENT_TRACE_KEY,), 128).lower(),
    }
    return {name: value for name, value in hints.items() if value not in (None, "", [], {})}
