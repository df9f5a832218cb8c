"""Two texts compared as a person reads them: word by word inline (``word_diff``),
line by line side by side (``side_by_side``), and the runs' final outputs with both
(``output_diff``), JSON outputs also path by path.

Bounded work: a text is compared up to ``MAX_TEXT_CHARS`` (flagged ``truncated``),
and ``SequenceMatcher``, quadratic on texts full of repeats, only runs on stretches
within its budgets; a larger stretch is split by lines first, and a block still too
large is shown deleted and inserted whole. Pure: no queries.
"""

from __future__ import annotations

import json
import re
from difflib import SequenceMatcher
from typing import Any

from runs.compare.values import MAX_CHANGES, equal, json_changes
from runs.views import display

# A final output longer than this (as text) is compared up to here, flagged ``truncated``.
MAX_TEXT_CHARS = 20_000
# Word diffs of at most this many tokens x tokens run as one diff; a larger stretch is
# first split by lines, since SequenceMatcher is quadratic on texts full of repeats.
WORD_DIFF_BUDGET = 1_000_000
# Line diffs beyond this many lines x lines let difflib ignore very common lines.
LINE_DIFF_BUDGET = 4_000_000

# A word (letters, digits, underscore), a run of whitespace, or one other character.
TOKEN = re.compile(r"\w+|\s+|[^\w\s]")


def tokenize(text: str) -> list[str]:
    return TOKEN.findall(text)


def word_diff(a: str, b: str) -> list[dict]:
    """``a`` turned into ``b`` as ``{"op": "equal"|"delete"|"insert", "text"}`` segments
    over words and whitespace; neighbouring segments never share an op, and the
    ``equal`` and ``delete`` texts spell ``a``, the ``equal`` and ``insert`` texts ``b``."""
    segments: list[dict] = []
    _token_diff(tokenize(a), tokenize(b), segments)
    return segments


def _emit(segments: list[dict], op: str, text: str) -> None:
    if not text:
        return
    if segments and segments[-1]["op"] == op:
        segments[-1]["text"] += text
    else:
        segments.append({"op": op, "text": text})


def _token_diff(ta: list[str], tb: list[str], segments: list[dict]) -> None:
    start = 0
    while start < len(ta) and start < len(tb) and ta[start] == tb[start]:
        start += 1
    end = 0
    while end < len(ta) - start and end < len(tb) - start and ta[-1 - end] == tb[-1 - end]:
        end += 1
    middle_a, middle_b = ta[start : len(ta) - end], tb[start : len(tb) - end]
    _emit(segments, "equal", "".join(ta[:start]))
    if len(middle_a) * len(middle_b) <= WORD_DIFF_BUDGET:
        for tag, a1, a2, b1, b2 in SequenceMatcher(None, middle_a, middle_b, autojunk=False).get_opcodes():
            if tag == "equal":
                _emit(segments, "equal", "".join(middle_a[a1:a2]))
            else:
                _emit(segments, "delete", "".join(middle_a[a1:a2]))
                _emit(segments, "insert", "".join(middle_b[b1:b2]))
    else:
        _large_diff("".join(middle_a), "".join(middle_b), segments)
    _emit(segments, "equal", "".join(ta[len(ta) - end :]))


def _large_diff(a: str, b: str, segments: list[dict]) -> None:
    """A long stretch: lines first, then words inside each changed block that fits the
    budget; a block that does not is shown deleted and inserted whole."""
    lines_a, lines_b = a.splitlines(keepends=True), b.splitlines(keepends=True)
    if len(lines_a) <= 1 and len(lines_b) <= 1:
        _emit(segments, "delete", a)
        _emit(segments, "insert", b)
        return
    for tag, a1, a2, b1, b2 in _line_opcodes(lines_a, lines_b):
        block_a, block_b = "".join(lines_a[a1:a2]), "".join(lines_b[b1:b2])
        if tag == "equal":
            _emit(segments, "equal", block_a)
            continue
        ta, tb = tokenize(block_a), tokenize(block_b)
        if len(ta) * len(tb) <= WORD_DIFF_BUDGET:
            _token_diff(ta, tb, segments)
        else:
            _emit(segments, "delete", block_a)
            _emit(segments, "insert", block_b)


