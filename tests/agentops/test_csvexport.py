"""The one CSV writer: text a spreadsheet would run is neutralised, empty stays empty,
numbers are numbers in plain notation, and what was written reads back."""

from __future__ import annotations

import csv
import io
from datetime import UTC, date, datetime
from decimal import Decimal

import pytest

from agentops.csvexport import cell, csv_lines, original_text

HOSTILE = [
    '=HYPERLINK("http://x")',
    "+1+1",
    "-1+cmd",
    "@SUM(A1)",
    "\t=1+1",
    "\r=1+1",
    "\n=1+1",
    "\t",
    " =1+1",
    "  \t @SUM(A1)",
    "\u00a0=1+1",
    "\u200b=1+1",
    "\x00=1+1",
    "\uff1d1+1",
    "'=already quoted",
]


def parsed(text: str) -> list[list[str]]:
    return list(csv.reader(io.StringIO(text, newline="")))


@pytest.mark.parametrize("text", HOSTILE)
def test_text_a_spreadsheet_would_run_starts_with_a_quote(text):
    written = cell(text)
    assert written == "'" + text
    assert original_text(written) == text


@pytest.mark.parametrize("text", ["plain", "a=b", "1-2", "email@example.com", '{"a": "=b"}', "  spaced"])
def test_ordinary_text_is_written_as_it_is(text):
    assert cell(text) == text


def test_empty_and_none_are_empty_cells():
    assert cell("") == "" and cell(None) == ""


@pytest.mark.parametrize(
    "value, written",
    [
        (Decimal("0E-9"), "0.000000000"),
        (Decimal("1.500000000"), "1.500000000"),
        (Decimal("1E+3"), "1000"),
        (Decimal("-2.5"), "-2.5"),
        (1e-07, "0.0000001"),
        (1e20, "100000000000000000000"),
        (-0.5, "-0.5"),
        (1.0, "1.0"),
        (-3, "-3"),
        (0, "0"),
    ],
)
def test_numbers_are_plain_and_negative_numbers_stay_numbers(value, written):
    assert cell(value) == written


def test_booleans_dates_and_json_values():
    assert cell(True) == "true" and cell(False) == "false"
    assert cell(date(2025, 1, 2)) == "2025-01-02"
    assert cell(datetime(2025, 1, 2, 3, 4, tzinfo=UTC)) == "2025-01-02T03:04:00+00:00"
    assert cell({"cost": Decimal("0E-9")}) == '{"cost": "0.000000000"}'
    assert cell(["=x"]) == '["=x"]'


def test_every_row_reads_back_to_what_was_written():
    rows = [[text, "", None, Decimal("0E-9"), -1, "ordinary"] for text in HOSTILE]
    back = parsed("".join(csv_lines(["text", "empty", "none", "cost", "delta", "plain"], rows)))
    assert back[0] == ["text", "empty", "none", "cost", "delta", "plain"]
    for row, (text, *rest) in zip(rows, back[1:], strict=True):
        assert original_text(text) == row[0]
        assert rest == ["", "", "0.000000000", "-1", "ordinary"]
