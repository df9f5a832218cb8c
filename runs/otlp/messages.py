"""The messages of a model call, in one shape whatever the vocabulary sent them in:
``{"role", "content", "tool_calls", "tool_call_id", "name", "finish_reason"}``.

From the GenAI format (``parts``, system instructions), the older chat format
(``content``, ``tool_calls``), OpenInference's flattened ``llm.*_messages.*`` attributes
and Langfuse's chat input and output; ``message_event()`` makes one a ``MessageEvent``.
"""

from __future__ import annotations

import re
from typing import Any

from runs.events import MessageEvent
from runs.otlp.attributes import content_text, parse_json_text, text_value

INPUT_MESSAGES, OUTPUT_MESSAGES = "gen_ai.input.messages", "gen_ai.output.messages"
GENAI_MESSAGE_KEYS = (INPUT_MESSAGES, OUTPUT_MESSAGES)
_OPENINFERENCE_MESSAGE = re.compile(r"llm\.(input|output)_messages\.(\d{1,6})\.message\.(.+)")
_OPENINFERENCE_TOOL_CALL = re.compile(r"tool_calls\.(\d{1,6})\.tool_call\.(id|function\.name|function\.arguments)")
_OPENINFERENCE_CONTENT = re.compile(r"contents\.(\d{1,6})\.message_content\.(type|text|image\.image\.url)")


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


def message_list(raw: Any, default_role: str) -> list[dict]:
    if isinstance(raw, dict):
        raw = [raw]
    if not isinstance(raw, list):
        return []
    return [message for item in raw if (message := normalize_message(item, default_role)) is not None]


def system_message(instructions: Any) -> dict | None:
    """``gen_ai.system_instructions`` (a list of parts, or text) as a system message."""
    instructions = parse_json_text(instructions)
    if instructions in (None, "", []):
        return None
    parts = instructions if isinstance(instructions, list) else [{"type": "text", "content": instructions}]
    return normalize_message({"role": "system", "parts": parts}, "system")


def openinference_messages(attributes: dict, direction: str) -> list[dict]:
    """Messages from OpenInference's flattened ``llm.{input,output}_messages.{i}.message.*``."""
    prefix = f"llm.{direction}_messages."
    if prefix not in "\n".join(attributes):
        return []  # most spans: the keys searched at once, not one by one
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


def genai_messages(attributes: dict) -> dict[str, Any]:
    """The GenAI message attributes (``GENAI_MESSAGE_KEYS``) the span has, parsed: read
    once for the transcript (``span_messages``) and the step's input and output."""
    return {key: parse_json_text(attributes[key]) for key in GENAI_MESSAGE_KEYS if key in attributes}


def span_messages(attributes: dict, parsed: dict[str, Any]) -> tuple[list[dict], list[dict]]:
    """(input messages, output messages) of a model call, from the first vocabulary
    that has them: GenAI (system instructions first; ``parsed`` is ``genai_messages``'),
    OpenInference, Langfuse."""
    inputs = message_list(parsed.get(INPUT_MESSAGES), "user")
    system = system_message(attributes.get("gen_ai.system_instructions"))
    if system is not None:
        inputs = [system, *inputs]
    outputs = message_list(parsed.get(OUTPUT_MESSAGES), "assistant")
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
    return message_list(candidates, default_role)


def message_event(trace_id: str, span_id: str, message_id: str, at: int, message: dict) -> MessageEvent:
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
