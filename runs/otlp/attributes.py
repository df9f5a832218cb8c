"""OTLP values read as the store keeps them: attributes as plain JSON, JSON sent as
text parsed, text cut to its column, token counts, ids and times checked.

Pure functions of decoded protobuf values. Values are cleaned with ``runs.events``'
cleaners (which note, inside ``noting()``, what they changed); what cannot be meant as
sent raises ``InvalidItem``: an id of the wrong size or all zero, a time after 2262
(beyond signed 64-bit nanoseconds: an overflow, not a clock), a token count that is not
a whole number from 0 to ``MAX_TOKENS``.
"""

from __future__ import annotations

import base64
import json
import math
import re
from collections.abc import Iterable
from datetime import UTC, datetime, timedelta
from typing import Any

from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue

from agentops.jsonsafe import MAX_DEPTH, NESTING_CUT, TRUNCATED, json_from_text
from runs.events import TEXT_CUT, clean_float, clean_text, json_safe, note
from runs.otlp.partial_success import InvalidItem

# No model call has a billion tokens: a larger count is garbage, and summing such
# counts over a run would overflow the totals.
MAX_TOKENS = 100_000_000
MAX_POSITION = 2**63 - 1
# Signed 64-bit nanoseconds end in 2262; a later time is an overflow (2^64 - 1 is 2554).
MAX_UNIX_NANOS = 2**63 - 1
EPOCH = datetime(1970, 1, 1, tzinfo=UTC)
MICROSECOND = timedelta(microseconds=1)

# A tuple, not ``dict | list``: that union is built again at every call, and
# isinstance() of a union calls back into Python's machinery (text_value, ~10 a span).
_STRUCTURED = (dict, list)
_DIGITS = re.compile(r"\s*\d{1,18}\s*")


def any_value(value: AnyValue, depth: int = 0) -> Any:
    """An OTLP AnyValue as plain JSON (bytes as base64)."""
    kind = value.WhichOneof("value")
    if kind == "string_value":
        text = value.string_value
        # The common case without a call: text with nothing PostgreSQL refuses.
        return text if text.isascii() and "\x00" not in text else clean_text(text)
    if kind == "int_value":
        return value.int_value
    if kind == "bool_value":
        return value.bool_value
    if kind == "double_value":
        return clean_float(value.double_value)
    if kind == "bytes_value":
        return base64.b64encode(value.bytes_value).decode("ascii")
    if kind in ("array_value", "kvlist_value") and depth >= MAX_DEPTH:
        note(NESTING_CUT)
        return TRUNCATED
    if kind == "array_value":
        return [any_value(item, depth + 1) for item in value.array_value.values]
    if kind == "kvlist_value":
        return {clean_text(kv.key): any_value(kv.value, depth + 1) for kv in value.kvlist_value.values}
    return None  # unset, or a profiles-only string table index


def attributes_dict(attributes: Iterable[KeyValue]) -> dict[str, Any]:
    """OTLP attributes as one flat JSON object (a repeated key: the last wins)."""
    flat = {}
    for kv in attributes:
        key = kv.key
        if not key.isascii() or "\x00" in key:
            key = clean_text(key)
        value = kv.value
        # Most attributes are text: a value with text set holds nothing else (a oneof),
        # so any_value()'s call and its WhichOneof are for the others (and empty text).
        text = value.string_value
        if text:
            flat[key] = text if text.isascii() and "\x00" not in text else clean_text(text)
        else:
            flat[key] = any_value(value)
    return flat


class _NotFinite(Exception):  # noqa: N818 - a signal, not an error
    """A JSON text holds NaN, Infinity, or a number beyond a float's range."""


def _finite_float(text: str) -> float:
    number = float(text)
    if not math.isfinite(number):
        raise _NotFinite
    return number


def _not_finite(_constant: str):
    raise _NotFinite


# json's decoder, but stopping at a number json_safe would change (NaN, Infinity, or
# one overflowing a float): the only values of an ASCII text without escapes it changes.
_FINITE_JSON = json.JSONDecoder(parse_float=_finite_float, parse_constant=_not_finite)


def parse_json_text(value: Any, *, any_json: bool = False) -> Any:
    """A JSON document sent as a string attribute, parsed; the string itself when it is
    not JSON. Only objects and arrays are parsed unless ``any_json`` (so a plain text
    "42" or "true" stays text), and made storable the lossless way."""
    if value.__class__ is not str:
        return value  # absent, or not text: nothing to parse (json_from_text's answer too)
    if value.isascii() and "\\u" not in value and value.count("[") + value.count("{") < MAX_DEPTH:
        # Without escapes (of a NUL, a surrogate), non-ASCII text (an unpaired
        # surrogate) or enough brackets to nest deeper than MAX_DEPTH, json_safe only
        # changes numbers that are not finite: parsed as json_from_text does, without
        # json_safe's walk of the whole value.
        stripped = value.strip()
        if not stripped or (not any_json and stripped[0] not in "[{"):
            return value
        try:
            return _FINITE_JSON.decode(stripped)
        except _NotFinite:
            pass  # json_safe makes them text, below
        except (ValueError, RecursionError):
            return value
    parsed = json_from_text(value, any_json=any_json)
    return value if parsed is value else json_safe(parsed)


def text_value(value: Any, max_length: int) -> str:
    """A scalar attribute as text cut to a column's length ("" for none, lists and objects)."""
    if value.__class__ is str and value.isascii() and "\x00" not in value:
        text = value.strip()  # most are: ASCII without NUL is stored as it is
    elif value is None or isinstance(value, _STRUCTURED):
        return ""
    else:
        text = value if isinstance(value, str) else json.dumps(value) if isinstance(value, bool) else str(value)
        text = clean_text(text).strip()
    if len(text) > max_length:
        note(TEXT_CUT)
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
        value = attributes.get(key)
        if value is None:
            continue
        text = text_value(value, max_length)
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
        value = attributes.get(key)
        if value is not None and value != "":
            return token_count(value, key)
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
    # A multiple of one microsecond: timedelta(microseconds=n) normalises n into days,
    # seconds and microseconds by division, twice the time of the multiplication.
    return EPOCH + MICROSECOND * (unix_nanos // 1000)


def position(unix_nanos: int, offset: int) -> int:
    """A transcript position: the time in microseconds x 1000 plus ``offset``."""
    return min((unix_nanos // 1000) * 1000 + offset, MAX_POSITION)
