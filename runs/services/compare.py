"""The difference between any two runs of a project, as JSON-ready data: first the
settings they ran with that differ (model, parameters, system prompt, tools, tool
mode: what a replay changes), then their metrics with deltas, their steps aligned pair
by pair, their final outputs word by word and line by line, and their final memory
snapshots key by key.

It only reads. ``compare_runs`` costs a fixed number of queries whatever the runs' size
(steps, tool calls, final memory snapshots, the settings in the runs' state, and for an
ingested run its first model call and tool definitions), made through the tenant-scoped managers, and a
bounded amount of Python work: texts, value previews and change lists are capped, and
each cap leaves a ``truncated`` (or ``more``) flag in the answer.

How steps are aligned (documented for users in docs/runs.md#comparing-two-runs):

- Each run's steps are taken in execution order (start time, then id). The root step
  that the other steps hang from stands for the run itself (its output is the run's
  output, its totals the run's metrics), so it is left out. A tool call recorded
  without a tool step of its own counts as a tool step.
- Each step has a key: a tool step, its tool's name and its arguments as canonical
  JSON; any other step but an LLM call, its kind and name.
- The alignment pairs steps to the highest total score, in order (a global sequence
  alignment by dynamic programming, ``best_alignment``): a pair of steps with the same
  key scores 3, two LLM calls 2 (LLM calls pair by position: any with any, between the
  tools that anchor them), the same tool with other arguments 1; anything else does not
  pair. So the same tool called with other arguments at the same place is one
  ``changed`` pair showing its argument differences, not a removal and an addition,
  but never at the cost of a pair with equal keys. On ties, the first steps pair first.
  Runs too long to align this way within ``ALIGN_CELLS`` are first matched on equal
  keys with ``difflib.SequenceMatcher`` (an LLM call's key then being its position
  among the run's LLM calls), and aligned as above between those matches.
- A pair is ``same`` when nothing compared differs, else ``changed``: for tools the
  arguments, the result and the error; for LLM calls what the model answered (the
  message content and tool calls by name and arguments; response ids, timestamps and
  usage are left out, they differ in every call) and the error; for other steps their
  input, output and error. A different model alone does not make a pair ``changed``;
  each side names its model. Steps only in run b are ``added``, only in run a
  ``removed``.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from difflib import SequenceMatcher
from functools import cached_property
from typing import Any

from django.db.models import Case, F, Q, When
from django.db.models.fields.json import KeyTransform

from agentops.errors import NotFound
from agentops.jsonsafe import SHOWN_JSON_CHARS, json_from_text
from runs.execution import version_spec
from runs.fields import PayloadJSONField
from runs.models import MemorySnapshot, Run, Step, ToolCall
from runs.services.replay import chat_messages, tool_definitions

# The pages' payload helpers (JSON diff, previews, tool-call shapes) are pure functions;
# reusing them keeps a difference the same on the run page and here.
from runs.views import display

# A final output longer than this (as text) is compared up to here, flagged ``truncated``.
MAX_TEXT_CHARS = 20_000
# Word diffs of at most this many tokens x tokens run as one diff; a larger stretch is
# first split by lines, since SequenceMatcher is quadratic on texts full of repeats.
WORD_DIFF_BUDGET = 1_000_000
# Line diffs beyond this many lines x lines let difflib ignore very common lines.
LINE_DIFF_BUDGET = 4_000_000
# Differences listed per step pair, and for the memory and a JSON output; beyond, a flag says so.
MAX_PAIR_CHANGES = 50
MAX_CHANGES = 200
# A changed value longer than this as JSON is given as the start of its JSON text.
VALUE_CHARS = 1_000
PREVIEW_CHARS = 200
ERROR_CHARS = 500

SAME, CHANGED, ADDED, REMOVED = "same", "changed", "added", "removed"
# What a pair is worth to the alignment, which pairs steps to the highest total: a step
# with the same key (a tool with the same arguments, another step of the same kind and
# name), two LLM calls, the same tool with other arguments.
SAME_KEY_SCORE, LLM_SCORE, SAME_TOOL_SCORE = 3, 2, 1
# Beyond this many steps x steps (about 1,000 x 1,000: 0.2 s), alignment is anchored.
ALIGN_CELLS = 1_000_000
# Steps whose input is never compared (an LLM call's input is the whole conversation so
# far: large, and different as soon as anything before it differed).
INPUT_UNUSED_KINDS = (Step.Kind.LLM,)
STEP_COLUMNS = (
    "id",
    "run_id",
    "span_id",
    "parent_span_id",
    "kind",
    "name",
    "started_at",
    "duration_ms",
    "status",
    "error",
    "model",
    "input_tokens",
    "output_tokens",
    "cost",
    "output",
)
TOOL_CALL_COLUMNS = ("id", "run_id", "step_id", "call_id", "tool_name", "arguments", "result", "error", "started_at")


# --- Loading -------------------------------------------------------------------------------


@dataclass(eq=False)  # compared by identity: the steps' payloads can be large
class StepItem:
    """One unit of a run's step sequence: a step, its tool call, or a tool call alone."""

    kind: str
    name: str
    step: Step | None
    call: ToolCall | None
    position: int = 0
    key: tuple = ()

    @property
    def arguments(self) -> Any:
        if self.call is not None:
            return json_from_text(self.call.arguments, max_chars=SHOWN_JSON_CHARS)
        return json_from_text(self.step.compared_input, max_chars=SHOWN_JSON_CHARS) if self.step is not None else None

    @property
    def result(self) -> Any:
        return self.call.result if self.call is not None else self.step.output

    @property
    def error(self) -> str:
        if self.call is not None and self.call.error:
            return self.call.error
        if self.step is not None:
            return self.step.error or ("error" if self.step.status == Step.Status.ERROR else "")
        return ""

    @cached_property
    def answer(self) -> Any:
        """An LLM step's answer (``llm_answer``), worked out once: it parses tool arguments."""
        return llm_answer(self.step.output)

    @property
    def started_at(self) -> datetime | None:
        return self.step.started_at if self.step is not None else self.call.started_at

    def compared(self) -> dict[str, Any]:
        """The values a pair compares, by field name (see the module docstring)."""
        if self.kind == Step.Kind.TOOL:
            return {"arguments": self.arguments, "result": self.result, "error": self.error}
        if self.kind == Step.Kind.LLM:
            return {"output": self.answer, "error": self.error}
        return {"input": self.step.compared_input, "output": self.step.output, "error": self.error}


