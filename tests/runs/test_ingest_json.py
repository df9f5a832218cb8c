"""The JSON the write path hands to jsonb: orjson's text, or json's when orjson's could
differ, always read by PostgreSQL as the same value as before (``runs.ingest.sql``)."""

import enum
import uuid
from dataclasses import dataclass
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.db import connection

from runs.ingest.sql import _jsonb_bytes, _jsonb_text_exact


class Colour(enum.StrEnum):
    RED = "red"


class Level(enum.IntEnum):
    HIGH = 3


@dataclass
class Point:
    x: int


def _deep(levels: int, leaf):
    value = leaf
    for _ in range(levels):
        value = [value]
    return value


VALUES = [
    None,
    {},
    [],
    "plain",
    {"a": 1, "b": [1.5, -0.0, 1e16, 1e-7, 2**63 - 1, -(2**63), 2**64 - 1], "c": True, "d": None},
    {"nan": float("nan"), "inf": float("inf"), "minus": float("-inf")},
    [float("nan")],
    {"big": 2**64, "small": -(2**63) - 1, "huge": 10**30},
    {7: "int key", 2.5: "float key", True: "bool key", None: "none key"},
    {"nul": "a\x00b", "key\x00": 1},
    {"surrogate": "a\ud800b"},
    {"astral": "smile \U0001f600", "accents": "héllo wörld", "cjk": "漢字"},
    {"astral deep": _deep(70, "\U0001f600")},
    _deep(70, "plain deep"),
    _deep(300, 1),
    {"backslash": "C:\\users\\data", "quote": 'say "hi"', "controls": "a\nb\tc\r\x01\x1f"},
    {"the word": "null and void"},
    (1, 2, ("nested", "tuple")),
    {"decimal": Decimal("1.50"), "when": datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC), "id": uuid.UUID(int=7)},
    {"str enum": Colour.RED, "int enum": Level.HIGH, "dataclass": Point(1)},
    {"sub dict": type("Sub", (dict,), {})(a=1)},
    "\x00",
    1.0,
    -5,
]


def _as_jsonb(text: str):
    with connection.cursor() as cursor:
        cursor.execute("SELECT %s::jsonb::text", [text])
        return cursor.fetchone()[0]


@pytest.mark.django_db
@pytest.mark.parametrize("value", VALUES, ids=range(len(VALUES)))
def test_the_json_written_is_read_by_jsonb_as_the_json_of_before(value):
    try:
        expected = _as_jsonb(_jsonb_text_exact(value))
    except RecursionError:
        with pytest.raises(RecursionError):
            _jsonb_bytes(value)
        return
    assert _as_jsonb(_jsonb_bytes(value).decode()) == expected


def test_plain_json_takes_orjson_and_anything_else_the_json_of_before():
    assert _jsonb_bytes({"a": [1, "b"], "c": 1.5}) == b'{"a":[1,"b"],"c":1.5}'  # orjson's (no spaces)
    for value in ({"a": float("nan")}, {"a": 2**64}, {1: "a"}, {"a": "\x00"}, {"a": "\U0001f600"}, {"a": None}):
        assert _jsonb_bytes(value) == _jsonb_text_exact(value).encode()
