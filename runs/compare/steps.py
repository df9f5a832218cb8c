"""The steps section of a comparison: the aligned pairs (``runs.compare.alignment``)
as rows a person reads, and how many of each status.

A pair is ``same`` when nothing compared (``StepItem.compared``) differs, else
``changed``, with its differences as paths (at most ``MAX_PAIR_CHANGES``, then a
flag). Response ids, timestamps and usage of an LLM call are left out: they differ in
every call. A different model alone does not make a pair ``changed``; each side names
its model. Steps only in run b are ``added``, only in run a ``removed``.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from typing import Any

from runs.compare.alignment import aligned_items
from runs.compare.items import StepItem
from runs.compare.values import PREVIEW_CHARS, answer_preview, decimal_text, equal, json_changes
from runs.models import Step
from runs.views import display

SAME, CHANGED, ADDED, REMOVED = "same", "changed", "added", "removed"
# Differences listed per step pair; beyond, a flag says so.
MAX_PAIR_CHANGES = 50
ERROR_CHARS = 500


def align_steps(items_a: Sequence[StepItem], items_b: Sequence[StepItem]) -> list[dict]:
    """The two step sequences aligned into pairs, in order (``runs.compare.alignment``)."""
    return [step_pair(a, b) for a, b in aligned_items(items_a, items_b)]


def step_pair(a: StepItem | None, b: StepItem | None) -> dict:
    """One row of the alignment: its status, both sides, and what differs between them."""
    item = b if b is not None else a
    pair: dict[str, Any] = {
        "kind": item.kind,
        "name": item.name,
        "a": step_summary(a) if a is not None else None,
        "b": step_summary(b) if b is not None else None,
        "differences": [],
        "differences_truncated": False,
    }
    if a is None or b is None:
        pair["status"] = ADDED if a is None else REMOVED
        return pair
    values_b = b.compared()
    room = MAX_PAIR_CHANGES
    for field, value_a in a.compared().items():
        if equal(value_a, values_b[field]):
            continue
        if room <= 0:
            pair["differences_truncated"] = True
            break
        changes, more = json_changes(value_a, values_b[field], field=field, limit=room)
        pair["differences"] += changes
        pair["differences_truncated"] = pair["differences_truncated"] or more
        room -= len(changes)
    pair["status"] = CHANGED if pair["differences"] or pair["differences_truncated"] else SAME
    return pair


def step_summary(item: StepItem) -> dict:
    """One side of a pair: which step (or tool call) it is and a one-line preview."""
    step, call = item.step, item.call
    if item.kind == Step.Kind.TOOL:
        preview = display.compact_json(item.arguments, PREVIEW_CHARS)
        outcome = item.error or display.compact_json(item.result, PREVIEW_CHARS)
    elif item.kind == Step.Kind.LLM:
        preview = step.model
        outcome = item.error or answer_preview(item.answer)
    else:
        preview = display.compact_json(step.compared_input, PREVIEW_CHARS)
        outcome = item.error or display.compact_json(step.output, PREVIEW_CHARS)
    return {
        "position": item.position,
        "step_id": step.pk if step is not None else None,
        "tool_call_id": call.pk if call is not None else None,
        "span_id": step.span_id if step is not None else call.call_id,
        "kind": item.kind,
        "name": item.name,
        "status": step.status if step is not None else ("error" if call.error else "ok"),
        "error": item.error[:ERROR_CHARS],
        "model": step.model if step is not None else "",
        "duration_ms": step.duration_ms if step is not None else None,
        "input_tokens": step.input_tokens if step is not None else 0,
        "output_tokens": step.output_tokens if step is not None else 0,
        "cost": decimal_text(step.cost) if step is not None else None,
        "preview": preview,
        "outcome": outcome,
    }


def alignment_summary(pairs: Iterable[dict]) -> dict[str, int]:
    counts = {SAME: 0, CHANGED: 0, ADDED: 0, REMOVED: 0}
    for pair in pairs:
        counts[pair["status"]] += 1
    return counts