def load_step_items(runs: Sequence[Run]) -> dict[int, list[StepItem]]:
    """Each run's steps as aligned units, in execution order (two queries for all runs)."""
    run_ids = [run.pk for run in runs]
    steps = list(
        Step.objects.filter(run_id__in=run_ids)
        .only(*STEP_COLUMNS)
        .annotate(
            compared_input=Case(When(~Q(kind__in=INPUT_UNUSED_KINDS), then=F("input")), output_field=PayloadJSONField())
        )
        .order_by("run_id", "started_at", "id")
    )
    calls = list(
        ToolCall.objects.filter(run_id__in=run_ids).only(*TOOL_CALL_COLUMNS).order_by("run_id", "started_at", "id")
    )
    return {
        run_id: step_items(
            [step for step in steps if step.run_id == run_id], [call for call in calls if call.run_id == run_id]
        )
        for run_id in run_ids
    }


def step_items(steps: Sequence[Step], calls: Sequence[ToolCall]) -> list[StepItem]:
    """``steps`` and ``calls`` of one run as units in execution order, root left out, each
    tool step joined with its first tool call, each with its alignment key."""
    parents = {step.parent_span_id for step in steps if step.parent_span_id}
    kept = [
        step
        for step in steps
        # The root that other steps hang from is the run itself (see the module docstring).
        if step.parent_span_id or step.span_id not in parents or step.kind in (Step.Kind.LLM, Step.Kind.TOOL)
    ]
    tool_steps = {step.pk: step for step in kept if step.kind == Step.Kind.TOOL}
    call_of: dict[int, ToolCall] = {}
    lone_calls: list[ToolCall] = []
    for call in calls:
        if call.step_id in tool_steps and call.step_id not in call_of:
            call_of[call.step_id] = call
        else:
            lone_calls.append(call)

    items = []
    for step in kept:
        call = call_of.get(step.pk)
        name = call.tool_name if call is not None else step.name
        items.append(StepItem(kind=step.kind, name=name, step=step, call=call))
    items += [StepItem(kind=Step.Kind.TOOL, name=call.tool_name, step=None, call=call) for call in lone_calls]
    if lone_calls:
        # Steps and lone tool calls interleaved by start time; unknown times last, as SQL sorts them.
        order = {id(item): index for index, item in enumerate(items)}
        items.sort(key=lambda item: (item.started_at is None, _sortable_time(item.started_at), order[id(item)]))

    llm_count = 0
    for position, item in enumerate(items, start=1):
        item.position = position
        if item.kind == Step.Kind.TOOL:
            item.key = (item.kind, item.name, canonical_json(item.arguments))
        elif item.kind == Step.Kind.LLM:
            llm_count += 1
            item.key = (item.kind, llm_count)
        else:
            item.key = (item.kind, item.name)
    return items


