"""Turning stored payloads into something a person reads: JSON as a collapsible tree cut
to a character budget (the rest loads on demand), chat message content, tool calls in
their many shapes, and the difference between two memory snapshots.

Payloads may be 100 KB or nested a thousand levels deep; every function here does a
bounded amount of work whatever it is given, and never recurses on the input's depth.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from django.utils.html import escape
from django.utils.safestring import SafeString, mark_safe

from agentops.jsonsafe import SHOWN_JSON_CHARS, json_from_text

# How much of a payload a page shows before "Show all".
PREVIEW_CHARS = 2048
# Even "Show all" stops here; beyond it the raw JSON download has everything.
FULL_CHARS = 400_000
# Containers this deep or deeper start collapsed.
OPEN_DEPTH = 2
# Nesting beyond this is summarised instead of drawn.
MAX_DEPTH = 24


@dataclass
class Rendered:
    html: SafeString
    truncated: bool

    def __str__(self) -> str:
        return self.html


class _Budget:
    def __init__(self, limit: int | None):
        self.remaining = limit if limit is not None else FULL_CHARS
        self.truncated = False

    def take(self, text: str) -> str:
        """As much of ``text`` as the budget allows (all of it, while there is budget)."""
        if len(text) <= self.remaining:
            self.remaining -= len(text)
            return text
        cut = text[: max(self.remaining, 0)]
        self.remaining = 0
        self.truncated = True
        return cut + "…"

    @property
    def spent(self) -> bool:
        return self.remaining <= 0


def _scalar(value: Any, budget: _Budget) -> str:
    if value is None:
        return '<span class="jv-null">null</span>'
    if value is True or value is False:
        return f'<span class="jv-bool">{"true" if value else "false"}</span>'
    if isinstance(value, int | float):
        return f'<span class="jv-num">{escape(budget.take(json.dumps(value)))}</span>'
    return f'<span class="jv-str">{escape(budget.take(str(value)))}</span>'


def _count(value: dict | list) -> str:
    size = len(value)
    if isinstance(value, dict):
        return f"{size} key{'s' if size != 1 else ''}"
    return f"{size} item{'s' if size != 1 else ''}"


def render_json(value: Any, *, limit: int | None = PREVIEW_CHARS, open_depth: int = OPEN_DEPTH) -> Rendered:
    """``value`` as a tree of ``<details>``: objects and arrays from ``open_depth`` down
    start collapsed, and drawing stops once ``limit`` characters of keys and values are
    shown (``truncated`` then says so). ``limit=None`` draws up to ``FULL_CHARS``."""
    budget = _Budget(limit)
    if not isinstance(value, dict | list) or not value:
        if isinstance(value, str):
            html = f'<div class="jv jv-text">{escape(budget.take(value))}</div>'
        elif isinstance(value, dict | list):
            html = f'<div class="jv"><span class="jv-empty">{"{}" if isinstance(value, dict) else "[]"}</span></div>'
        else:
            html = f'<div class="jv">{_scalar(value, budget)}</div>'
        return Rendered(mark_safe(html), budget.truncated)  # noqa: S308 - every piece is escaped above

    out: list[str] = ['<div class="jv">']
    # One frame per open container: [its entries, how many are left, depth, closing HTML].
    # A loop over frames rather than recursion, so no input is too deep to draw.
    frames: list[list] = []

    def open_container(node: dict | list, depth: int, prefix: str, closing: str) -> None:
        brace = "{" if isinstance(node, dict) else "["
        is_open = " open" if depth < open_depth else ""
        out.append(
            f'{prefix}<details class="jv-node"{is_open}><summary><span class="jv-brace">{brace}</span>'
            f'<span class="jv-count">{_count(node)}</span></summary><div class="jv-entries">'
        )
        entries = iter(node.items()) if isinstance(node, dict) else enumerate(node)
        frames.append([entries, len(node), depth, "</div></details>" + closing])

    open_container(value, 0, "", "")
    while frames:
        frame = frames[-1]
        entries, left, depth, closing = frame
        if left and budget.spent:
            out.append(f'<div class="jv-more">… {left} more</div>')
            budget.truncated = True
            left = 0
        if not left:
            out.append(closing)
            frames.pop()
            continue
        key, child = next(entries)
        frame[1] -= 1
        entry = f'<div class="jv-entry"><span class="jv-key">{escape(budget.take(str(key)))}</span>: '
        if isinstance(child, dict | list) and child:
            if depth + 1 >= MAX_DEPTH:
                shape = "{…}" if isinstance(child, dict) else "[…]"
                out.append(f'{entry}<span class="jv-deep">{shape} nested deeper than {MAX_DEPTH} levels</span></div>')
            else:
                open_container(child, depth + 1, entry, "</div>")
        elif isinstance(child, dict | list):
            out.append(f'{entry}<span class="jv-empty">{"{}" if isinstance(child, dict) else "[]"}</span></div>')
        else:
            out.append(f"{entry}{_scalar(child, budget)}</div>")
    out.append("</div>")
    return Rendered(mark_safe("".join(out)), budget.truncated)  # noqa: S308 - every piece is escaped above


def truncate_text(text: str, limit: int = PREVIEW_CHARS) -> tuple[str, bool]:
    """``text`` cut to ``limit`` characters, and whether it was cut."""
    if len(text) <= limit:
        return text, False
    return text[:limit] + "…", True


def compact_json(value: Any, limit: int = 160) -> str:
    """A one-line preview of ``value`` for tables and diffs."""
    if isinstance(value, str):
        text = value
    else:
        try:
            text = json.dumps(value, ensure_ascii=False, default=str, separators=(", ", ": "))
        except (ValueError, RecursionError):
            text = "(too deeply nested to preview)"
    text = " ".join(text.split())
    return text if len(text) <= limit else text[:limit] + "…"


def raw_json(value: Any) -> str:
    """The whole value as indented JSON, for the download link."""
    try:
        return json.dumps(value, ensure_ascii=False, default=str, indent=2)
    except (ValueError, RecursionError):
        return json.dumps(value, ensure_ascii=False, default=str)


# --- Chat content and tool calls ---------------------------------------------------------


def content_text(content: Any) -> str | None:
    """The readable text of a message's content (a string, or text parts), or None when
    it is something else (images, structured data) that is better shown as JSON."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, dict) and isinstance(content.get("text"), str) and len(content) <= 2:
        return content["text"]
    if isinstance(content, list) and content:
        texts = []
        for part in content:
            if isinstance(part, str):
                texts.append(part)
            elif isinstance(part, dict) and isinstance(part.get("text"), str):
                texts.append(part["text"])
            elif isinstance(part, dict) and isinstance(part.get("content"), str):
                texts.append(part["content"])
            else:
                return None
        return "\n\n".join(texts)
    return None


