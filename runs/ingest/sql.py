"""How rows reach PostgreSQL: one upsert per table, keyed by the client-visible id.

A few rows (the executor's batches) go as one INSERT from jsonb for every table at once;
many go through COPY into a temporary table, then one INSERT ... ON CONFLICT. Rows of
runs the batch itself created cannot conflict with anything (``copy_new``): they go by
COPY straight into their table, PostgreSQL's fastest way in. A table whose every column
type psycopg can write in binary (the steps, messages, tool calls and snapshots; not
the runs, whose search column is a ``tsvector``) is copied in PostgreSQL's binary format:
times, numbers and amounts go as their bytes, not formatted as text by psycopg and parsed
again by PostgreSQL, and text and JSON are not escaped. Statements and column types are
read once per process (cached), so psycopg prepares the statements once. Values are made
storable on the way: JSON encoded by ``_jsonb_bytes``, text cleaned of what PostgreSQL
refuses (``runs.events``' cleaners).
"""

from __future__ import annotations

import json
import math
import re
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import cache
from operator import itemgetter
from typing import Any

import orjson
from django.db import connection
from django.db.models import JSONField
from psycopg import ProgrammingError, postgres
from psycopg.adapt import PyFormat
from psycopg.pq import Format
from psycopg.types.json import Jsonb

from runs.events import clean_text, json_safe

# One encoder for every document: json.dumps() with any option builds a new one per call.
_STRICT_JSON = json.JSONEncoder(allow_nan=False)
# orjson (several times faster) only for values it encodes exactly as _STRICT_JSON would
# be read by jsonb: subclasses of str, int, dict and list, dataclasses and datetimes are
# refused (ours turns them into their text through json_safe, or refuses them).
_ORJSON_OPTIONS = orjson.OPT_PASSTHROUGH_SUBCLASS | orjson.OPT_PASSTHROUGH_DATACLASS | orjson.OPT_PASSTHROUGH_DATETIME
# In orjson's text, what must take json's path (_needs_recheck): "null" (orjson writes
# NaN and Infinity as null); an escape "\u" (json's path looks again at an escaped NUL,
# and at "\ud": json's escape of an astral character or an unpaired surrogate, or a
# backslash before "ud" in a text); a character beyond the BMP (which json escapes as
# two surrogates). Separate searches: one regular expression of them all is much slower.
# ``find``, not ``in``: CPython's ``bytes in bytes`` first tries the needle as an integer
# (a byte value) and raises and clears a TypeError, with its formatted message, per call.
# The searches cost five times orjson's encoding of the document (1.5 us of a 1 kB
# attributes object): a backslash is looked for alone first (one byte: memchr, and most
# documents have none), and "null" from the end (``rfind``: half the time of ``find``
# over JSON text, where "n" and "u" are everywhere).
_ASTRAL = re.compile(rb"[\xf0-\xf4]")


def _needs_recheck(encoded: bytes) -> bool:
    return (
        encoded.rfind(b"null") != -1
        or (encoded.find(b"\\") != -1 and encoded.find(b"\\u") != -1)
        or (not encoded.isascii() and _ASTRAL.search(encoded) is not None)
    )


def _jsonb_text_exact(value: Any) -> str:
    try:
        text = _STRICT_JSON.encode(value)
    except (ValueError, TypeError):
        text = None
    # Escaped: a NUL is \u0000; an unpaired surrogate, like every astral character, \udXXX.
    if text is None or "\\u0000" in text or "\\ud" in text:
        text = _STRICT_JSON.encode(json_safe(value))
    return text


_EMPTY_JSON = {dict: b"{}", list: b"[]"}