def _sortable_time(value: datetime | None) -> float:
    return value.timestamp() if value is not None else 0.0


def final_snapshots(runs: Sequence[Run]) -> dict[int, MemorySnapshot]:
    """Each run's last memory snapshot (highest sequence), in one query."""
    snapshots = (
        MemorySnapshot.objects.filter(run_id__in=[run.pk for run in runs])
        .only("id", "run_id", "snapshot_id", "sequence", "state", "step_id")
        .order_by("run_id", "-sequence", "-id")
        .distinct("run_id")
    )
    return {snapshot.run_id: snapshot for snapshot in snapshots}


# --- Values ----------------------------------------------------------------------------------


def canonical_json(value: Any) -> str:
    """``value`` as JSON with sorted keys and no spaces, so equal arguments have one text."""
    try:
        return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False, default=str)
    except (ValueError, TypeError, RecursionError):
        return repr(value)


def llm_answer(output: Any) -> Any:
    """What a model call answered, without what differs in every call: a chat-completion
    response becomes its choices' messages; tool calls keep their name and arguments but
    lose their ids (providers make new ones every time)."""
    if isinstance(output, dict) and isinstance(output.get("choices"), list):
        return [
            _message_answer(choice.get("message", choice.get("delta")) if isinstance(choice, dict) else choice)
            for choice in output["choices"]
        ]
    if isinstance(output, dict):
        return _message_answer(output)
    if isinstance(output, list):
        return [_message_answer(item) for item in output]
    return output


def _message_answer(message: Any) -> Any:
    if not isinstance(message, dict) or "tool_calls" not in message:
        return message
    answer = {key: value for key, value in message.items() if key != "tool_calls"}
    calls = display.tool_calls_of(message["tool_calls"])
    answer["tool_calls"] = [{"name": call.name, "arguments": call.arguments} for call in calls]
    return answer


def answer_preview(answer: Any) -> str:
    """One line for an LLM call's answer: its text, or the tools it asks for
    (``calc({"expression": "1+1"})``) when it has no text."""
    text = display.preview_text(answer)
    if text.strip():
        return display.compact_json(text, PREVIEW_CHARS)
    last = answer[-1] if isinstance(answer, list) and answer else answer
    calls = last.get("tool_calls") if isinstance(last, dict) else None
    if calls and isinstance(calls, list):
        described = ", ".join(
            f"{call.get('name')}({display.compact_json(call.get('arguments'), PREVIEW_CHARS)})"
            for call in calls
            if isinstance(call, dict)
        )
        return display.compact_json(described, PREVIEW_CHARS)
    return display.compact_json(answer, PREVIEW_CHARS)


