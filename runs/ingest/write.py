"""``ingest()``: one batch of events stored in one transaction.

The order of the work, each step in its module: lock or create the batch's runs and
merge what the events say about them (``run_rows``), build the rows of steps (with their
cost), messages, tool calls and memory snapshots (``item_rows``), write them all at once
(``sql``), link sub-agent runs to their parent (``run_rows``), recompute the totals of
every run touched (``totals``), mark them for the usage ledger, and announce them to the
project's open pages after commit.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from django.db import transaction
from django.utils import timezone

from agentops.models import Project
from billing.ledger import ledger_mark
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest.item_rows import messages_upsert, snapshots_upsert, steps_upsert, tool_calls_upsert
from runs.ingest.run_rows import link_parent_runs, upsert_runs
from runs.ingest.sql import SMALL_UPSERT_ROWS, Upsert, copy_new, copy_upsert, reserve_ids
from runs.ingest.totals import recompute_run_totals
from runs.live import announce_runs_ingested
from runs.models import Step
from runs.services.redaction import Redactor, redactor_for


@dataclass
class IngestResult:
    runs_created: list[int] = field(default_factory=list)
    runs_touched: list[int] = field(default_factory=list)
    steps: int = 0
    messages: int = 0
    tool_calls: int = 0
    snapshots: int = 0


def _last_wins(items: Iterable, key) -> list:
    """Keep the last item of each key: one batch may repeat an id, and PostgreSQL
    refuses to upsert the same row twice in one statement."""
    return list({key(item): item for item in items}.values())


def _split(upsert: Upsert, run_ids: set[int]) -> tuple[Upsert, Upsert]:
    """(the rows of ``run_ids``, the others) of ``upsert``."""
    new, other = [], []
    for row in upsert.rows:
        (new if row["run_id"] in run_ids else other).append(row)
    return (
        Upsert(upsert.model, new, upsert.unique_fields, upsert.update_fields, upsert.json_checked),
        Upsert(upsert.model, other, upsert.unique_fields, upsert.update_fields, upsert.json_checked),
    )


def _write_rows(upserts: tuple[Upsert, ...], created: set[int]) -> bool:
    """Write the rows of steps, messages, tool calls and snapshots (in that order).
    Returns whether items may still need the link to their step (recompute_run_totals'
    ``link_tables``): False only when every item written is of a run this batch created
    and already carries its step's id (a run created now has no other items).

    The rows of runs this batch created (most of an OTLP export's: a trace usually comes
    whole) go by COPY straight into their tables, and their items carry their step's id
    from the start: the steps' ids are drawn from their sequence before the steps' COPY
    (one statement, not a read of the steps back after it), instead of each item row
    written a second time by the link in recompute_run_totals(). The rest, and a handful of rows
    (one statement is cheaper than a COPY per table), go through ``copy_upsert``."""
    steps, *items = upserts
    if created:
        new, other = zip(*(_split(upsert, created) for upsert in upserts), strict=True)
    if not created or sum(len(upsert.rows) for upsert in new) <= SMALL_UPSERT_ROWS:
        copy_upsert(*upserts)
        return True
    new_steps, *new_items = new
    with_ids = bool(new_steps.rows) and any(upsert.rows for upsert in new_items)
    if with_ids:
        # The new steps' ids drawn before their COPY, so that their items carry them (a
        # run created now has no other steps).
        step_ids = {}
        for row, pk in zip(new_steps.rows, reserve_ids(Step, len(new_steps.rows)), strict=True):
            row["id"] = step_ids[row["run_id"], row["span_id"]] = pk
        for upsert in new_items:
            for row in upsert.rows:
                row["step_id"] = step_ids.get((row["run_id"], row["span_id"]))
    copy_new(new_steps, with_ids=with_ids)
    for upsert in new_items:
        copy_new(upsert)
    copy_upsert(*other)
    return any(upsert.rows for upsert in other) or any(
        row.get("step_id") is None for upsert in new_items for row in upsert.rows
    )


def ingest(
    *,
    project: Project,
    runs: Iterable[RunEvent] = (),
    steps: Iterable[StepEvent] = (),
    messages: Iterable[MessageEvent] = (),
    tool_calls: Iterable[ToolCallEvent] = (),
    snapshots: Iterable[MemoryEvent] = (),
    announce: bool = True,
    redactor: Redactor | None = None,
    api_key=None,
    json_checked: bool = False,
) -> IngestResult:
    """Store a batch of trace data for ``project`` durably; see the package docstring
    (``runs.ingest``).

    ``redactor``: the project's, for a caller that sends many batches (the executor, for
    a whole run); read from the project's settings when not given. ``api_key``: the key
    that sent the batch, recorded on the runs it creates (the ledger counts spend by key).
    ``json_checked``: the events' JSON values are already as ``runs.events.json_safe``
    makes them (no NaN or Infinity, NUL character or unpaired surrogate), as the OTLP
    mapping's are: their encoding does not look for those again (``Upsert.json_checked``).
    The runs touched are marked for the usage ledger in the same transaction.

    Inside a caller's transaction this takes no savepoint: an error fails the caller's
    whole transaction. A caller that wants to carry on after a failed ingest wraps the
    call in its own ``transaction.atomic()``."""
    runs = _last_wins(runs, lambda e: e.trace_id)
    steps = _last_wins(steps, lambda e: (e.trace_id, e.span_id))
    messages = _last_wins(messages, lambda e: (e.trace_id, e.message_id))
    tool_calls = _last_wins(tool_calls, lambda e: (e.trace_id, e.call_id))
    snapshots = _last_wins(snapshots, lambda e: (e.trace_id, e.snapshot_id))
    trace_ids = sorted(
        {e.trace_id for e in runs}
        | {e.trace_id for e in steps}
        | {e.trace_id for e in messages}
        | {e.trace_id for e in tool_calls}
        | {e.trace_id for e in snapshots}
    )
    result = IngestResult()
    if not trace_ids:
        return result
    if redactor is None:
        redactor = redactor_for(project)
    now = timezone.now()
    # No savepoint when nested (it costs two round trips a batch): no caller catches an
    # error of ingest() and carries on in the same transaction. run_start and approvals
    # let it fail theirs; the APIs, which answer 503 on a database error, and the
    # executor call ingest() outside one.
    with transaction.atomic(savepoint=False):
        upserted = upsert_runs(project, trace_ids, runs, steps, redactor, now, api_key=api_key)
        run_by_trace = upserted.run_by_trace
        result.runs_created = [run_by_trace[t].pk for t in upserted.created]
        result.runs_touched = sorted(run.pk for run in run_by_trace.values())
        upserts = (
            steps_upsert(project, run_by_trace, steps, redactor, now),
            messages_upsert(project, run_by_trace, messages, redactor, now),
            tool_calls_upsert(project, run_by_trace, tool_calls, redactor, now),
            snapshots_upsert(project, run_by_trace, snapshots, redactor, now),
        )
        for upsert in upserts:
            upsert.json_checked = json_checked
        may_need_links = _write_rows(upserts, set(result.runs_created))
        # A run that existed may hold items stored before their step (any batch's).
        may_need_links = may_need_links or len(result.runs_created) < len(result.runs_touched)
        result.steps, result.messages, result.tool_calls, result.snapshots = (len(u.rows) for u in upserts)
        link_parent_runs(project, list(run_by_trace.values()), upserted.waiting_children)
        recompute_run_totals(
            result.runs_touched,
            updated_at=now,
            search_run_ids=sorted(run_by_trace[t].pk for t in upserted.search_changed),
            # New steps can be the step of items already stored, in any of the tables;
            # with no steps, only the items of this batch can find theirs.
            link_tables=[
                table
                for table, items in (
                    ("runs_message", messages),
                    ("runs_toolcall", tool_calls),
                    ("runs_memorysnapshot", snapshots),
                )
                if may_need_links and (steps or items)
            ],
        )
        ledger_mark(organization_id=project.organization_id, run_ids=result.runs_touched)
        if announce:
            runs_changed = [{"id": pk, "new": pk in result.runs_created} for pk in result.runs_touched]
            transaction.on_commit(lambda: announce_runs_ingested(project=project, runs=runs_changed))
    return result
