"""Keyset ("older than this row") pagination for the runs list: the next page starts
after the last row's sort value and id, so every page costs the same index range scan
however deep a person pages (never OFFSET on a table of millions of runs).

PostgreSQL sorts NULL last going up and first going down; the page condition follows
that rule, so runs without a start time or latency are neither lost nor repeated.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db.models import Q, QuerySet
from django.utils.dateparse import parse_datetime

from runs.selectors import SORTABLE

NULL = "null"
# The type of each sortable column, to read a cursor's value back.
COLUMN_TYPES = {
    "started_at": datetime,
    "total_cost": Decimal,
    "latency_ms": int,
    "output_tokens": int,
    "last_started_at": datetime,
}


@dataclass(frozen=True)
class Page:
    rows: list
    next_cursor: str | None


def encode(value: Any) -> str:
    if value is None:
        return NULL
    if isinstance(value, datetime):
        return value.isoformat()
    return str(value)


def decode(column: str, text: str) -> Any:
    """The cursor's value for ``column``; ValueError when it is not one."""
    if text == NULL:
        return None
    kind = COLUMN_TYPES[column]
    if kind is datetime:
        value = parse_datetime(text)
        if value is None:
            raise ValueError(text)
        return value
    if kind is Decimal:
        try:
            return Decimal(text)
        except InvalidOperation:
            raise ValueError(text) from None
    return int(text)


def after(column: str, descending: bool, value: Any, row_id: Any, tie: str = "id") -> Q:
    """Rows that come after (value, row_id) in ``ORDER BY column [DESC], tie [DESC]``."""
    past_id = Q(**{f"{tie}__lt": row_id}) if descending else Q(**{f"{tie}__gt": row_id})
    if value is None:
        same = Q(**{f"{column}__isnull": True}) & past_id
        # Going down NULLs come first, so every non-NULL row is after them.
        return same | Q(**{f"{column}__isnull": False}) if descending else same
    beyond = Q(**{f"{column}__lt" if descending else f"{column}__gt": value})
    same = Q(**{column: value}) & past_id
    condition = beyond | same
    # Going up NULLs come last, after every value.
    return condition if descending else condition | Q(**{f"{column}__isnull": True})


def paginate(queryset: QuerySet, *, sort: str, cursor: str | None, size: int) -> Page:
    """One page of ``queryset`` in ``sort`` order (a key of ``SORTABLE``), starting after
    ``cursor``; an unreadable cursor starts from the top."""
    column_spec, _id_spec = SORTABLE[sort]
    descending = column_spec.startswith("-")
    column = column_spec.lstrip("-")
    queryset = queryset.order_by(*SORTABLE[sort])
    if cursor:
        text, _, raw_id = cursor.rpartition("~")
        try:
            queryset = queryset.filter(after(column, descending, decode(column, text), int(raw_id)))
        except (ValueError, KeyError):
            pass
    rows = list(queryset[: size + 1])
    next_cursor = None
    if len(rows) > size:
        rows = rows[:size]
        last = rows[-1]
        next_cursor = f"{encode(getattr(last, column))}~{last.pk}"
    return Page(rows=rows, next_cursor=next_cursor)