def bounded(value: Any, limit: int = VALUE_CHARS) -> tuple[Any, bool]:
    """``value`` as is when its JSON is at most ``limit`` characters; else the start of
    that JSON text (or of the string), and True."""
    if isinstance(value, str):
        return (value, False) if len(value) <= limit else (value[:limit] + "…", True)
    if value is None or isinstance(value, bool | int | float):
        return value, False
    text = canonical_json(value)
    return (value, False) if len(text) <= limit else (text[:limit] + "…", True)


def json_changes(before: Any, after: Any, *, field: str, limit: int) -> tuple[list[dict], bool]:
    """The paths added, removed and changed from ``before`` (run a) to ``after`` (run b),
    each ``{"field", "path", "kind", "a", "b"}`` (``path`` is "" for the whole value);
    and whether there were more than ``limit``."""
    changes, more = display.json_diff(before, after, limit=limit)
    out = []
    for change in changes:
        old, old_cut = bounded(change.old)
        new, new_cut = bounded(change.new)
        entry = {
            "field": field,
            "path": "" if change.path == "(root)" else change.path,
            "kind": change.kind,
            "a": old if change.kind != "added" else None,
            "b": new if change.kind != "removed" else None,
        }
        if old_cut or new_cut:
            entry["truncated"] = True
        out.append(entry)
    return out, more


def _equal(a: Any, b: Any) -> bool:
    try:
        return a == b
    except RecursionError:
        return canonical_json(a) == canonical_json(b)


# --- Steps ---------------------------------------------------------------------------------


def align_steps(items_a: Sequence[StepItem], items_b: Sequence[StepItem]) -> list[dict]:
    """The two step sequences aligned into pairs, in order (see the module docstring)."""
    return [step_pair(a, b) for a, b in aligned_items(items_a, items_b)]


Pairing = tuple[StepItem | None, StepItem | None]


def pair_score(a: StepItem, b: StepItem) -> int:
    """How much pairing ``a`` with ``b`` is worth to the alignment; 0: they never pair."""
    if a.kind == Step.Kind.LLM or b.kind == Step.Kind.LLM:
        return LLM_SCORE if a.kind == b.kind else 0
    if a.key == b.key:
        return SAME_KEY_SCORE
    return SAME_TOOL_SCORE if a.kind == b.kind == Step.Kind.TOOL and a.name == b.name else 0


def aligned_items(items_a: Sequence[StepItem], items_b: Sequence[StepItem]) -> list[Pairing]:
    """(a, b) pairs in order, None on the side a step is missing from. The stretches both
    runs start and end with are paired as they are; what lies between them is aligned
    by ``best_alignment``, or, when that would take too long, around the steps whose
    keys match (``anchored_alignment``)."""
    start = 0
    while start < min(len(items_a), len(items_b)) and _top_score(items_a[start], items_b[start]):
        start += 1
    end = 0
    while end < min(len(items_a), len(items_b)) - start and _top_score(items_a[-1 - end], items_b[-1 - end]):
        end += 1
    middle_a, middle_b = items_a[start : len(items_a) - end], items_b[start : len(items_b) - end]
    pairs: list[Pairing] = list(zip(items_a[:start], items_b[:start], strict=True))
    if len(middle_a) * len(middle_b) <= ALIGN_CELLS:
        pairs += best_alignment(middle_a, middle_b)
    else:
        pairs += anchored_alignment(middle_a, middle_b)
    pairs += list(zip(items_a[len(items_a) - end :], items_b[len(items_b) - end :], strict=True))
    return pairs


def _top_score(a: StepItem, b: StepItem) -> bool:
    return pair_score(a, b) >= LLM_SCORE