def _jsonb_bytes(value: Any, checked: bool = False) -> bytes:
    """``value`` as JSON that ``jsonb`` takes, UTF-8 encoded (as a binary COPY and
    psycopg's ``Jsonb`` send it). Callers other than the OTLP mapping and the batch API
    (which clean or refuse them) may hand over NaN, Infinity, NUL characters or unpaired
    surrogates (a webhook tool's answer, say): jsonb refuses them, and the whole batch
    would fail. They are cleaned as the OTLP mapping cleans them
    (``runs.events.json_safe``).

    Encoded by orjson (a third of the write's Python was this encoding with ``json``),
    unless orjson refuses the value (integers beyond 64 bits, keys that are not text,
    unpaired surrogates, the types refused by ``_ORJSON_OPTIONS``) or its text holds
    what ``_needs_recheck`` finds: then as before, by ``json`` and ``json_safe``. Either way
    jsonb stores the same value (orjson writes no spaces and leaves non-ASCII characters
    unescaped; jsonb keeps neither). One difference: an ``Enum`` member that is neither
    text nor a number is stored as its value (orjson) where ``json_safe`` stored its name.

    ``checked``: ``value`` is already as ``runs.events.json_safe`` makes it (no NaN or
    Infinity, NUL character or unpaired surrogate: what the OTLP mapping produces), so
    ``_needs_recheck``'s searches (2.3 us per span of bench/ingest_otlp.py's traces),
    which only find what such a value cannot hold, are skipped. What orjson refuses (an
    integer beyond 64 bits) still takes json's path."""
    if (empty := _EMPTY_JSON.get(value.__class__)) is not None and not value:
        return empty  # every step's events and modality counts, most messages' tool calls
    try:
        encoded = orjson.dumps(value, option=_ORJSON_OPTIONS)
    except TypeError:  # orjson.JSONEncodeError among them
        return _jsonb_text_exact(value).encode()
    if not checked and _needs_recheck(encoded):
        return _jsonb_text_exact(value).encode()
    return encoded


def storable(value: Any, is_json_column: bool) -> Any:
    """``value`` as psycopg takes it for a column: JSON wrapped as Jsonb, text cleaned of
    what PostgreSQL would refuse."""
    if value is None:
        return None
    if is_json_column:
        return Jsonb(value, dumps=_jsonb_bytes)
    if isinstance(value, str):
        return clean_text(value)
    if isinstance(value, list):  # an array of text
        return [clean_text(item) if isinstance(item, str) else item for item in value]
    return value


def records_parameter(records: list[dict], json_names: frozenset[str]) -> Jsonb:
    """``records`` as one jsonb parameter (a JSON array), for ``jsonb_to_recordset``: one
    parameter instead of an array per column, which psycopg dumps element by element in
    Python (4 ms for a batch of 64 new runs). The values named in ``json_names`` go as
    their own JSON, each encoded alone by ``_jsonb_bytes`` as a jsonb column's value is;
    the others as ``storable`` makes them for their column (text cleaned, times in ISO
    8601); None values are left out, which the record reads as NULL."""

    def encode(records: list[dict]) -> bytes:
        return orjson.dumps(
            [
                {
                    name: orjson.Fragment(_jsonb_bytes(value)) if name in json_names else _record_value(value)
                    for name, value in record.items()
                    if value is not None
                }
                for record in records
            ],
            default=str,
        )

    return Jsonb(records, dumps=encode)


def _record_value(value: Any) -> Any:
    """A value of a column that is not JSON, as ``storable`` makes it; a float that is not
    finite as its text (JSON has no NaN: orjson would write null), as PostgreSQL reads it."""
    if value.__class__ is str and value.isascii() and "\x00" not in value:
        return value  # the common value, without storable's call
    if value.__class__ is float and not math.isfinite(value):
        return "NaN" if value != value else ("Infinity" if value > 0 else "-Infinity")
    return storable(value, False)


# Up to this many rows, one INSERT from jsonb; beyond, COPY through a temporary table.
SMALL_UPSERT_ROWS = 20


@dataclass
class Upsert:
    """Rows (dicts by attribute name) to insert into ``model``'s table, or to update on
    ``unique_fields`` (only ``update_fields``; with none, existing rows are left alone)."""

    model: type
    rows: list[dict]
    unique_fields: tuple[str, ...]
    update_fields: tuple[str, ...]
    # The rows' JSON values are already as runs.events.json_safe makes them (the OTLP
    # mapping's): a COPY encodes them without looking for what they cannot hold.
    json_checked: bool = False