def _line_opcodes(lines_a: list[str], lines_b: list[str]) -> list[tuple]:
    # Past the budget, difflib's junk heuristic (ignore very common lines) keeps it fast.
    autojunk = len(lines_a) * len(lines_b) > LINE_DIFF_BUDGET
    return SequenceMatcher(None, lines_a, lines_b, autojunk=autojunk).get_opcodes()


def side_by_side(a: str, b: str) -> list[dict]:
    """The two texts as rows of lines: ``{"op": "equal"|"changed"|"removed"|"added",
    "a": {"number", "segments"} | None, "b": ...}``; a changed row's segments mark the
    words deleted from a's line and inserted in b's."""
    lines_a, lines_b = a.splitlines(), b.splitlines()
    rows: list[dict] = []
    for tag, a1, a2, b1, b2 in _line_opcodes(lines_a, lines_b):
        if tag == "equal":
            for k in range(a2 - a1):
                rows.append(_row("equal", a1 + k, lines_a[a1 + k], b1 + k, lines_b[b1 + k]))
            continue
        paired = min(a2 - a1, b2 - b1) if tag == "replace" else 0
        for k in range(paired):
            line_a, line_b = lines_a[a1 + k], lines_b[b1 + k]
            segments = word_diff(line_a, line_b)
            rows.append(
                {
                    "op": "changed",
                    "a": {"number": a1 + k + 1, "segments": [s for s in segments if s["op"] != "insert"]},
                    "b": {"number": b1 + k + 1, "segments": [s for s in segments if s["op"] != "delete"]},
                }
            )
        for k in range(a1 + paired, a2):
            rows.append(_row("removed", k, lines_a[k], None, None))
        for k in range(b1 + paired, b2):
            rows.append(_row("added", None, None, k, lines_b[k]))
    return rows


def _row(op: str, index_a: int | None, line_a: str | None, index_b: int | None, line_b: str | None) -> dict:
    segment_op = {"equal": "equal", "removed": "delete", "added": "insert"}[op]
    return {
        "op": op,
        "a": None if index_a is None else {"number": index_a + 1, "segments": [{"op": segment_op, "text": line_a}]},
        "b": None if index_b is None else {"number": index_b + 1, "segments": [{"op": segment_op, "text": line_b}]},
    }


def output_text(value: Any) -> str:
    """The text a person reads in a run's output: a string, the one text of an envelope
    (``{"answer": "..."}``, a chat's last message); other JSON indented, keys sorted, so
    a line diff of it reads well."""
    if value is None:
        return ""
    text = display.preview_text(value)
    structured = text[:1] in ("{", "[")
    if structured and not text.endswith("…"):
        try:
            parsed = json.loads(text)
        except ValueError:
            structured = False
        else:
            value = parsed if isinstance(value, str) else value
            structured = isinstance(parsed, dict | list)
    if not structured:
        return text
    try:
        return json.dumps(value, indent=2, sort_keys=True, ensure_ascii=False, default=str)
    except (ValueError, RecursionError):
        return text


def output_diff(output_a: Any, output_b: Any) -> dict:
    """The final outputs: both texts (capped), the inline word diff, the side-by-side
    lines, and for JSON outputs the structural differences."""
    text_a, text_b = output_text(output_a), output_text(output_b)
    cut_a, cut_b = text_a[:MAX_TEXT_CHARS], text_b[:MAX_TEXT_CHARS]
    changes, more = [], False
    if isinstance(output_a, dict | list) and isinstance(output_b, dict | list):
        changes, more = json_changes(output_a, output_b, field="output", limit=MAX_CHANGES)
    return {
        "equal": equal(output_a, output_b),
        "a": {"text": cut_a, "truncated": len(text_a) > MAX_TEXT_CHARS},
        "b": {"text": cut_b, "truncated": len(text_b) > MAX_TEXT_CHARS},
        "inline": word_diff(cut_a, cut_b),
        "side_by_side": side_by_side(cut_a, cut_b),
        "changes": changes,
        "changes_truncated": more,
    }