def best_alignment(items_a: Sequence[StepItem], items_b: Sequence[StepItem]) -> list[Pairing]:
    """The alignment with the highest total ``pair_score`` (dynamic programming, as for
    DNA). On ties a step left unpaired goes as late as possible, so the first steps pair
    first, and a removed step comes before the added one that took its place."""
    n, m = len(items_a), len(items_b)
    if not n or not m:
        return [(item, None) for item in items_a] + [(None, item) for item in items_b]
    # Scores by small integer codes: a pair scores SAME_KEY_SCORE when the codes of its
    # keys are equal, else the weight of the codes of its kind and name when those are.
    codes: dict[tuple, int] = {}

    def code(key: tuple) -> int:
        return codes.setdefault(key, len(codes))

    def describe(items: Sequence[StepItem], side: int) -> tuple[list[int], list[int], list[int]]:
        keys, looks, weights = [], [], []
        for index, item in enumerate(items):
            is_llm = item.kind == Step.Kind.LLM
            # An LLM call's own key equals no other (negative, odd in a, even in b): it
            # pairs through its kind.
            keys.append(-1 - 2 * index - side if is_llm else code(item.key))
            looks.append(code((item.kind,) if is_llm else (item.kind, item.name)))
            weights.append(LLM_SCORE if is_llm else (SAME_TOOL_SCORE if item.kind == Step.Kind.TOOL else 0))
        return keys, looks, weights

    keys_a, looks_a, weights_a = describe(items_a, 0)
    keys_b, looks_b, _weights_b = describe(items_b, 1)
    width = m + 1
    # Moves back from each cell: 0 pairs both, 1 leaves a's step unpaired, 2 b's.
    moves = bytearray(b"\x02" * width) + bytearray((n) * width)
    previous = [0] * width
    for i in range(1, n + 1):
        key, look, weight = keys_a[i - 1], looks_a[i - 1], weights_a[i - 1]
        row = i * width
        moves[row] = 1
        current = [0] * width
        left = 0
        for j in range(1, width):
            up = previous[j]
            best, move = (left, 2) if left >= up else (up, 1)
            if key == keys_b[j - 1]:
                diagonal = previous[j - 1] + SAME_KEY_SCORE
                if diagonal > best:
                    best, move = diagonal, 0
            elif weight and look == looks_b[j - 1]:
                diagonal = previous[j - 1] + weight
                if diagonal > best:
                    best, move = diagonal, 0
            current[j] = best
            moves[row + j] = move
            left = best
        previous = current
    pairs: list[Pairing] = []
    i, j = n, m
    while i or j:
        move = moves[i * width + j]
        if move == 0:
            pairs.append((items_a[i - 1], items_b[j - 1]))
            i, j = i - 1, j - 1
        elif move == 1:
            pairs.append((items_a[i - 1], None))
            i -= 1
        else:
            pairs.append((None, items_b[j - 1]))
            j -= 1
    pairs.reverse()
    return pairs


def anchored_alignment(items_a: Sequence[StepItem], items_b: Sequence[StepItem]) -> list[Pairing]:
    """For runs too long to align at once: ``difflib.SequenceMatcher`` matches equal keys
    (an LLM call's key: its position among the run's LLM calls), and each stretch
    between matches is aligned by ``best_alignment`` when it is small enough, else
    step by step in order."""
    pairs: list[Pairing] = []
    matcher = SequenceMatcher(None, [item.key for item in items_a], [item.key for item in items_b], autojunk=False)
    for tag, a1, a2, b1, b2 in matcher.get_opcodes():
        block_a, block_b = items_a[a1:a2], items_b[b1:b2]
        if tag == "equal":
            pairs += list(zip(block_a, block_b, strict=True))
        elif len(block_a) * len(block_b) <= ALIGN_CELLS:
            pairs += best_alignment(block_a, block_b)
        else:
            for index in range(max(len(block_a), len(block_b))):
                a = block_a[index] if index < len(block_a) else None
                b = block_b[index] if index < len(block_b) else None
                if a is not None and b is not None and pair_score(a, b):
                    pairs.append((a, b))
                    continue
                if a is not None:
                    pairs.append((a, None))
                if b is not None:
                    pairs.append((None, b))
    return pairs


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
        if _equal(value_a, values_b[field]):
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
        "cost": _decimal_text(step.cost) if step is not None else None,
        "preview": preview,
        "outcome": outcome,
    }


