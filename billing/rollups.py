"""Sums of the ledger over a period of days, read from the fewest rows that give them.

``UsageDaily`` has a row per day and every dimension (project, agent, model, API key,
end user, category, unit): 90 days of a busy organization are tens of thousands of rows.
Its two rollups (``billing.models.LedgerRollup``, kept exact by triggers in PostgreSQL)
hold the same sums with fewer rows:

- ``UsageMonthly`` (every dimension but the day and the end user, per calendar month)
  for sums split by neither: a period is its months from here, corrected at either end by the days of those
  months outside the period (subtracted) or, when fewer, by the days inside it (added
  instead of the month); days after today count as nothing to read, since usage is not
  dated in the future (the rare row that is, is subtracted all the same);
- ``UsageDailyByModel`` (per organization, day, category, unit and model) for sums per
  day of those dimensions over the whole organization (the charts by model or category,
  energy per day);
- ``UsageDaily`` itself for the rest (per day by project or agent, one project per day,
  anything by end user).

Every source gives the same groups with the same sums: a group is listed when at least
one ``UsageDaily`` row of the period has it (``day_rows``), even if its sums are zero.
Money is ``numeric`` throughout (exact in any order of adding and subtracting); counts
come back as ``int``, costs as ``Decimal``.
"""

from __future__ import annotations

import calendar
from datetime import UTC, date, datetime, timedelta

from django.db import connection

from agentops.scoping import check_scope
from billing.ledger import MEASURES

# The measures that count (summed as ``int``); the others are money (``Decimal``).
COUNTS = ("input_tokens", "cached_input_tokens", "output_tokens", "steps", "unpriced_steps")
# What each source can be grouped and filtered by.
DAILY_DIMENSIONS = {"day", "project_id", "agent_name", "model", "api_key_id", "end_user_id", "category", "unit"}
MONTHLY_DIMENSIONS = DAILY_DIMENSIONS - {"day", "end_user_id"}
BY_MODEL_DIMENSIONS = {"day", "category", "unit", "model"}


def _months(start: date, end: date) -> list[date]:
    months, month = [], start.replace(day=1)
    while month <= end:
        months.append(month)
        month = (month + timedelta(days=32)).replace(day=1)
    return months


def _month_end(month: date) -> date:
    return month.replace(day=calendar.monthrange(month.year, month.month)[1])


def month_plan(start: date, end: date, *, today: date) -> tuple[list[date], list[tuple], list[tuple]]:
    """How to read the days ``start`` to ``end`` from the monthly rollup: ``(months,
    added, subtracted)``: the months whose rows to add, the ranges of days (first, last)
    to add from ``UsageDaily``, and those to subtract (days of an added month outside the
    period)."""
    months, added, subtracted = [], [], []
    for month in _months(start, end):
        last = _month_end(month)
        first_in, last_in = max(start, month), min(end, last)
        outside = [(month, first_in - timedelta(days=1))] if first_in > month else []
        outside += [(last_in + timedelta(days=1), last)] if last_in < last else []
        # Rows to read either way: a month's rows are about one day's (each key once);
        # days after today hold none.
        inside_days = (last_in - first_in).days + 1
        outside_days = sum(max(0, (min(to, today) - since).days + 1) for since, to in outside)
        if not outside or 1 + outside_days < inside_days:
            months.append(month)
            subtracted += outside
        else:
            added.append((first_in, last_in))
    return months, added, subtracted


def ledger_sums(
    *,
    organization_id: int,
    start: date,
    end: date,
    group_by: tuple[str, ...] = (),
    measures: tuple[str, ...] = MEASURES,
    where: dict | None = None,
    categories: tuple[str, ...] = (),
    without_empty_model: bool = False,
    today: date | None = None,
) -> list[dict]:
    """The ledger's ``measures`` summed over the days ``start`` to ``end`` (both
    included) of one organization, grouped by ``group_by`` (``UsageDaily`` column
    names), of the rows whose columns equal the values in ``where`` (None: NULL, as the
    ORM's ``field=None``), of the ``categories`` listed or all, without the rows with
    no model if asked: one dict per group, in no order. Only
    inside ``organization_scope`` of that organization (or ``dangerously_unscoped``),
    like a query of ``UsageDaily.objects``."""
    where = where or {}
    unknown = (set(group_by) | set(where)) - DAILY_DIMENSIONS
    if unknown or not set(measures) <= set(MEASURES):
        raise ValueError(f"cannot group or filter the ledger by {sorted(unknown)} or sum {measures}")
    check_scope(organization_id)
    filters, params = ["organization_id = %s"], [organization_id]
    for column, value in where.items():
        if value is None:
            filters.append(f"{column} IS NULL")
        else:
            filters.append(f"{column} = %s")
            params.append(value)
    if categories:
        filters.append("category = ANY(%s)")
        params.append(list(categories))
    if without_empty_model:
        filters.append("model <> ''")
    columns = ", ".join(group_by)
    selected = ", ".join([*group_by, *measures])
    negated = ", ".join([*group_by, *(f"-{m}" for m in measures)])
    parts: list[tuple[str, list]] = []

    def days_of(ranges) -> tuple[str, list]:
        days = " OR ".join("day BETWEEN %s AND %s" for _range in ranges)
        return f"{' AND '.join(filters)} AND ({days})", [*params, *(day for pair in ranges for day in pair)]

    if set(group_by) | set(where) <= MONTHLY_DIMENSIONS:
        months, added, subtracted = month_plan(start, end, today=today or datetime.now(UTC).date())
        if months:
            parts.append(
                (
                    f"SELECT {selected}, day_rows FROM billing_usagemonthly "  # noqa: S608 - constant names
                    f"WHERE {' AND '.join(filters)} AND month = ANY(%s::date[])",
                    [*params, months],
                )
            )
        if added:
            where, values = days_of(added)
            parts.append((f"SELECT {selected}, 1 FROM billing_usagedaily WHERE {where}", values))  # noqa: S608
        if subtracted:
            where, values = days_of(subtracted)
            parts.append((f"SELECT {negated}, -1 FROM billing_usagedaily WHERE {where}", values))  # noqa: S608
    else:
        by_model = "day" in group_by and set(group_by) | set(where) <= BY_MODEL_DIMENSIONS
        table, rows = ("billing_usagedailybymodel", "day_rows") if by_model else ("billing_usagedaily", "1")
        where, values = days_of([(start, end)])
        parts.append((f"SELECT {selected}, {rows} FROM {table} WHERE {where}", values))  # noqa: S608
    if not parts:
        return []  # a period that ends before it starts (a page's empty range) has no day
    sums = ", ".join(f"sum({m})::bigint AS {m}" if m in COUNTS else f"sum({m}) AS {m}" for m in measures)
    sql = (
        f"SELECT {columns + ', ' if columns else ''}{sums} "  # noqa: S608 - constant names
        f"FROM ({' UNION ALL '.join(part for part, _values in parts)}) AS parts ({selected}, day_rows) "
        f"{'GROUP BY ' + columns if columns else ''} HAVING sum(day_rows) > 0"
    )
    with connection.cursor() as cursor:
        cursor.execute(sql, [value for _part, values in parts for value in values])
        names = [column.name for column in cursor.description]
        return [dict(zip(names, row, strict=True)) for row in cursor.fetchall()]
