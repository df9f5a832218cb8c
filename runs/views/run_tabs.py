"""What each tab of a run's page shows, shaped from the selectors' rows: the step tree
placed on the run's time axis, the agents around the run, the transcript as a chat, and
memory snapshots with what changed. Each does a fixed number of queries."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime

from runs import selectors
from runs.models import MemorySnapshot, Message, Run, Step
from runs.views import display

# A step's payloads, which joined rows (a message's step, a tool call's step) never need.
STEP_PAYLOADS = ("step__input", "step__output", "step__attributes", "step__events", "step__error")
# Beyond these a tab shows the first rows and says so: a page stays usable whatever
# an agent sends (the target is 500 steps; these are well above it).
STEP_LIMIT = 2000
MESSAGE_LIMIT = 1000
TOOL_CALL_LIMIT = 1000
MEMORY_SNAPSHOT_LIMIT = 100
FAMILY_MAX_DEPTH = 6
FAMILY_MAX_RUNS = 60


# --- The waterfall ---------------------------------------------------------------------


@dataclass
class TraceRow:
    step: Step
    depth: int
    has_children: bool
    offset: float  # percent of the run's time span where the bar starts
    width: float  # percent of the run's time span the bar covers
    running: bool

    @property
    def end(self) -> float:
        return self.offset + self.width

    @property
    def bar_style(self) -> str:
        # Formatted here rather than with template filters: 500 rows add up.
        return f"--start: {self.offset:.3f}%; --end: {self.end:.3f}%"

    @property
    def label_place(self) -> str:
        """Where the duration fits: after the bar, before it, or inside a bar that spans the axis."""
        if self.end <= 78:
            return "after"
        return "before" if self.offset >= 18 else "inside"


@dataclass
class TraceAxis:
    start: datetime | None
    total_ms: float
    ticks: list[tuple[float, float]]  # (percent, milliseconds)


def trace_rows(*, run: Run, steps: list[Step], now: datetime) -> tuple[list[TraceRow], TraceAxis]:
    """The step tree in display order, each row with its bar's place on the run's
    time axis (from the first step's start to the last end, or now while running)."""
    starts = [step.started_at for step in steps if step.started_at]
    ends = [step.ended_at or step.started_at for step in steps if step.ended_at or step.started_at]
    start = min(starts) if starts else run.started_at
    end = max(ends) if ends else None
    # An open step of a finished run never ended (a lost span): it is not "running".
    unfinished = not run.ended
    if unfinished and any(step.started_at and not step.ended_at for step in steps):
        end = max(end, now) if end else now
    total_ms = max((end - start).total_seconds() * 1000, 0.0) if start and end else 0.0
    rows = []
    for node in selectors.flatten_tree(selectors.step_tree(run=run, steps=steps)):
        step = node.step
        running = bool(unfinished and step.started_at and not step.ended_at)
        offset = width = 0.0
        if step.started_at and start and total_ms > 0:
            step_end = step.ended_at or (end if running else step.started_at)
            offset = (step.started_at - start).total_seconds() * 1000 / total_ms * 100
            width = max((step_end - step.started_at).total_seconds() * 1000, 0.0) / total_ms * 100
            offset = min(max(offset, 0.0), 100.0)
            width = min(width, 100.0 - offset)
        rows.append(TraceRow(step, node.depth, bool(node.children), offset, width, running))
    ticks = [(percent, total_ms * percent / 100) for percent in (0, 25, 50, 75, 100)] if total_ms else []
    return rows, TraceAxis(start=start, total_ms=total_ms, ticks=ticks)


# --- The agents around a run -----------------------------------------------------------


@dataclass
class FamilyRow:
    run: Run
    depth: int
    current: bool


def run_family(*, project, run: Run) -> list[FamilyRow]:
    """The multi-agent tree ``run`` belongs to (from its top parent down), or [] when it
    has neither parent nor children. One query per level, bounded in depth and size."""
    runs = selectors.run_list(project=project)
    root, seen = run, {run.pk}
    for _ in range(FAMILY_MAX_DEPTH):
        if not root.parent_run_id or root.parent_run_id in seen:
            break
        parent = runs.filter(pk=root.parent_run_id).first()
        if parent is None:
            break
        seen.add(parent.pk)
        root = parent
    children_of: dict[int, list[Run]] = {}
    level, total = [root.pk], 1
    for _ in range(FAMILY_MAX_DEPTH):
        if not level or total >= FAMILY_MAX_RUNS:
            break
        found = list(runs.filter(parent_run_id__in=level).order_by("started_at", "id")[: FAMILY_MAX_RUNS - total])
        for child in found:
            children_of.setdefault(child.parent_run_id, []).append(child)
        total += len(found)
        level = [child.pk for child in found]
    if root.pk == run.pk and not children_of:
        return []
    rows: list[FamilyRow] = []
    stack = [(root, 0)]
    while stack:
        node, depth = stack.pop()
        rows.append(FamilyRow(node, depth, node.pk == run.pk))
        stack.extend((child, depth + 1) for child in reversed(children_of.get(node.pk, [])))
    return rows


# --- The transcript --------------------------------------------------------------------


@dataclass
class ChatMessage:
    message: Message
    text: str | None  # the readable text, cut to the preview; None when shown as JSON
    truncated: bool
    tool_calls: list[display.ToolCallView]
    tool_name: str  # for a tool's result: the tool that was called


def chat(*, run: Run) -> list[ChatMessage]:
    """The transcript's first ``MESSAGE_LIMIT`` messages, ready to draw as a chat."""
    messages = selectors.transcript(run=run)[:MESSAGE_LIMIT]
    tool_names: dict[str, str] = {}
    out = []
    for message in messages:
        calls = display.tool_calls_of(message.tool_calls)
        for call in calls:
            if call.call_id:
                tool_names[call.call_id] = call.name
        text = display.content_text(message.content)
        truncated = False
        if text is not None:
            text, truncated = display.truncate_text(text)
        out.append(
            ChatMessage(
                message=message,
                text=text,
                truncated=truncated,
                tool_calls=calls,
                tool_name=message.name or tool_names.get(message.tool_call_id, ""),
            )
        )
    return out


# --- Memory ---------------------------------------------------------------------------


@dataclass
class MemoryEntry:
    snapshot: MemorySnapshot
    changes: list[display.Change]
    more_changes: bool
    first: bool


def memory_entries(*, run: Run) -> tuple[list[MemoryEntry], int]:
    """The run's first snapshots, each with what changed since the one before; and how
    many snapshots there are in all."""
    snapshots = list(selectors.memory_list(run=run).defer(*STEP_PAYLOADS)[: MEMORY_SNAPSHOT_LIMIT + 1])
    total = len(snapshots)
    if total > MEMORY_SNAPSHOT_LIMIT:
        total = selectors.memory_list(run=run).count()
        snapshots = snapshots[:MEMORY_SNAPSHOT_LIMIT]
    entries, previous = [], None
    for index, snapshot in enumerate(snapshots):
        changes, more = display.json_diff(previous.state if previous else {}, snapshot.state)
        entries.append(MemoryEntry(snapshot, changes, more, first=index == 0))
        previous = snapshot
    return entries, total