def alignment_summary(pairs: Iterable[dict]) -> dict[str, int]:
    counts = {SAME: 0, CHANGED: 0, ADDED: 0, REMOVED: 0}
    for pair in pairs:
        counts[pair["status"]] += 1
    return counts


# --- Text ------------------------------------------------------------------------------------

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
        "equal": _equal(output_a, output_b),
        "a": {"text": cut_a, "truncated": len(text_a) > MAX_TEXT_CHARS},
        "b": {"text": cut_b, "truncated": len(text_b) > MAX_TEXT_CHARS},
        "inline": word_diff(cut_a, cut_b),
        "side_by_side": side_by_side(cut_a, cut_b),
        "changes": changes,
        "changes_truncated": more,
    }


# --- Memory and metrics ------------------------------------------------------------------------


def memory_diff(snapshot_a: MemorySnapshot | None, snapshot_b: MemorySnapshot | None) -> dict:
    """The final memory snapshots' differences, key by key (nested keys as paths). A run
    without a snapshot counts as an empty memory."""
    state_a = snapshot_a.state if snapshot_a is not None else {}
    state_b = snapshot_b.state if snapshot_b is not None else {}
    changes, more = json_changes(state_a, state_b, field="memory", limit=MAX_CHANGES)
    return {
        "a": _snapshot_summary(snapshot_a),
        "b": _snapshot_summary(snapshot_b),
        "equal": _equal(state_a, state_b),
        "changes": changes,
        "changes_truncated": more,
    }


def _snapshot_summary(snapshot: MemorySnapshot | None) -> dict | None:
    if snapshot is None:
        return None
    return {"id": snapshot.pk, "snapshot_id": snapshot.snapshot_id, "sequence": snapshot.sequence}


METRICS = (
    "input_tokens",
    "output_tokens",
    "total_cost",
    "latency_ms",
    "step_count",
    "llm_calls",
    "tool_calls",
    "errors",
)


def run_metrics(a: Run, b: Run, items_a: Sequence[StepItem], items_b: Sequence[StepItem]) -> dict[str, dict]:
    """Each metric of both runs with ``delta`` (b - a) and ``percent`` (of a; null when a
    is 0 or either is unknown). Costs are decimal strings, the rest numbers."""

    def tools(items: Sequence[StepItem]) -> int:
        return sum(1 for item in items if item.kind == Step.Kind.TOOL)

    values = {
        "input_tokens": (a.input_tokens, b.input_tokens),
        "output_tokens": (a.output_tokens, b.output_tokens),
        "total_cost": (a.total_cost, b.total_cost),
        "latency_ms": (a.latency_ms, b.latency_ms),
        "step_count": (a.step_count, b.step_count),
        "llm_calls": (a.llm_call_count, b.llm_call_count),
        "tool_calls": (tools(items_a), tools(items_b)),
        "errors": (a.error_count, b.error_count),
    }
    return {name: metric(*values[name]) for name in METRICS}


def metric(a: int | Decimal | None, b: int | Decimal | None) -> dict:
    delta = b - a if a is not None and b is not None else None
    percent = round(float(delta) / float(a) * 100, 2) if delta is not None and a else None
    if isinstance(a, Decimal) or isinstance(b, Decimal):
        return {"a": _decimal_text(a), "b": _decimal_text(b), "delta": _decimal_text(delta), "percent": percent}
    return {"a": a, "b": b, "delta": delta, "percent": percent}


