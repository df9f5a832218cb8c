"""The one CSV writer of the platform: every CSV download (the billing page, the staff
console's tables, experiment results and leaderboards) writes its cells here.

What a cell holds:

- ``None`` is an empty cell; an empty string stays empty.
- Numbers (int, float, Decimal) are written as numbers in plain notation, never with
  an exponent: a Decimal keeps the places it has (a cost summed from a 9-place column
  is ``0.000000000``, never ``0E-9``), a float is its shortest repr without exponent.
  A negative number is a number, not text, so it is written as it is (``-0.5``): a
  spreadsheet reads it as the number it is and runs nothing.
- Booleans are ``true`` / ``false``; dates and times ISO 8601; dicts and lists JSON.
- Text that a spreadsheet would run as a formula is neutralised by a leading ``'``:
  text whose first character is ``= + - @`` (or their full-width forms), a tab or a
  carriage return or line feed, and text that reaches one of ``= + - @`` after leading
  whitespace or invisible (control or format) characters. So ``"-5"`` *as text* is
  written ``'-5``: only values that are numbers are written as numbers.
- Text that itself starts with ``'`` gets one more, so the rule reverses without doubt:
  a cell that starts with ``'`` had one ``'`` added (``original_text``).
"""

from __future__ import annotations

import csv
import datetime
import io
import json
import unicodedata
from collections.abc import Iterable, Iterator
from decimal import Decimal
from typing import Any

from django.http import HttpResponse

FORMULA_STARTS = frozenset("=+-@\uff1d\uff0b\uff0d\uff20")
# A cell starting with one of these can hide a formula from a reader's eye or, in some
# spreadsheets, start one.
CONTROL_STARTS = frozenset("\t\r\n")
QUOTE = "'"


def plain_number(value: int | float | Decimal) -> str:
    """A number as text without an exponent: ``Decimal("0E-9")`` is ``0.000000000``,
    ``1e-07`` is ``0.0000001``; NaN and infinities as Python writes them."""
    if isinstance(value, int):
        return str(value)
    number = value if isinstance(value, Decimal) else Decimal(repr(value))
    if not number.is_finite():
        return str(value)
    return format(number, "f")


def _leading_invisible(character: str) -> bool:
    return character.isspace() or unicodedata.category(character)[0] in "CZ"


def is_formula_risk(text: str) -> bool:
    """Whether a spreadsheet could take ``text`` for a formula (see the module's rules)."""
    if not text:
        return False
    if text[0] in CONTROL_STARTS:
        return True
    for character in text:
        if not _leading_invisible(character):
            return character in FORMULA_STARTS
    return False


def neutral_text(text: str) -> str:
    """``text`` safe to open in a spreadsheet: a leading ``'`` when it could be a
    formula or itself starts with ``'``."""
    if text.startswith(QUOTE) or is_formula_risk(text):
        return QUOTE + text
    return text


def original_text(cell: str) -> str:
    """The text a cell was written from (``neutral_text`` reversed)."""
    return cell[1:] if cell.startswith(QUOTE) else cell


def _json_default(value: Any) -> Any:
    if isinstance(value, Decimal):
        return plain_number(value)
    if hasattr(value, "isoformat"):
        return value.isoformat()
    raise TypeError(f"{type(value).__name__} is not JSON serializable")


def to_json(value: Any) -> str:
    """``value`` as JSON text; Decimals as plain-number strings, dates as ISO 8601."""
    return json.dumps(value, ensure_ascii=False, default=_json_default)


def cell(value: Any) -> str:
    """One value as the text of its cell (the module's rules)."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float | Decimal):
        return plain_number(value)
    if isinstance(value, datetime.date | datetime.time):  # datetime is a date
        return value.isoformat()
    if isinstance(value, dict | list | tuple):
        value = to_json(value)
    return neutral_text(str(value))


def csv_lines(header: list[str], rows: Iterable[Iterable[Any]]) -> Iterator[str]:
    """The header line, then one line per row, each cell written by ``cell``; lines are
    produced as the rows are read, so a long export can stream."""
    buffer = io.StringIO()
    writer = csv.writer(buffer)

    def line(values: Iterable[Any]) -> str:
        buffer.seek(0)
        buffer.truncate()
        writer.writerow([cell(value) for value in values])
        return buffer.getvalue()

    yield line(header)
    for row in rows:
        yield line(row)


def csv_response(filename: str, header: list[str], rows: Iterable[Iterable[Any]]) -> HttpResponse:
    """A CSV download named ``filename`` of ``rows`` under ``header`` (read at once)."""
    response = HttpResponse("".join(csv_lines(header, rows)), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="{filename}"'
    response["Cache-Control"] = "no-store"
    return response
