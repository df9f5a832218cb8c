"""Answers that fit: long texts cut with a note, lists paged by an opaque cursor.

A model reading a run cannot take megabytes of payload, so each list a tool returns is
filled up to a character budget and ends with ``next_cursor`` when more is left; a text
longer than its budget is cut and says how much was left out (``get_step`` shows one
step's payloads in full up to a larger budget).
"""

from __future__ import annotations

import base64
import json
from typing import Any

from agentops.errors import InvalidRequest

TEXT_CHARS = 2_000


def clip(value: Any, limit: int = TEXT_CHARS) -> Any:
    """``value`` with every text longer than ``limit`` cut, saying how much was cut."""
    if isinstance(value, str):
        if len(value) <= limit:
            return value
        return f"{value[:limit]}… [cut: {len(value) - limit} more characters]"
    if isinstance(value, list):
        return [clip(item, limit) for item in value]
    if isinstance(value, dict):
        return {key: clip(item, limit) for key, item in value.items()}
    return value


def encode_cursor(**positions: int) -> str:
    return base64.urlsafe_b64encode(json.dumps(positions, sort_keys=True).encode()).decode()


def decode_cursor(cursor: str | None, *names: str) -> dict[str, int]:
    """The positions a cursor of ours holds (all 0 without one); InvalidRequest otherwise."""
    if not cursor:
        return dict.fromkeys(names, 0)
    try:
        positions = json.loads(base64.urlsafe_b64decode(cursor.encode()))
    except (ValueError, UnicodeError):
        positions = None
    if (
        not isinstance(positions, dict)
        or set(positions) != set(names)
        or not all(
            isinstance(value, int) and not isinstance(value, bool) and value >= 0 for value in positions.values()
        )
    ):
        raise InvalidRequest("cursor: not a cursor this tool gave; leave it out to start from the beginning")
    return positions


def fill(items: list, start: int, budget: int) -> tuple[list, int | None]:
    """The items from ``start`` that fit in ``budget`` characters of JSON (at least one),
    and where the next page starts (None when none is left)."""
    taken, used, position = [], 0, start
    while position < len(items):
        size = len(json.dumps(items[position], default=str))
        if taken and used + size > budget:
            break
        taken.append(items[position])
        used += size
        position += 1
    return taken, (position if position < len(items) else None)