def _decimal_text(value: Decimal | None) -> str | None:
    return None if value is None else f"{value:f}"


# --- Settings --------------------------------------------------------------------------------

# What a replay can change, in the order a reader asks about it: the question a replay
# answers is "what happens if this changes?", so these come first.
SETTINGS = (
    "model",
    "temperature",
    "top_p",
    "max_tokens",
    "random_seed",
    "system_prompt",
    "tools",
    "tool_mode",
    "agent_version",
    "fork_step",
)
SETTING_PARAMETERS = ("temperature", "top_p", "max_tokens", "random_seed")
# An ingested run's request parameters, as OpenTelemetry GenAI names them.
OTEL_PARAMETERS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "max_tokens": "gen_ai.request.max_tokens",
    "random_seed": "gen_ai.request.seed",
}
SYSTEM_PROMPT_CHARS = 20_000


def execution_settings(runs: Sequence[Run]) -> dict[int, dict]:
    """The part of each run's executor state that says what it ran with (spec,
    parameters, replay), in one query: the whole state also holds the conversation,
    which can be large."""
    rows = (
        Run.objects.filter(pk__in=[run.pk for run in runs])
        .annotate(
            state_spec=KeyTransform("spec", "execution"),
            state_parameters=KeyTransform("parameters", "execution"),
            state_replay=KeyTransform("replay", "execution"),
        )
        .values_list("pk", "state_spec", "state_parameters", "state_replay")
    )
    return {pk: {"spec": spec, "parameters": parameters, "replay": replay} for pk, spec, parameters, replay in rows}


def run_settings(run: Run, state: dict | None) -> dict[str, Any]:
    """What ``run`` ran with, each of ``SETTINGS`` (null: not set, the model's default,
    or not recorded). An executed run (an agent's run, a replay) keeps them in its
    state; an ingested run is read as a replay of it reads it: its first model call's
    model, request parameters and system message, and the tools its model calls were
    offered. ``tool_mode`` is a replay's (``recorded`` or ``live``); any other run
    called its tools for real (``live``). ``state``: the run's ``execution_settings``."""
    state = state or {}
    replay = state.get("replay") if isinstance(state.get("replay"), dict) else {}
    settings: dict[str, Any] = dict.fromkeys(SETTINGS)
    settings["tool_mode"] = replay.get("tool_mode") or "live"
    settings["fork_step"] = replay.get("fork_step")
    settings["agent_version"] = run.agent_version or None
    if run.executed:
        spec = state.get("spec") if isinstance(state.get("spec"), dict) else {}
        parameters = state.get("parameters") if isinstance(state.get("parameters"), dict) else {}
        if not spec and run.executed_version_id:
            # A run queued before runs kept their spec: its agent version's.
            version = run.executed_version
            spec, parameters = version_spec(version), {**version.parameters, **parameters}
        recorded = [d["function"]["name"] for d in spec.get("tool_definitions") or [] if _named_definition(d)]
        settings |= {
            "model": spec.get("model") or None,
            "system_prompt": spec.get("system_prompt", None),
            "tools": [*spec.get("tools", []), *recorded] if spec else None,
            **{name: parameters.get(name) for name in SETTING_PARAMETERS},
        }
        return settings
    first = (
        Step.objects.filter(run=run, kind=Step.Kind.LLM)
        .only("id", "model", "attributes", "input")
        .order_by("started_at", "id")
        .first()
    )
    if first is None:
        settings["model"] = run.models_used[0] if run.models_used else None
        return settings
    attributes = first.attributes if isinstance(first.attributes, dict) else {}
    conversation = chat_messages(first.input) or []
    system = next((m["content"] for m in conversation if m["role"] == "system"), None)
    settings |= {
        "model": first.model or None,
        "system_prompt": system if isinstance(system, str) else None,
        "tools": [d["function"]["name"] for d in tool_definitions(run)],
        **{
            name: value
            for name, key in OTEL_PARAMETERS.items()
            if isinstance(value := attributes.get(key), int | float) and not isinstance(value, bool)
        },
    }
    return settings


