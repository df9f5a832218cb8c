"""OTLP spans and log records -> the events of ``runs.services.ingest``.

Pure functions of decoded protobuf messages: no database, no settings. Three attribute
vocabularies are understood (names in ``docs`` of each project, summarised in
``shared/reference/integrations.md`` section 2):

- OpenTelemetry GenAI semantic conventions, current and deprecated names (``gen_ai.*``);
- OpenInference (``openinference.span.kind``, ``llm.*``, ``tool.*``, ``input.value``...);
- Langfuse (``langfuse.*``).

Every span becomes a step whatever it carries: a span nobody recognises is a ``custom``
step with its attributes. LLM steps also give the transcript's messages, tool steps a
tool call and the tool's answer as a ``tool`` message, and ``agentops.memory`` (or a
memory step's output) a memory snapshot. Two
attributes of our own complete the vocabularies: ``agentops.span.kind`` (any step kind,
e.g. ``memory``, overriding the detection) and ``agentops.parent_trace_id`` (the trace
of the parent run, for a sub-agent traced separately).

Whatever a client sends, the events hold valid PostgreSQL ``jsonb`` and ``text``: no
NaN or Infinity (kept as the strings ``"NaN"``, ``"Infinity"``), no NUL characters, no
unpaired surrogates (``?``), at most ``MAX_DEPTH`` levels of nesting; bytes are base64;
text columns are cut to their length. Attributes are free-form telemetry (a model's
output may hold a NUL), so these are cleaned rather than refused, and every span or log
record so changed is named in ``partial_success`` (with nothing rejected, the OTLP way
of a warning). What cannot be meant as sent is refused: a span whose end time is unset
(0), a time after 2262 (beyond signed 64-bit nanoseconds: an overflow, not a clock), a
token count that is not a whole number from 0 to ``MAX_TOKENS``. A span that cannot be
stored is rejected alone (partial success), never the batch.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections import defaultdict
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
from opentelemetry.proto.logs.v1.logs_pb2 import LogRecord
from opentelemetry.proto.trace.v1.trace_pb2 import Span, Status

from agentops.jsonsafe import MAX_DEPTH, NESTING_CUT, TRUNCATED, json_from_text, storable_lossless, storable_text
from runs.models import Step
from runs.services.ingest import MemoryEvent, MessageEvent, StepEvent, ToolCallEvent

# No model call has a billion tokens: a larger count is garbage, and summing such
# counts over a run would overflow the totals.
MAX_TOKENS = 100_000_000
MAX_POSITION = 2**63 - 1
# Signed 64-bit nanoseconds end in 2262; a later time is an overflow (2^64 - 1 is 2554).
MAX_UNIX_NANOS = 2**63 - 1
MAX_TAGS = 50
MAX_PROBLEMS_REPORTED = 5
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)

LLM, CUSTOM = Step.Kind.LLM.value, Step.Kind.CUSTOM.value

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
CACHED_TOKEN_KEYS = ("gen_ai.usage.cache_read.input_tokens", "llm.token_count.prompt_details.cache_read")
USAGE_DETAILS_CACHED_KEYS = (
    "cache_read_input_tokens",
    "input_cache_read",
    "input_cached_tokens",
    "cached_input_tokens",
    "cache_read",
)
LANGFUSE_TRACE_METADATA = "langfuse.trace.metadata"

# Deprecated GenAI events that older instrumentations send as log records.
LOG_EVENT_ROLES = {
    "gen_ai.system.message": "system",
    "gen_ai.user.message": "user",
    "gen_ai.assistant.message": "assistant",
    "gen_ai.tool.message": "tool",
    "gen_ai.choice": "assistant",
}
OPERATION_DETAILS_EVENT = "gen_ai.client.inference.operation.details"

_OPENINFERENCE_MESSAGE = re.compile(r"llm\.(input|output)_messages\.(\d{1,6})\.message\.(.+)")
_OPENINFERENCE_TOOL_CALL = re.compile(r"tool_calls\.(\d{1,6})\.tool_call\.(id|function\.name|function\.arguments)")
_OPENINFERENCE_CONTENT = re.compile(r"contents\.(\d{1,6})\.message_content\.(type|text|image\.image\.url)")
_DIGITS = re.compile(r"\s*\d{1,18}\s*")


class InvalidItem(ValueError):
    """A span or log record that cannot be stored; the message says why."""


# Errors the mapping of one span could still raise on input nobody anticipated: that
# span is rejected (partial success) instead of the whole request failing with a 500.
UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError)


@dataclass
class MappedBatch:
    """The events of one export request, and what was rejected."""

    steps: list[StepEvent] = field(default_factory=list)
    messages: list[MessageEvent] = field(default_factory=list)
    tool_calls: list[ToolCallEvent] = field(default_factory=list)
    snapshots: list[MemoryEvent] = field(default_factory=list)
    received: int = 0
    rejected: int = 0
    problems: list[str] = field(default_factory=list)
    changed: int = 0
    changes: list[str] = field(default_factory=list)

    def reject(self, reason: str) -> None:
        self.rejected += 1
        if len(self.problems) < MAX_PROBLEMS_REPORTED:
            self.problems.append(reason)

    def change(self, item: str, notes: set[str]) -> None:
        """``item`` was stored with ``notes`` (how its values were made storable)."""
        if not notes:
            return
        self.changed += 1
        if len(self.changes) < MAX_PROBLEMS_REPORTED:
            self.changes.append(f"{item}: {', '.join(sorted(notes))}")

    def error_message(self, what: str) -> str:
        """One line for ``partial_success.error_message``: what was rejected, then what
        was stored changed (empty when neither)."""
        parts = []
        if self.rejected:
            more = "; ..." if self.rejected > len(self.problems) else ""
            parts.append(f"{self.rejected} of {self.received} {what} rejected: " + "; ".join(self.problems) + more)
        if self.changed:
            more = "; ..." if self.changed > len(self.changes) else ""
            parts.append(
                f"{self.changed} of {self.received} {what} stored with changes: " + "; ".join(self.changes) + more
            )
        return ". ".join(parts)

    @property
    def empty(self) -> bool:
        return not (self.steps or self.messages or self.tool_calls or self.snapshots)


@dataclass
class SpanEvents:
    step: StepEvent
    messages: list[MessageEvent] = field(default_factory=list)
    tool_calls: list[ToolCallEvent] = field(default_factory=list)
    snapshots: list[MemoryEvent] = field(default_factory=list)


# --- Values -------------------------------------------------------------------------


# What the values of the item being mapped needed to become storable (see ``noting``).
_notes: ContextVar[set[str] | None] = ContextVar("otlp_mapping_notes", default=None)
TEXT_CUT = "text longer than its field cut"


@contextmanager
def noting() -> Iterator[set[str]]:
    """Collect, while mapping one span or log record, how its values were changed."""
    notes: set[str] = set()
    token = _notes.set(notes)
    try:
        yield notes
    finally:
        _notes.reset(token)


def _note(what: str) -> None:
    notes = _notes.get()
    if notes is not None:
        notes.add(what)


def clean_text(text: str) -> str:
    """``text`` as PostgreSQL stores it (``agentops.jsonsafe.storable_text``), noted."""
    return storable_text(text, note=_note)


def clean_float(number: float) -> float | str:
    return storable_lossless(number, note=_note)


def json_safe(value: Any) -> Any:
    """``value`` (parsed JSON or converted attributes) made storable as ``jsonb``, the
    lossless way (``agentops.jsonsafe.storable_lossless``), noted."""
    return storable_lossless(value, note=_note)


def any_value(value: AnyValue, depth: int = 0) -> Any:
    """An OTLP AnyValue as plain JSON (bytes as base64)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        return clean_text(value.string_value)
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return clean_float(value.double_value)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind in ("array_value", "kvlist_value") and depth >= MAX_DEPTH:
        _note(NESTING_CUT)
        return TRUNCATED
    if kind == "array_value":
        return [any_value(item, depth + 1) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {clean_text(kv.key): any_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    return None  # unset, or a profiles-only string table index


def attributes_dict(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    """OTLP attributes as one flat JSON object (a repeated key: the last wins)."""
    return {clean_text(kv.key): any_value(kv.value) for kv in attributes}


def parse_json_text(value: Any, *, any_json: bool = False) -> Any:
    """A JSON document sent as a string attribute, parsed; the string itself when it is
    not JSON. Only objects and arrays are parsed unless ``any_json`` (so a plain text
    "42" or "true" stays text), and made storable the lossless way."""
    parsed = json_from_text(value, any_json=any_json)
    return value if parsed is value else json_safe(parsed)


def text_value(value: Any, max_length: int) -> str:
    """A scalar attribute as text cut to a column's length ("" for none, lists and objects)."""
    if value is None or isinstance(value, dict | list):
        return ""
    text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool) else str(value)
    text = clean_text(text).strip()
    if len(text) > max_length:
        _note(TEXT_CUT)
    return text[:max_length]


def content_text(value: Any) -> str:
    """A text part's content as it was sent (not stripped, unlike ``text_value``)."""
    if value is None:
        return ""
    return value if isinstance(value, str) else json.dumps(value)


def first_value(attributes: dict, keys: Iterable[str]) -> Any:
    """The value of the first of ``keys`` that is present and not empty."""
    for key in keys:
        value = attributes.get(key)
        if value not in (None, "", [], {}):
            return value
    return None


def first_text(attributes: dict, keys: Iterable[str], max_length: int) -> str:
    for key in keys:
        text = text_value(attributes.get(key), max_length)
        if text:
            return text
    return ""


def token_count(value: Any, name: str) -> int | None:
    """A token count (``name`` is the attribute's), None when absent, InvalidItem for
    anything that is not a whole number from 0 to MAX_TOKENS: it cannot be stored as
    sent, and a count stored as 0 would misstate the run's cost."""
    if value is None or value == "":
        return None
    count = None
    if isinstance(value, int) and not isinstance(value, bool):
        count = value
    elif isinstance(value, float) and math.isfinite(value) and value.is_integer():
        count = int(value)
    elif isinstance(value, str) and _DIGITS.fullmatch(value):
        count = int(value)
    if count is None or not 0 <= count <= MAX_TOKENS:
        shown = value if isinstance(value, int | float) else repr(value)[:60]
        raise InvalidItem(f"{name}: {shown} is not a token count (a whole number from 0 to {MAX_TOKENS:,})")
    return count


def first_count(attributes: dict, keys: Iterable[str], fallback: Any = None, fallback_name: str = "") -> int | None:
    """The count of the first of ``keys`` present (else of ``fallback``)."""
    for key in keys:
        if attributes.get(key) not in (None, ""):
            return token_count(attributes[key], key)
    return token_count(fallback, fallback_name)


def hex_id(raw: bytes, size: int, what: str) -> str:
    """A trace (16 bytes) or span (8 bytes) id as lowercase hex, or InvalidItem."""
    if len(raw) != size or not any(raw):
        shown = raw.hex()[:64] or "empty"
        raise InvalidItem(f"invalid {what} ({shown}): it must be {size} bytes ({size * 2} hex digits), not all zero")
    return raw.hex()


def timestamp(unix_nanos: int, what: str = "time") -> datetime | None:
    """A UTC datetime (microseconds) from unix nanoseconds; None for 0 (unset);
    InvalidItem for a time after 2262 (MAX_UNIX_NANOS)."""
    if not unix_nanos:
        return None
    if unix_nanos > MAX_UNIX_NANOS:
        raise InvalidItem(f"{what} {unix_nanos} is after 2262: an overflow, not a time (unix nanoseconds)")
    return EPOCH + timedelta(microseconds=unix_nanos // 1000)


def position(unix_nanos: int, offset: int) -> int:
    """A transcript position: the time in microseconds x 1000 plus ``offset``."""
    return min((unix_nanos // 1000) * 1000 + offset, MAX_POSITION)


# --- Kinds, status, usage -------------------------------------------------------------


def span_kind(attributes: dict) -> str:
    """The step kind. Each vocabulary is asked in turn; one that only says "generic"
    (OpenInference UNKNOWN, a Langfuse span...) lets the next one decide."""
    explicit = text_value(attributes.get("agentops.span.kind"), 16).lower()
    if explicit in Step.Kind.values:
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


def span_status(span: Span, attributes: dict) -> tuple[str, str]:
    """(status, error text): the span status, Langfuse's ERROR level, and the span's
    exception events (type, message and stack trace)."""
    errors: list[str] = []
    if span.status.code == Status.STATUS_CODE_ERROR:
        status = Step.Status.ERROR.value
        if span.status.message:
            errors.append(clean_text(span.status.message))
    elif span.status.code == Status.STATUS_CODE_OK:
        status = Step.Status.OK.value
    else:
        status = Step.Status.UNSET.value
    if text_value(attributes.get("langfuse.observation.level"), 20).upper() == "ERROR":
        if status == Step.Status.UNSET:
            status = Step.Status.ERROR.value
        message = text_value(attributes.get("langfuse.observation.status_message"), 100_000)
        if message:
            errors.append(message)
    for event in span.events:
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
    # The SDKs often repeat the exception's "Type: message" as the status message.
    kept = [text for index, text in enumerate(errors) if not any(text in other for other in errors[index + 1 :])]
    return status, "\n\n".join(dict.fromkeys(kept))


def span_events(span: Span) -> list[dict]:
    return [
        {
            "name": clean_text(event.name),
            "time": timestamp(event.time_unix_nano, "event time").isoformat() if event.time_unix_nano else None,
            "attributes": attributes_dict(event.attributes),
        }
        for event in span.events
    ]


def usage(attributes: dict) -> tuple[int, int, int]:
    """(input, cached input, output) tokens; 0 when not reported."""
    details = parse_json_text(attributes.get("langfuse.observation.usage_details"))
    details = details if isinstance(details, dict) else {}
    langfuse = "langfuse.observation.usage_details"
    input_tokens = first_count(attributes, INPUT_TOKEN_KEYS, details.get("input"), f"{langfuse}.input")
    output_tokens = first_count(attributes, OUTPUT_TOKEN_KEYS, details.get("output"), f"{langfuse}.output")
    cached = first_count(
        attributes, CACHED_TOKEN_KEYS, first_value(details, USAGE_DETAILS_CACHED_KEYS), f"{langfuse} (cached)"
    )
    return input_tokens or 0, cached or 0, output_tokens or 0


# --- Messages ---------------------------------------------------------------------------


def _tool_calls(raw: Any) -> list[dict]:
    """Tool calls as ``{"id", "name", "arguments"}``, from the GenAI ``tool_call`` part or
    the OpenAI-style ``{"id", "function": {"name", "arguments"}}``."""
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    calls = []
    for call in raw:
        if not isinstance(call, dict):
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        calls.append(
            {
                "id": call.get("id"),
                "name": call.get("name", function.get("name")),
                "arguments": parse_json_text(call.get("arguments", function.get("arguments"))),
            }
        )
    return calls


def normalize_message(raw: Any, default_role: str) -> dict | None:
    """One message as ``{"role", "content", "tool_calls", "tool_call_id", "name",
    "finish_reason"}``, from the GenAI format (``parts``) or the older chat format
    (``content``, ``tool_calls``). Content is text when every part is text, the
    remaining parts otherwise; tool calls move to ``tool_calls``."""
    if not isinstance(raw, dict):
        return None
    message = {
        "role": text_value(raw.get("role"), 32) or default_role,
        "content": None,
        "tool_calls": [],
        "tool_call_id": text_value(raw.get("tool_call_id"), 200),
        "name": text_value(raw.get("name"), 200),
        "finish_reason": text_value(raw.get("finish_reason"), 64),
    }
    parts = raw.get("parts")
    if not isinstance(parts, list):
        message["content"] = raw.get("content")
        message["tool_calls"] = _tool_calls(raw.get("tool_calls"))
        return message
    typed = [(part.get("type") if isinstance(part, dict) else None, part) for part in parts]
    message["tool_calls"] = _tool_calls([part for kind, part in typed if kind == "tool_call"])
    rest = [(kind, part) for kind, part in typed if kind != "tool_call"]
    responses = [part for kind, part in rest if kind == "tool_call_response"]
    if responses and not message["tool_call_id"]:
        message["tool_call_id"] = text_value(responses[0].get("id"), 200)
    if rest and all(kind == "text" for kind, _ in rest):
        message["content"] = "\n".join(content_text(part.get("content")) for _, part in rest)
    elif len(rest) == 1 and responses:
        message["content"] = responses[0].get("response")
    elif rest:
        message["content"] = [part for _, part in rest]
    return message


def _message_list(raw: Any, default_role: str) -> list[dict]:
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    return [message for item in raw if (message := normalize_message(item, default_role)) is not None]


def _system_message(instructions: Any) -> dict | None:
    """``gen_ai.system_instructions`` (a list of parts, or text) as a system message."""
    instructions = parse_json_text(instructions)
    if instructions in (None, "", []):
        return None
    parts = instructions if isinstance(instructions, list) else [{"type": "text", "content": instructions}]
    return normalize_message({"role": "system", "parts": parts}, "system")


def openinference_messages(attributes: dict, direction: str) -> list[dict]:
    """Messages from OpenInference's flattened ``llm.{input,output}_messages.{i}.message.*``."""
    prefix = f"llm.{direction}_messages."
    found: dict[int, dict] = {}
    for key, value in attributes.items():
        if not key.startswith(prefix):
            continue
        match = _OPENINFERENCE_MESSAGE.fullmatch(key)
        if match is None or match.group(1) != direction:
            continue
        entry = found.setdefault(int(match.group(2)), {"calls": {}, "contents": {}})
        rest = match.group(3)
        if rest in ("role", "content", "name", "tool_call_id"):
            entry[rest] = value
        elif call := _OPENINFERENCE_TOOL_CALL.fullmatch(rest):
            entry["calls"].setdefault(int(call.group(1)), {})[call.group(2)] = value
        elif content := _OPENINFERENCE_CONTENT.fullmatch(rest):
            entry["contents"].setdefault(int(content.group(1)), {})[content.group(2)] = value
    default_role = "user" if direction == "input" else "assistant"
    messages = []
    for index in sorted(found):
        entry = found[index]
        content = entry.get("content")
        if content is None and entry["contents"]:
            parts = [entry["contents"][k] for k in sorted(entry["contents"])]
            texts = [part.get("text") for part in parts if part.get("type", "text") == "text"]
            content = "\n".join(content_text(text) for text in texts) if len(texts) == len(parts) else parts
        calls = [
            {
                "id": call.get("id"),
                "name": call.get("function.name"),
                "arguments": parse_json_text(call.get("function.arguments")),
            }
            for _, call in sorted(entry["calls"].items())
        ]
        messages.append(
            {
                "role": text_value(entry.get("role"), 32) or default_role,
                "content": content,
                "tool_calls": calls,
                "tool_call_id": text_value(entry.get("tool_call_id"), 200),
                "name": text_value(entry.get("name"), 200),
                "finish_reason": "",
            }
        )
    return messages


def span_messages(attributes: dict) -> tuple[list[dict], list[dict]]:
    """(input messages, output messages) of a model call, from the first vocabulary
    that has them: GenAI (system instructions first), OpenInference, Langfuse."""
    inputs = _message_list(parse_json_text(attributes.get("gen_ai.input.messages")), "user")
    system = _system_message(attributes.get("gen_ai.system_instructions"))
    if system is not None:
        inputs = [system, *inputs]
    outputs = _message_list(parse_json_text(attributes.get("gen_ai.output.messages")), "assistant")
    if not inputs:
        inputs = openinference_messages(attributes, "input")
    if not outputs:
        outputs = openinference_messages(attributes, "output")
    # Langfuse generations hold the chat as their input and output, when it is one.
    if not inputs:
        inputs = _chat_messages(parse_json_text(attributes.get("langfuse.observation.input")), "user")
    if not outputs:
        outputs = _chat_messages(parse_json_text(attributes.get("langfuse.observation.output")), "assistant")
    return inputs, outputs


def _chat_messages(raw: Any, default_role: str) -> list[dict]:
    """Messages only if ``raw`` looks like a chat (objects with a role): a Langfuse
    generation's input may be anything."""
    candidates = raw if isinstance(raw, list) else [raw]
    if not candidates or not all(isinstance(item, dict) and "role" in item for item in candidates):
        return []
    return _message_list(candidates, default_role)


def _message_event(trace_id: str, span_id: str, message_id: str, at: int, message: dict) -> MessageEvent:
    return MessageEvent(
        trace_id=trace_id,
        span_id=span_id,
        message_id=message_id,
        position=at,
        role=message["role"],
        content=message["content"],
        tool_calls=message["tool_calls"],
        tool_call_id=message["tool_call_id"],
        name=message["name"],
        finish_reason=message["finish_reason"],
    )


# --- Payloads and run hints ------------------------------------------------------------------


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


def span_payloads(attributes: dict, kind: str, inputs: list[dict], outputs: list[dict]) -> tuple[Any, Any]:
    """(input, output) of a step: Langfuse's observation input/output, the GenAI
    messages, OpenInference's messages, the tool call's arguments/result, then
    ``input.value`` / ``output.value``."""
    input_payload = parse_json_text(attributes.get("langfuse.observation.input"), any_json=True)
    if input_payload is None and "gen_ai.input.messages" in attributes:
        input_payload = _payload_with_system(
            parse_json_text(attributes["gen_ai.input.messages"]), attributes.get("gen_ai.system_instructions")
        )
    if input_payload is None and kind == LLM and inputs:
        input_payload = inputs
    if input_payload is None and "gen_ai.tool.call.arguments" in attributes:
        input_payload = parse_json_text(attributes["gen_ai.tool.call.arguments"])
    if input_payload is None:
        input_payload = _mime_value(attributes, "input")

    output_payload = parse_json_text(attributes.get("langfuse.observation.output"), any_json=True)
    if output_payload is None and "gen_ai.output.messages" in attributes:
        output_payload = parse_json_text(attributes["gen_ai.output.messages"])
    if output_payload is None and kind == LLM and outputs:
        output_payload = outputs
    if output_payload is None and "gen_ai.tool.call.result" in attributes:
        output_payload = parse_json_text(attributes["gen_ai.tool.call.result"])
    if output_payload is None:
        output_payload = _mime_value(attributes, "output")
    return input_payload, output_payload


def _lookup_text(attributes: dict, resource: dict, keys: Iterable[str], max_length: int) -> str:
    """The first of ``keys`` in the span's attributes, then in its resource's."""
    keys = tuple(keys)
    return first_text(attributes, keys, max_length) or first_text(resource, keys, max_length)


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


def run_hints(attributes: dict, resource: dict, *, is_root: bool) -> dict[str, Any]:
    """What a span tells about its run (session, user, agent, environment, Langfuse
    trace fields); ingest fills the run's empty fields with them. Only non-empty hints
    are returned: an empty one would hide the root span's name."""
    service = text_value(resource.get("service.name"), 200)
    if service.startswith("unknown_service"):
        service = ""  # the SDK's placeholder when the application set no name
    hints: dict[str, Any] = {
        "session_id": _lookup_text(
            attributes, resource, ("session.id", "gen_ai.conversation.id", "langfuse.session.id"), 200
        ),
        "end_user_id": _lookup_text(attributes, resource, ("user.id", "langfuse.user.id", "enduser.id"), 200),
        "agent_name": first_text(attributes, ("gen_ai.agent.name", "agent.name"), 200) or (service if is_root else ""),
        "agent_version": first_text(attributes, ("gen_ai.agent.version", "langfuse.version"), 100),
        "environment": _lookup_text(
            attributes, resource, ("langfuse.environment", "deployment.environment.name", "deployment.environment"), 100
        ),
        "release": _lookup_text(attributes, resource, ("langfuse.release", "service.version"), 100),
        "name": first_text(attributes, ("langfuse.trace.name",), 500),
        "tags": _tags(attributes.get("langfuse.trace.tags")),
        "metadata": _trace_metadata(attributes),
        "input": parse_json_text(attributes.get("langfuse.trace.input"), any_json=True),
        "output": parse_json_text(attributes.get("langfuse.trace.output"), any_json=True),
        "parent_trace_id": first_text(attributes, ("agentops.parent_trace_id",), 128).lower(),
    }
    return {name: value for name, value in hints.items() if value not in (None, "", [], {})}


# --- Spans ---------------------------------------------------------------------------------


def map_span(span: Span, resource: dict) -> SpanEvents:
    """The events of one span; InvalidItem when its ids are not valid."""
    trace_id = hex_id(span.trace_id, 16, "trace id")
    span_id = hex_id(span.span_id, 8, "span id")
    # An all-zero parent is how some SDKs say "no parent".
    parent_span_id = hex_id(span.parent_span_id, 8, "parent span id") if any(span.parent_span_id) else ""
    attributes = attributes_dict(span.attributes)
    kind = span_kind(attributes)
    status, error = span_status(span, attributes)
    if not span.end_time_unix_nano:
        # An SDK exports a span once it has ended; without an end its run would stay
        # running forever.
        raise InvalidItem("end_time_unix_nano is 0 (unset): send a span once it has ended")
    started_at = timestamp(span.start_time_unix_nano, "start_time_unix_nano")
    ended_at = timestamp(span.end_time_unix_nano, "end_time_unix_nano")
    input_tokens, cached_input_tokens, output_tokens = usage(attributes)
    inputs, outputs = span_messages(attributes) if kind == LLM else ([], [])
    input_payload, output_payload = span_payloads(attributes, kind, inputs, outputs)
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
        input_tokens=input_tokens,
        cached_input_tokens=cached_input_tokens,
        output_tokens=output_tokens,
        input=input_payload,
        output=output_payload,
        attributes={**attributes, "resource": resource},
        events=span_events(span),
        run_hints=run_hints(attributes, resource, is_root=not parent_span_id),
    )
    result = SpanEvents(step=step)

    # Inputs are ordered at the call's start, outputs at its end (never before its start).
    start_nanos = span.start_time_unix_nano or span.end_time_unix_nano
    end_nanos = max(span.end_time_unix_nano, start_nanos)
    for index, message in enumerate(inputs):
        result.messages.append(
            _message_event(trace_id, span_id, f"{span_id}:in:{index}", position(start_nanos, index), message)
        )
    for index, message in enumerate(outputs):
        result.messages.append(
            _message_event(trace_id, span_id, f"{span_id}:out:{index}", position(end_nanos, 500 + index), message)
        )

    if kind == Step.Kind.TOOL:
        tool_call_id = first_text(attributes, ("gen_ai.tool.call.id",), 200)
        tool_name = first_text(attributes, ("gen_ai.tool.name", "tool.name"), 200) or name[:200] or "tool"
        # The tool's answer is a message of the conversation (what the model reads next):
        # instrumentations put it on the tool span only, not on the next model call.
        answer = output_payload if output_payload is not None else (error or None)
        if answer is not None:
            result.messages.append(
                _message_event(
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
                error=error if status == Step.Status.ERROR else "",
                latency_ms=(
                    max((ended_at - started_at).total_seconds() * 1000, 0.0) if started_at and ended_at else None
                ),
                started_at=started_at,
            )
        )

    state = parse_json_text(attributes.get("agentops.memory"), any_json=True)
    if state is None and kind == Step.Kind.MEMORY:
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
        for scope_spans in resource_spans.scope_spans:
            for span in scope_spans.spans:
                batch.received += 1
                try:
                    with noting() as notes:
                        events = map_span(span, resource)
                except InvalidItem as exc:
                    batch.reject(f"span {span.span_id.hex() or '(no id)'}: {exc}")
                    continue
                except UNREADABLE as exc:
                    batch.reject(f"span {span.span_id.hex() or '(no id)'} could not be read ({type(exc).__name__})")
                    continue
                batch.change(f"span {span.span_id.hex()}", notes | resource_notes)
                batch.steps.append(events.step)
                batch.messages.extend(events.messages)
                batch.tool_calls.extend(events.tool_calls)
                batch.snapshots.extend(events.snapshots)
    # Root spans first: ingest fills a run's empty fields from the first span that
    # has them, and the root's agent name and session should win over a sub-agent's.
    batch.steps.sort(key=lambda step: bool(step.parent_span_id))
    return batch


# --- Log records ---------------------------------------------------------------------------


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
        inputs = _message_list(parse_json_text(attributes.get("gen_ai.input.messages")), "user")
        system = _system_message(attributes.get("gen_ai.system_instructions"))
        outputs = _message_list(parse_json_text(attributes.get("gen_ai.output.messages")), "assistant")
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
                except InvalidItem as exc:
                    batch.reject(f"{event_name} log record: {exc}")
                    continue
                except UNREADABLE as exc:
                    batch.reject(f"{event_name} log record could not be read ({type(exc).__name__})")
                    continue
                batch.change(f"{event_name} log record", notes)
                nanos = record.time_unix_nano or record.observed_time_unix_nano
                for message in messages:
                    index = used[(trace_id, span_id, nanos)]
                    used[(trace_id, span_id, nanos)] += 1
                    batch.messages.append(
                        _message_event(
                            trace_id, span_id, f"{span_id}:log:{nanos}:{index}", position(nanos, index), message
                        )
                    )
    return batch