_JSONB, _BYTEA = postgres.types["jsonb"].oid, postgres.types["bytea"].oid
# psycopg's dumper of bytes in binary (its C one with psycopg[binary]): registered by oid
# on the COPY's cursor, since the one found for ``bytea`` by default is the Python dumper
# of the DB-API's ``Binary`` wrapper.
_BYTES_BINARY = postgres.adapters.get_dumper(bytes, PyFormat.BINARY)


def _jsonb_copy_bytes(value: Any) -> bytes:
    """A jsonb value in a binary COPY: the format's version byte, then its JSON
    (``_jsonb_bytes``). The column is declared to psycopg as ``bytea`` (``binary_types``),
    whose dumper (C) writes the bytes as they are: a binary COPY carries no types, only
    each field's bytes, and a Python dumper for jsonb cost a call per value."""
    return b"\x01" + _jsonb_bytes(value)


def _checked_jsonb_copy_bytes(value: Any) -> bytes:
    return b"\x01" + _jsonb_bytes(value, checked=True)


@dataclass(frozen=True)
class UpsertSQL:
    fields: list
    columns: str
    table: str
    on_conflict: str
    # The type oid psycopg writes each of ``fields``' columns as, when it can write them
    # all in binary (jsonb as bytea: _jsonb_copy_bytes), else None: COPY of this table
    # goes as text.
    binary_types: list[int] | None


def _binary_types(table: str, fields: list) -> list[int] | None:
    """The columns' types as PostgreSQL has them, if each has a binary dumper."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT attname, atttypid FROM pg_attribute WHERE attrelid = %s::regclass AND attnum > 0",
            [table],
        )
        type_of = dict(cursor.fetchall())
        adapters = cursor.cursor.adapters
    types = [_BYTEA if type_of[f.column] == _JSONB else type_of[f.column] for f in fields]
    for oid in set(types):
        try:
            adapters.get_dumper_by_oid(oid, Format.BINARY)
        except ProgrammingError:  # no dumper in binary (tsvector)
            return None
    return types


@cache
def upsert_sql(
    model, unique_fields: tuple[str, ...], update_fields: tuple[str, ...], with_ids: bool = False
) -> UpsertSQL:
    """The parts of an upsert's SQL that depend only on its model and fields (the column
    types read from the database at the first call). ``with_ids``: the rows give their
    primary key too (``copy_new``)."""
    quote, meta = connection.ops.quote_name, model._meta
    fields = [f for f in meta.concrete_fields if with_ids or not f.primary_key]
    conflict = ", ".join(quote(meta.get_field(name).column) for name in unique_fields)
    updates = ", ".join(
        f"{column} = EXCLUDED.{column}" for column in (quote(meta.get_field(name).column) for name in update_fields)
    )
    return UpsertSQL(
        fields=fields,
        columns=", ".join(quote(f.column) for f in fields),
        table=quote(meta.db_table),
        on_conflict=f"ON CONFLICT ({conflict}) " + (f"DO UPDATE SET {updates}" if updates else "DO NOTHING"),
        binary_types=_binary_types(meta.db_table, fields),
    )


def _json_copy_text(value: Any) -> str:
    """A JSON column's value for a COPY in text format: its text (PostgreSQL parses it
    as jsonb), without psycopg's Jsonb wrapper around the same encoding."""
    return _jsonb_bytes(value).decode()


def _text_value(value: Any) -> Any:
    # The common case first: text with nothing PostgreSQL refuses.
    if value.__class__ is str and value.isascii() and "\x00" not in value:
        return value
    if not isinstance(value, str | list):
        # A number or the like in a text column: its text, as PostgreSQL would take it
        # (a binary COPY takes only text for a text column).
        return str(value)
    return storable(value, False)


def _aware(value: datetime) -> datetime:
    # A naive time is UTC, as PostgreSQL reads it in text (Django's sessions are in UTC);
    # the binary format takes only aware times for a timestamptz column.
    return value.replace(tzinfo=UTC) if value.tzinfo is None else value


