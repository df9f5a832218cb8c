"""Which step of run a goes with which step of run b: the two sequences of
``StepItem`` aligned into pairs, in order (documented for users in
docs/runs.md#comparing-two-runs).

The alignment pairs steps to the highest total score, in order (a global sequence
alignment by dynamic programming, ``best_alignment``): a pair of steps with the same
key scores 3, two LLM calls 2 (LLM calls pair by position: any with any, between the
tools that anchor them), the same tool with other arguments 1; anything else does not
pair. So the same tool called with other arguments at the same place is one
``changed`` pair showing its argument differences, not a removal and an addition,
but never at the cost of a pair with equal keys. On ties, the first steps pair first.
Runs too long to align this way within ``ALIGN_CELLS`` are first matched on equal
keys with ``difflib.SequenceMatcher`` (an LLM call's key then being its position
among the run's LLM calls), and aligned as above between those matches.

Pure: no queries; what each pair shows is ``runs.compare.steps``.
"""

from __future__ import annotations

from collections.abc import Sequence
from difflib import SequenceMatcher

from runs.compare.items import StepItem
from runs.models import Step

# What a pair is worth to the alignment, which pairs steps to the highest total: a step
# with the same key (a tool with the same arguments, another step of the same kind and
# name), two LLM calls, the same tool with other arguments.
SAME_KEY_SCORE, LLM_SCORE, SAME_TOOL_SCORE = 3, 2, 1
# Beyond this many steps x steps (about 1,000 x 1,000: 0.2 s), alignment is anchored.
ALIGN_CELLS = 1_000_000

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