# Keys under which agents commonly put the one text of an input or output.
TEXT_KEYS = ("question", "query", "input", "prompt", "message", "answer", "output", "response", "text", "content")


def preview_text(value: Any) -> str:
    """The text a person would call this input or output: the string itself, the one
    string of a small object (``{"question": "..."}``), the last message of a chat
    (``{"messages": [...]}``); otherwise compact JSON."""
    for _ in range(4):  # unwrap a few levels of envelope, no more
        if isinstance(value, dict):
            messages = value.get("messages")
            if isinstance(messages, list) and messages:
                value = messages[-1]
                continue
            strings = [key for key in TEXT_KEYS if isinstance(value.get(key), str)]
            if strings:
                return value[strings[0]]
            if "content" in value:
                value = value["content"]
                continue
            if len(value) == 1:
                value = next(iter(value.values()))
                continue
        elif isinstance(value, list) and value and all(isinstance(item, dict) for item in value):
            value = value[-1]
            continue
        break
    text = content_text(value)
    return text if text is not None else compact_json(value, 10_000)


@dataclass
class ToolCallView:
    call_id: str
    name: str
    arguments: Any


def tool_calls_of(tool_calls: Any) -> list[ToolCallView]:
    """A message's tool calls, whatever the shape it was sent in (OpenAI/Mistral
    ``{"id", "function": {"name", "arguments"}}``, or flat ``{"name", "arguments"}``)."""
    if not isinstance(tool_calls, list):
        return []
    out = []
    for call in tool_calls:
        if not isinstance(call, dict):
            continue
        function = call.get("function") if isinstance(call.get("function"), dict) else {}
        name = function.get("name") or call.get("name") or call.get("tool_name") or "tool"
        arguments = function.get("arguments", call.get("arguments", call.get("args", call.get("input"))))
        call_id = call.get("id") or call.get("tool_call_id") or call.get("call_id") or ""
        out.append(
            ToolCallView(
                call_id=str(call_id), name=str(name), arguments=json_from_text(arguments, max_chars=SHOWN_JSON_CHARS)
            )
        )
    return out