def _row_writer(sql: UpsertSQL, json_checked: bool = False):
    """A function of a row (a dict by attribute name) to its values for a COPY in the
    order of ``sql.fields`` (``storable``'s, JSON as its encoded bytes, or as text for a
    table copied in text format); fields a row lacks take their default. Only text and
    JSON columns are looked at, and times for a binary COPY: numbers and ids go as they
    are. ``json_checked``: ``Upsert.json_checked``."""
    binary = sql.binary_types is not None
    if binary:
        json_value = _checked_jsonb_copy_bytes if json_checked else _jsonb_copy_bytes
    else:
        json_value = _json_copy_text
    columns = []
    for f in sql.fields:
        is_text = f.get_internal_type() in ("CharField", "TextField", "SlugField")
        if isinstance(f, JSONField):
            convert = json_value
        elif is_text or f.get_internal_type() == "ArrayField":
            convert = _text_value
        elif binary and f.get_internal_type() == "DateTimeField":
            convert = _aware
        else:
            convert = None
        columns.append((f.attname, f.get_default(), convert, is_text))

    every_field = itemgetter(*(name for name, _, _, _ in columns))
    text_indexes = [index for index, (_, _, _, is_text) in enumerate(columns) if is_text]
    # The text columns' values at once, as a tuple (itemgetter of one index gives the value).
    texts_of = itemgetter(*text_indexes) if len(text_indexes) > 1 else lambda values: [values[i] for i in text_indexes]
    others = [(index, convert) for index, (_, _, convert, is_text) in enumerate(columns) if convert and not is_text]

    def values_of(row: dict) -> list:
        try:
            # The row builders give every field: read at once, in C.
            values = list(every_field(row))
        except KeyError:
            values = [row.get(name, default) for name, default, _, _ in columns]
        # The common row: every text column ASCII text without NUL, seen in one string
        # (a step row has ten text columns); else each column is looked at.
        try:
            joined = "".join(texts_of(values))
        except TypeError:  # a None, or a value that is not text
            joined = "\x00"
        if not joined.isascii() or "\x00" in joined:
            for index in text_indexes:
                value = values[index]
                if value is not None and not (value.__class__ is str and value.isascii() and "\x00" not in value):
                    values[index] = _text_value(value)
        for index, convert in others:
            value = values[index]
            if value is not None:
                values[index] = convert(value)
        return values

    return values_of


@contextmanager
def _copy(cursor, table: str, sql: UpsertSQL) -> Iterator:
    """A COPY of ``sql``'s columns into ``table`` (its own, or a temporary one like it),
    in binary format when the table has ``binary_types``."""
    if sql.binary_types is None:
        with cursor.copy(f"COPY {table} ({sql.columns}) FROM STDIN") as copy:
            yield copy
        return
    cursor.adapters.register_dumper(None, _BYTES_BINARY)
    with cursor.copy(f"COPY {table} ({sql.columns}) FROM STDIN (FORMAT BINARY)") as copy:
        copy.set_types(sql.binary_types)
        yield copy


def copy_new(upsert: Upsert, *, with_ids: bool = False) -> None:
    """Write rows that cannot exist yet, by COPY straight into their table: those of
    runs this transaction created, which no other transaction sees until it commits (and
    ``ingest()`` keeps one row per key). Their ids are the table's to assign, or
    ``with_ids``, the rows' own ``id`` (from ``reserve_ids``)."""
    if not upsert.rows:
        return
    sql = upsert_sql(upsert.model, upsert.unique_fields, upsert.update_fields, with_ids)
    values_of = _row_writer(sql, upsert.json_checked)
    with connection.cursor() as cursor, _copy(cursor.cursor, sql.table, sql) as copy:
        for row in upsert.rows:
            copy.write_row(values_of(row))


@cache
def _reserve_ids_sql(table: str) -> str:
    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_get_serial_sequence(%s, 'id')", [table])
        (sequence,) = cursor.fetchone()
    literal = "'" + sequence.replace("'", "''") + "'"
    # One text of every id (split in C) rather than a row or an array element each.
    return f"SELECT string_agg(nextval({literal}::regclass)::text, ',') FROM generate_series(1, %s)"  # noqa: S608


def reserve_ids(model, count: int) -> list[int]:
    """``count`` new ids of ``model``'s table, drawn from its sequence as an insert would
    draw them, for rows written with their id (``copy_new(with_ids=True)``)."""
    if count <= 0:
        return []
    with connection.cursor() as cursor:
        cursor.execute(_reserve_ids_sql(model._meta.db_table), [count])
        (ids,) = cursor.fetchone()
    return list(map(int, ids.split(",")))


