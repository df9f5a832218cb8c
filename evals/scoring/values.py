"""Values as evaluators read them: JSON paths into an output (``parse_path``,
``resolve_path``), a value as the text rules read (``as_text``), equality as JSON means
it, and numbers from numbers or texts. Shared by every family of evaluator kinds; no
kind lives here.
"""

from __future__ import annotations

import json
import math
import re
from decimal import Decimal, InvalidOperation
from typing import Any

# Patterns are written by people and may backtrack catastrophically ("(a+)+$"): the shapes
# that do are refused when saved (config.check_pattern), and what is left runs on the
# `regex` engine with a time budget per text.
REGEX_TIMEOUT_SECONDS = 0.1

_PATH = re.compile(r"(?:[^.\[\]]+|\[\s*-?\d+\s*\])(?:\.[^.\[\]]+|\[\s*-?\d+\s*\])*")
_PATH_PART = re.compile(r"([^.\[\]]+)|\[\s*(-?\d+)\s*\]")
MISSING = object()


def parse_path(path: str) -> list[str | int]:
    """``"a.b[0].c"`` -> ``["a", "b", 0, "c"]``; ``""`` -> ``[]`` (the whole value).
    Raises ValueError for a malformed path."""
    path = (path or "").strip()
    if not path:
        return []
    if not _PATH.fullmatch(path):
        raise ValueError(f"{path!r} is not a path such as answer.items[0].name")
    return [key if key else int(index) for key, index in _PATH_PART.findall(path)]


def resolve_path(value: Any, parts: list[str | int]) -> Any:
    """The value at ``parts`` in ``value`` (a JSON string is parsed first), or ``MISSING``."""
    for part in parts:
        value = loaded(value)
        if isinstance(part, str) and isinstance(value, dict):
            if part not in value:
                return MISSING
            value = value[part]
        elif isinstance(value, list) and (isinstance(part, int) or part.lstrip("-").isdecimal()):
            index = int(part)
            if not -len(value) <= index < len(value):
                return MISSING
            value = value[index]
        else:
            return MISSING
    return value


def loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (TypeError, ValueError):
        return False, None


def loaded(value: Any) -> Any:
    """A string holding a JSON object or array, parsed; anything else as it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        ok, parsed = loads(value)
        if ok:
            return parsed
    return value


def as_text(value: Any) -> str:
    """A value as the text rules read: strings as they are, the rest as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def short(value: Any, limit: int = 120) -> str:
    text = as_text(value) if not isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def json_equal(left: Any, right: Any) -> bool:
    """Equality as JSON means it: 1 == 1.0, but true is not 1."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float | Decimal) and isinstance(right, int | float | Decimal):
        return float(left) == float(right)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(json_equal(left[key], right[key]) for key in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(json_equal(a, b) for a, b in zip(left, right, strict=True))
    return left == right


def same(actual: Any, expected: Any, *, case_sensitive: bool = True, strip: bool = True) -> bool:
    """Whether two values match: text with the text options, JSON as JSON, and a text
    against a JSON value either as the JSON it holds or as the value's text."""

    def norm(text: str) -> str:
        text = text.strip() if strip else text
        return text if case_sensitive else text.casefold()

    if isinstance(actual, str) and isinstance(expected, str):
        return norm(actual) == norm(expected)
    if not isinstance(actual, str) and not isinstance(expected, str):
        return json_equal(actual, expected)
    text, other = (actual, expected) if isinstance(actual, str) else (expected, actual)
    ok, parsed = loads(text)
    if ok and json_equal(parsed, other):
        return True
    return norm(text) == norm(as_text(other))


def number_in(value: Any) -> float | None:
    """A finite number from a number or a text holding one, else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | Decimal):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def decimal_or_none(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def expected_at(expected: Any, parts: list[str | int]) -> Any:
    """The expected value for a field: the same path in the expected output when it is a
    JSON object or array holding it, else the expected output itself."""
    if parts and isinstance(loaded(expected), dict | list):
        found = resolve_path(expected, parts)
        if found is not MISSING:
            return found
    return expected


def regex_flags(flags: str) -> str:
    return f"(?{flags})" if flags else ""