# --- Memory snapshots: what changed ------------------------------------------------------


@dataclass
class Change:
    path: str
    kind: str  # "added", "removed" or "changed"
    old: Any = None
    new: Any = None


_PLAIN_KEY = re.compile(r"^[A-Za-z_][A-Za-z0-9_\-]*$")


def _child_path(path: str, key: Any) -> str:
    if isinstance(key, int):
        return f"{path}[{key}]"
    key = str(key)
    if _PLAIN_KEY.match(key):
        return f"{path}.{key}" if path else key
    return f"{path}[{json.dumps(key, ensure_ascii=False)}]"


def json_diff(old: Any, new: Any, *, limit: int = 200) -> tuple[list[Change], bool]:
    """The keys added, removed and changed from ``old`` to ``new``, as paths
    (``profile.name``, ``messages[3]``), in document order; and whether more than
    ``limit`` changes were found (the list then stops there). Objects are compared key
    by key and arrays item by item, so a list that grew shows only its new items."""
    changes: list[Change] = []
    stack: list[tuple[str, Any, Any, int]] = [("", old, new, 0)]
    while stack:
        path, before, after, depth = stack.pop()
        try:
            if before == after:
                continue
        except RecursionError:  # too deep for Python to compare: shown as changed
            pass
        if len(changes) >= limit:
            return changes, True
        if depth < MAX_DEPTH and isinstance(before, dict) and isinstance(after, dict):
            children = []
            for key in after:
                if key not in before:
                    children.append(("add", key))
                else:
                    children.append(("both", key))
            children += [("remove", key) for key in before if key not in after]
            for action, key in reversed(children):
                child = _child_path(path, key)
                if action == "add":
                    stack.append((child, _MISSING, after[key], depth + 1))
                elif action == "remove":
                    stack.append((child, before[key], _MISSING, depth + 1))
                else:
                    stack.append((child, before[key], after[key], depth + 1))
            continue
        if depth < MAX_DEPTH and isinstance(before, list) and isinstance(after, list):
            longest = max(len(before), len(after))
            for index in reversed(range(longest)):
                stack.append(
                    (
                        _child_path(path, index),
                        before[index] if index < len(before) else _MISSING,
                        after[index] if index < len(after) else _MISSING,
                        depth + 1,
                    )
                )
            continue
        if before is _MISSING:
            changes.append(Change(path or "(root)", "added", None, after))
        elif after is _MISSING:
            changes.append(Change(path or "(root)", "removed", before, None))
        else:
            changes.append(Change(path or "(root)", "changed", before, after))
    return changes, False


class _Missing:
    def __eq__(self, other):
        return other is self

    def __hash__(self):
        return 0

    def __repr__(self):
        return "<missing>"


_MISSING = _Missing()