def copy_upsert(*upserts: Upsert) -> None:
    """Write ``upserts``. Many rows go through COPY into a temporary table and one INSERT
    ... ON CONFLICT DO UPDATE: the fastest way PostgreSQL takes many rows of large JSON
    (about 3x bulk_create's, measured with bench/ingest_otlp.py). A few rows (the
    executor's batches) go as INSERT ... SELECT from one jsonb parameter per table
    (``records_parameter``, read by ``jsonb_populate_recordset`` as the table's own row
    type), those of every table in one statement: one round trip instead of one per
    table, or the four statements of the COPY path; and the same statement for every
    batch of the same tables, which psycopg parses once per process and PostgreSQL
    prepares, where a multi-row VALUES sent every column of every row as a parameter
    (more than psycopg keeps a parse for) and was planned again each time. Values are
    written as the builders above made them, JSON encoded; only what PostgreSQL would
    refuse (NUL characters, unpaired surrogates, NaN) is cleaned on the way."""
    small, params = [], []
    with connection.cursor() as cursor:
        for upsert in upserts:
            if not upsert.rows:
                continue
            sql = upsert_sql(upsert.model, upsert.unique_fields, upsert.update_fields)
            if len(upsert.rows) <= SMALL_UPSERT_ROWS:
                small.append(_recordset_upsert_sql(upsert.model, upsert.unique_fields, upsert.update_fields))
                params.append(records_parameter(_records(sql, upsert.rows), _json_columns(upsert.model)))
                continue
            temp = connection.ops.quote_name(f"_ingest_{upsert.model._meta.db_table}")
            # One temporary table per connection, emptied before each use and at commit.
            cursor.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {temp} ON COMMIT DELETE ROWS AS "  # noqa: S608 - quoted constants
                f"SELECT {sql.columns} FROM {sql.table} WITH NO DATA"
            )
            cursor.execute(f"TRUNCATE {temp}")
            values_of = _row_writer(sql, upsert.json_checked)
            with _copy(cursor.cursor, temp, sql) as copy:
                for row in upsert.rows:
                    copy.write_row(values_of(row))
            cursor.execute(
                f"INSERT INTO {sql.table} ({sql.columns}) SELECT {sql.columns} FROM {temp} {sql.on_conflict}"  # noqa: S608
            )
        if len(small) == 1:
            cursor.execute(small[0], params)
        elif small:
            # Data-modifying WITH queries run to their end even when nothing reads them.
            ctes = ", ".join(f"upsert_{i} AS ({statement})" for i, statement in enumerate(small))
            cursor.execute(f"WITH {ctes} SELECT 1", params)  # noqa: S608 - cached statements of quoted names


@cache
def _recordset_upsert_sql(model, unique_fields: tuple[str, ...], update_fields: tuple[str, ...]) -> str:
    """The upsert of ``upsert_sql`` from one jsonb parameter: an array of records keyed by
    column, read as the table's row type (each value through its column's type, as an
    INSERT of it would be), in the array's order."""
    sql = upsert_sql(model, unique_fields, update_fields)
    return (
        f"INSERT INTO {sql.table} ({sql.columns}) SELECT {sql.columns} "  # noqa: S608 - quoted constants
        f"FROM jsonb_populate_recordset(NULL::{sql.table}, %s::jsonb) WITH ORDINALITY AS batch "
        f"ORDER BY batch.ordinality {sql.on_conflict}"
    )


def _records(sql: UpsertSQL, rows: list[dict]) -> list[dict]:
    """``rows`` (dicts by attribute name) as records keyed by column, every field of
    ``sql`` present: those a row lacks take their default (worked out once per call, as
    for a COPY)."""
    fields = [(f.attname, f.column, f.get_default()) for f in sql.fields]
    return [{column: row.get(name, default) for name, column, default in fields} for row in rows]


@cache
def _json_columns(model) -> frozenset[str]:
    return frozenset(f.column for f in model._meta.concrete_fields if isinstance(f, JSONField))