def _named_definition(definition: Any) -> bool:
    return isinstance(definition, dict) and isinstance(definition.get("function"), dict)


def settings_diff(settings_a: dict[str, Any], settings_b: dict[str, Any]) -> dict:
    """Both runs' settings and the ones that differ, in ``SETTINGS`` order, each
    ``{"name", "a", "b"}``; tools also name those ``added`` and ``removed`` (order
    ignored), a system prompt its word diff (``inline``)."""
    changes = []
    for name in SETTINGS:
        a, b = settings_a[name], settings_b[name]
        if name == "tools":
            if sorted(a or []) == sorted(b or []) and (a is None) == (b is None):
                continue
            changes.append(
                {
                    "name": name,
                    "a": a,
                    "b": b,
                    "added": [tool for tool in b or [] if tool not in (a or [])],
                    "removed": [tool for tool in a or [] if tool not in (b or [])],
                }
            )
        elif name == "system_prompt":
            if (a or "") == (b or "") and (a is None) == (b is None):
                continue
            cut_a, cut_b = (a or "")[:SYSTEM_PROMPT_CHARS], (b or "")[:SYSTEM_PROMPT_CHARS]
            changes.append({"name": name, "a": a, "b": b, "inline": word_diff(cut_a, cut_b)})
        elif not _equal(a, b):
            changes.append({"name": name, "a": a, "b": b})
    return {"a": settings_a, "b": settings_b, "equal": not changes, "changes": changes}


# --- The comparison ----------------------------------------------------------------------------


def run_summary(run: Run) -> dict:
    return {
        "id": run.pk,
        "trace_id": run.trace_id,
        "name": run.name,
        "status": run.status,
        "agent_name": run.agent_name,
        "agent_version": run.agent_version,
        "models_used": list(run.models_used),
        # As the rest of the API writes times (DRF): ISO 8601 in UTC with "Z".
        "started_at": run.started_at.isoformat().replace("+00:00", "Z") if run.started_at else None,
    }


def run_pair(*, project, a_id: int, b_id: int) -> tuple[Run, Run]:
    """Runs ``a_id`` and ``b_id`` of ``project`` (one query); NotFound names the one that
    is not in the project, another tenant's run included."""
    found = {
        run.pk: run for run in Run.objects.filter(project=project, pk__in=[a_id, b_id]).defer("search", "execution")
    }
    for name, run_id in (("a", a_id), ("b", b_id)):
        if run_id not in found:
            raise NotFound(f"run {name} not found")
    return found[a_id], found[b_id]


def compare_runs(a: Run, b: Run) -> dict:
    """The difference from run ``a`` to run ``b`` (two runs of one project, already
    looked up in it by the caller), JSON-ready: first what each ran with and what of it
    differs (``settings``), then what came of it. Four queries, and two more for each
    run that was ingested rather than executed (its first model call, its tool
    definitions)."""
    if a.project_id != b.project_id:
        raise ValueError("compare runs of one project")
    items = load_step_items([a, b])
    snapshots = final_snapshots([a, b])
    states = execution_settings([a, b])
    pairs = align_steps(items[a.pk], items[b.pk])
    return {
        "a": run_summary(a),
        "b": run_summary(b),
        "settings": settings_diff(run_settings(a, states.get(a.pk)), run_settings(b, states.get(b.pk))),
        "metrics": run_metrics(a, b, items[a.pk], items[b.pk]),
        "output": output_diff(a.output, b.output),
        "steps": {"summary": alignment_summary(pairs), "pairs": pairs},
        "memory": memory_diff(snapshots.get(a.pk), snapshots.get(b.pk)),
    }
