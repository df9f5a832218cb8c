"""What PostgreSQL can store: a value bound for a jsonb or text column is checked here
first, so a bad value is a clear 400 rather than a database error (a 500)."""

from __future__ import annotations

import json
import math
from typing import Any

# numeric(18, 9): money columns hold less than a billion.
MAX_MONEY = 10**9
MAX_BIGINT = 2**63 - 1


def storage_problem(value: Any) -> str:
    """Why PostgreSQL would refuse ``value`` in a jsonb (or text) column, or ""."""
    try:
        text = json.dumps(value, allow_nan=False, ensure_ascii=False)
    except ValueError:
        return "NaN and Infinity are not JSON numbers"
    except TypeError as exc:
        return f"not JSON: {exc}"
    if "\\u0000" in text:
        return "a NUL character (\\u0000) cannot be stored"
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return "an unpaired UTF-16 surrogate cannot be stored"
    return ""


def finite_number(value: int | float) -> bool:
    """Whether a number is finite and a float can hold it (a huge integer cannot)."""
    try:
        return math.isfinite(value)
    except OverflowError:
        return False


def storable(value: Any) -> Any:
    """``value`` made storable: NUL characters removed from texts, NaN and infinities
    replaced by None (for values the platform produced, such as an evaluator's answer)."""
    if isinstance(value, str):
        return value.replace("\x00", "").encode("utf-8", "replace").decode("utf-8")
    if isinstance(value, float):
        return value if value == value and value not in (float("inf"), float("-inf")) else None
    if isinstance(value, dict):
        return {storable(str(key)): storable(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [storable(item) for item in value]
    return value
