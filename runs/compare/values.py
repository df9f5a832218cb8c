"""The values a comparison shows, made safe to send: JSON text parsed, values as one
canonical JSON text, what a model answered without what differs in every call, long
values cut with a flag, and the differences between two JSON values as paths.

Pure functions, no queries. Every part of the comparison (steps, outputs, memory,
settings) states its differences through ``json_changes`` and ``equal``, so a change
reads the same wherever it is listed.
"""

from __future__ import annotations

import json
from decimal import Decimal
from typing import Any

# The pages' payload helpers (JSON diff, previews, tool-call shapes) are pure functions;
# reusing them keeps a difference the same on the run page and here.
from runs.views import display

# Differences listed for the memory and a JSON output; beyond, a flag says so.
MAX_CHANGES = 200
# A changed value longer than this as JSON is given as the start of its JSON text.
VALUE_CHARS = 1_000
PREVIEW_CHARS = 200


def canonical_json(value: Any) -> str:
    """``value`` as JSON with sorted keys and no spaces, so equal arguments have one text."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    except (ValueError, TypeError, RecursionError):
        return repr(value)


def llm_answer(output: Any) -> Any:
    """What a model call answered, without what differs in every call: a chat-completion
    response becomes its choices' messages; tool calls keep their name and arguments but
    lose their ids (providers make new ones every time)."""
    if isinstance(output, dict) and isinstance(output.get("choices"), list):
        return [
            _message_answer(choice.get("message", choice.get("delta")) if isinstance(choice, dict) else choice)
            for choice in output["choices"]
        ]
    if isinstance(output, dict):
        return _message_answer(output)
    if isinstance(output, list):
        return [_message_answer(item) for item in output]
    return output


def _message_answer(message: Any) -> Any:
    if not isinstance(message, dict) or "tool_calls" not in message:
        return message
    answer = {key: value for key, value in message.items() if key != "tool_calls"}
    calls = display.tool_calls_of(message["tool_calls"])
    answer["tool_calls"] = [{"name": call.name, "arguments": call.arguments} for call in calls]
    return answer


def answer_preview(answer: Any) -> str:
    """One line for an LLM call's answer: its text, or the tools it asks for
    (``calc({"expression": "1+1"})``) when it has no text."""
    text = display.preview_text(answer)
    if text.strip():
        return display.compact_json(text, PREVIEW_CHARS)
    last = answer[-1] if isinstance(answer, list) and answer else answer
    calls = last.get("tool_calls") if isinstance(last, dict) else None
    if calls and isinstance(calls, list):
        described = ", ".join(
            f"{call.get('name')}({display.compact_json(call.get('arguments'), PREVIEW_CHARS)})"
            for call in calls
            if isinstance(call, dict)
        )
        return display.compact_json(described, PREVIEW_CHARS)
    return display.compact_json(answer, PREVIEW_CHARS)


def bounded(value: Any, limit: int = VALUE_CHARS) -> tuple[Any, bool]:
    """``value`` as is when its JSON is at most ``limit`` characters; else the start of
    that JSON text (or of the string), and True."""
    if isinstance(value, str):
        return (value, False) if len(value) <= limit else (value[:limit] + "…", True)
    if value is None or isinstance(value, bool | int | float):
        return value, False
    text = canonical_json(value)
    return (value, False) if len(text) <= limit else (text[:limit] + "…", True)


def json_changes(before: Any, after: Any, *, field: str, limit: int) -> tuple[list[dict], bool]:
    """The paths added, removed and changed from ``before`` (run a) to ``after`` (run b),
    each ``{"field", "path", "kind", "a", "b"}`` (``path`` is "" for the whole value);
    and whether there were more than ``limit``."""
    changes, more = display.json_diff(before, after, limit=limit)
    out = []
    for change in changes:
        old, old_cut = bounded(change.old)
        new, new_cut = bounded(change.new)
        entry = {
            "field": field,
            "path": "" if change.path == "(root)" else change.path,
            "kind": change.kind,
            "a": old if change.kind != "added" else None,
            "b": new if change.kind != "removed" else None,
        }
        if old_cut or new_cut:
            entry["truncated"] = True
        out.append(entry)
    return out, more


def equal(a: Any, b: Any) -> bool:
    try:
        return a == b
    except RecursionError:
        return canonical_json(a) == canonical_json(b)


def decimal_text(value: Decimal | None) -> str | None:
    """A cost as the API writes decimals: a string, never a float."""
    return None if value is None else f"{value:f}"
