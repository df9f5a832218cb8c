"""The one write path of the trace store.

OTLP spans, JSON batch events and (later) the platform's own executor all become the
event dataclasses below and go through ``ingest()``, which in one transaction:
redacts payloads, upserts runs (a step may arrive before its run), upserts steps with
their cost, upserts messages, tool calls and memory snapshots, links them to their
steps, recomputes the totals of every run it touched, and announces the change to the
project's open pages after commit.

Every upsert is keyed by a client-visible id (trace id, span id, message id, call id,
snapshot id), so re-sending the same data updates rows instead of duplicating them.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any

from django.db import connection, transaction
from django.db.models import JSONField, Q
from django.utils import timezone
from psycopg.types.json import Jsonb

from agentops.models import Project
from billing.services import step_cost
from runs.live import announce_runs_ingested
from runs.models import MemorySnapshot, Message, Run, Step, ToolCall
from runs.services.redaction import Redactor, redactor_for

# Run fields a client may state explicitly (JSON batch "run" events).
RUN_FIELDS = (
    "name",
    "agent_name",
    "agent_version",
    "status",
    "error",
    "input",
    "output",
    "started_at",
    "ended_at",
    "session_id",
    "parent_trace_id",
    "end_user_id",
    "environment",
    "release",
    "tags",
    "metadata",
)
# Run fields a step may fill in when the run does not have them yet (span attributes
# such as session.id or the root span's input).
RUN_HINT_FIELDS = (
    "name",
    "agent_name",
    "agent_version",
    "input",
    "output",
    "session_id",
    "parent_trace_id",
    "end_user_id",
    "environment",
    "release",
    "tags",
    "metadata",
)
STEP_FIELDS = (
    "parent_span_id",
    "kind",
    "name",
    "started_at",
    "ended_at",
    "duration_ms",
    "status",
    "error",
    "model",
    "provider",
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "cost",
    "unpriced",
    "price_id",
    "input",
    "output",
    "attributes",
    "events",
)
TERMINAL_STATUSES = {Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED}


@dataclass
class RunEvent:
    """What a client states about a run. Only the keys present in ``fields`` change."""

    trace_id: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepEvent:
    trace_id: str
    span_id: str
    parent_span_id: str = ""
    kind: str = Step.Kind.CUSTOM
    name: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    status: str = Step.Status.UNSET
    error: str = ""
    model: str = ""
    provider: str = ""
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    input: Any = None
    output: Any = None
    attributes: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    # Filled into the run when it lacks them: session_id, end_user_id, agent_name, ...
    run_hints: dict[str, Any] = field(default_factory=dict)


@dataclass
class MessageEvent:
    trace_id: str
    message_id: str
    position: int
    role: str
    content: Any = None
    span_id: str = ""
    tool_calls: list = field(default_factory=list)
    tool_call_id: str = ""
    name: str = ""
    tokens: int | None = None
    finish_reason: str = ""


@dataclass
class ToolCallEvent:
    trace_id: str
    call_id: str
    tool_name: str
    span_id: str = ""
    arguments: Any = None
    result: Any = None
    error: str = ""
    latency_ms: float | None = None
    started_at: datetime | None = None


@dataclass
class MemoryEvent:
    trace_id: str
    snapshot_id: str
    sequence: int
    state: Any
    span_id: str = ""
    taken_at: datetime | None = None


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


def _duration_ms(started: datetime | None, ended: datetime | None) -> float | None:
    if started and ended:
        return max((ended - started).total_seconds() * 1000, 0.0)
    return None


def ingest(
    *,
    project: Project,
    runs: Iterable[RunEvent] = (),
    steps: Iterable[StepEvent] = (),
    messages: Iterable[MessageEvent] = (),
    tool_calls: Iterable[ToolCallEvent] = (),
    snapshots: Iterable[MemoryEvent] = (),
    announce: bool = True,
) -> IngestResult:
    """Store a batch of trace data for ``project`` durably; see the module docstring."""
    redactor = redactor_for(project)
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
    now = timezone.now()
    with transaction.atomic():
        run_by_trace, created, waiting_children = _upsert_runs(project, trace_ids, runs, steps, redactor, now)
        result.runs_created = [run_by_trace[t].pk for t in created]
        result.runs_touched = sorted(run.pk for run in run_by_trace.values())
        result.steps = _upsert_steps(project, run_by_trace, steps, redactor, now)
        result.messages = _upsert_messages(project, run_by_trace, messages, redactor, now)
        result.tool_calls = _upsert_tool_calls(project, run_by_trace, tool_calls, redactor, now)
        result.snapshots = _upsert_snapshots(project, run_by_trace, snapshots, redactor, now)
        _link_to_steps(result.runs_touched)
        _link_parent_runs(project, result.runs_touched, waiting_children)
        recompute_run_totals(result.runs_touched)
        if announce:
            runs_changed = [{"id": pk, "new": pk in result.runs_created} for pk in result.runs_touched]
            transaction.on_commit(lambda: announce_runs_ingested(project=project, runs=runs_changed))
    return result


def _upsert_runs(project, trace_ids, run_events, step_events, redactor: Redactor, now):
    """Lock (or create) the runs of ``trace_ids`` and merge what the events say."""
    _copy_upsert(
        Run,
        [
            {
                "organization_id": project.organization_id,
                "project_id": project.pk,
                "trace_id": t,
                "created_at": now,
                "updated_at": now,
            }
            for t in trace_ids
        ],
        unique_fields=["project", "trace_id"],
        update_fields=[],
    )
    # Also lock the sub-agent runs waiting for one of these runs as their parent: linking
    # them writes to them, and a lock taken then, out of id order, could deadlock with a
    # batch that holds that child and waits for one of ours. One statement in id order
    # takes every lock a batch needs.
    locked = (
        Run.objects.select_for_update()
        .filter(project=project)
        .filter(Q(trace_id__in=trace_ids) | Q(parent_trace_id__in=trace_ids, parent_run__isnull=True))
        .order_by("id")
    )
    batch_traces = set(trace_ids)
    run_by_trace, waiting_children = {}, []
    for run in locked:
        if run.trace_id in batch_traces:
            run_by_trace[run.trace_id] = run
        else:
            waiting_children.append(run.pk)
    # A run is new if nobody has written to it before this batch.
    created = [t for t, run in run_by_trace.items() if run.created_at == now and run.updated_at == now]

    changed: set[str] = set()
    parent_trace_before = {trace_id: run.parent_trace_id for trace_id, run in run_by_trace.items()}
    # Hints of inner spans only fill gaps; the root span's hints win over them (a
    # sub-agent's span may arrive before the root); explicit run events win over both.
    ordered = sorted(step_events, key=lambda e: not e.parent_span_id)
    for event in ordered:
        run = run_by_trace[event.trace_id]
        is_root = not event.parent_span_id
        hints = dict(event.run_hints)
        if is_root:
            # The root span names the run and carries its input and output.
            hints = {"name": event.name, "input": event.input, "output": event.output, **hints}
        for name, value in hints.items():
            if name not in RUN_HINT_FIELDS or value in (None, "", [], {}):
                continue
            if name in run.explicit_fields:
                continue
            if is_root or getattr(run, name) in (None, "", [], {}):
                setattr(run, name, redactor.apply(value) if name in ("input", "output", "metadata") else value)
                changed.add(name)
    for event in run_events:
        run = run_by_trace[event.trace_id]
        for name, value in event.fields.items():
            if name not in RUN_FIELDS:
                continue
            if name in ("input", "output", "metadata", "error"):
                value = redactor.apply(value)
            setattr(run, name, value)
            changed.add(name)
            if name not in run.explicit_fields:
                run.explicit_fields = [*run.explicit_fields, name]
                changed.add("explicit_fields")
            if name == "status":
                run.status_explicit = True
                changed.add("status_explicit")
    for trace_id, run in run_by_trace.items():
        run.updated_at = now
        if run.parent_trace_id != parent_trace_before[trace_id] and run.parent_run_id is not None:
            # Named another parent (or none): _link_parent_runs links it again.
            run.parent_run_id = None
            changed.add("parent_run")
    _copy_upsert(
        Run,
        list(run_by_trace.values()),
        unique_fields=["project", "trace_id"],
        update_fields=sorted(changed | {"updated_at"}),
    )
    return run_by_trace, created, waiting_children


def _upsert_steps(project, run_by_trace, events, redactor: Redactor, now) -> int:
    rows = []
    for event in events:
        cost, unpriced, price_id = None, False, None
        if event.model or event.kind == Step.Kind.LLM:
            computed = step_cost(
                model=event.model,
                input_tokens=event.input_tokens,
                cached_input_tokens=event.cached_input_tokens,
                output_tokens=event.output_tokens,
                at=event.started_at or now,
            )
            cost, price_id = computed.amount, computed.price_id
            unpriced = computed.amount is None and (
                event.kind == Step.Kind.LLM or event.input_tokens or event.output_tokens
            )
        rows.append(
            dict(
                organization_id=project.organization_id,
                project_id=project.pk,
                run_id=run_by_trace[event.trace_id].pk,
                span_id=event.span_id,
                parent_span_id=event.parent_span_id or "",
                kind=event.kind,
                name=event.name[:500],
                started_at=event.started_at,
                ended_at=event.ended_at,
                duration_ms=_duration_ms(event.started_at, event.ended_at),
                status=event.status,
                error=redactor.apply(event.error) or "",
                model=event.model[:200],
                provider=event.provider[:100],
                input_tokens=max(event.input_tokens, 0),
                cached_input_tokens=max(event.cached_input_tokens, 0),
                output_tokens=max(event.output_tokens, 0),
                cost=cost,
                unpriced=bool(unpriced),
                price_id=price_id,
                input=redactor.apply(event.input),
                output=redactor.apply(event.output),
                attributes=redactor.apply(event.attributes) or {},
                events=redactor.apply(event.events) or [],
                created_at=now,
            )
        )
    _copy_upsert(Step, rows, unique_fields=["run", "span_id"], update_fields=STEP_FIELDS)
    return len(rows)


# One encoder for every document: json.dumps() with any option builds a new one per call.
_STRICT_JSON = json.JSONEncoder(allow_nan=False)


def _jsonb_text(value: Any) -> str:
    """``value`` as JSON that ``jsonb`` takes. Callers other than the OTLP mapping and
    the batch API (which clean or refuse them) may hand over NaN, Infinity, NUL
    characters or unpaired surrogates (a webhook tool's answer, say): jsonb refuses
    them, and the whole batch would fail. They are cleaned as the OTLP mapping does."""
    try:
        text = _STRICT_JSON.encode(value)
    except (ValueError, TypeError):
        text = None
    # Escaped: a NUL is \u0000; an unpaired surrogate, like every astral character, \udXXX.
    if text is None or "\\u0000" in text or "\\ud" in text:
        from runs.otlp.mapping import json_safe  # here: the mapping imports this module

        text = _STRICT_JSON.encode(json_safe(value))
    return text


# Up to this many rows, one multi-row INSERT; beyond, COPY through a temporary table.
SMALL_UPSERT_ROWS = 20


def _copy_upsert(model, rows: list, *, unique_fields: list[str], update_fields: list[str]) -> None:
    """Insert or update ``rows`` (dicts by attribute name, or model instances; with no
    ``update_fields``, existing rows are left alone) through
    COPY into a temporary table and one INSERT ... ON CONFLICT DO UPDATE: the fastest
    way PostgreSQL takes many rows of large JSON (about 3x bulk_create's, measured with
    bench/ingest_otlp.py). Values go to psycopg as the builders above made them, JSON
    wrapped as Jsonb; only what PostgreSQL would refuse (NUL characters, unpaired
    surrogates, NaN) is cleaned on the way."""
    if not rows:
        return
    meta = model._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    attnames = [f.attname for f in fields]
    is_json = [isinstance(f, JSONField) for f in fields]
    defaults = {f.attname: f.get_default() for f in fields}
    columns = ", ".join(connection.ops.quote_name(f.column) for f in fields)
    table = connection.ops.quote_name(meta.db_table)
    temp = connection.ops.quote_name(f"_ingest_{meta.db_table}")
    conflict = ", ".join(connection.ops.quote_name(meta.get_field(name).column) for name in unique_fields)
    updates = ", ".join(
        f"{column} = EXCLUDED.{column}"
        for column in (connection.ops.quote_name(meta.get_field(name).column) for name in update_fields)
    )
    on_conflict = f"DO UPDATE SET {updates}" if updates else "DO NOTHING"
    from runs.otlp.mapping import clean_text  # here: the mapping imports this module

    def storable(value: Any, is_json_column: bool) -> Any:
        if value is None:
            return None
        if is_json_column:
            return Jsonb(value, dumps=_jsonb_text)
        if isinstance(value, str):
            return clean_text(value)
        if isinstance(value, list):  # an array of text
            return [clean_text(item) if isinstance(item, str) else item for item in value]
        return value

    def values_of(row) -> list:
        get = row.get if isinstance(row, dict) else (lambda name, default, obj=row: getattr(obj, name))
        return [
            storable(get(name, defaults[name]), json_column)
            for name, json_column in zip(attnames, is_json, strict=True)
        ]

    with connection.cursor() as cursor:
        if len(rows) <= SMALL_UPSERT_ROWS:
            # A few rows (the executor's steps): one INSERT ... VALUES beats the four
            # statements of the COPY path.
            placeholders = "(" + ", ".join(["%s"] * len(fields)) + ")"
            cursor.execute(
                f"INSERT INTO {table} ({columns}) VALUES {', '.join([placeholders] * len(rows))} "  # noqa: S608
                f"ON CONFLICT ({conflict}) {on_conflict}",
                [value for row in rows for value in values_of(row)],
            )
            return
        # One temporary table per connection, emptied before each use and at commit.
        cursor.execute(
            f"CREATE TEMP TABLE IF NOT EXISTS {temp} ON COMMIT DELETE ROWS AS "  # noqa: S608 - quoted constants
            f"SELECT {columns} FROM {table} WITH NO DATA"
        )
        cursor.execute(f"TRUNCATE {temp}")
        with cursor.cursor.copy(f"COPY {temp} ({columns}) FROM STDIN") as copy:
            for row in rows:
                copy.write_row(values_of(row))
        cursor.execute(
            f"INSERT INTO {table} ({columns}) SELECT {columns} FROM {temp} "  # noqa: S608 - names are quoted constants
            f"ON CONFLICT ({conflict}) {on_conflict}"
        )


def _upsert_messages(project, run_by_trace, events, redactor: Redactor, now) -> int:
    rows = [
        dict(
            organization_id=project.organization_id,
            project_id=project.pk,
            run_id=run_by_trace[e.trace_id].pk,
            span_id=e.span_id,
            message_id=e.message_id,
            position=e.position,
            role=e.role[:32],
            content=redactor.apply(e.content),
            tool_calls=redactor.apply(e.tool_calls) or [],
            tool_call_id=e.tool_call_id[:200],
            name=e.name[:200],
            tokens=e.tokens,
            finish_reason=e.finish_reason[:64],
            created_at=now,
        )
        for e in events
    ]
    if rows:
        _copy_upsert(
            Message,
            rows,
            unique_fields=["run", "message_id"],
            update_fields=[
                "span_id",
                "position",
                "role",
                "content",
                "tool_calls",
                "tool_call_id",
                "name",
                "tokens",
                "finish_reason",
            ],
        )
    return len(rows)


def _upsert_tool_calls(project, run_by_trace, events, redactor: Redactor, now) -> int:
    rows = [
        dict(
            organization_id=project.organization_id,
            project_id=project.pk,
            run_id=run_by_trace[e.trace_id].pk,
            span_id=e.span_id,
            call_id=e.call_id,
            tool_name=e.tool_name[:200],
            arguments=redactor.apply(e.arguments),
            result=redactor.apply(e.result),
            error=redactor.apply(e.error) or "",
            latency_ms=e.latency_ms,
            started_at=e.started_at,
            created_at=now,
        )
        for e in events
    ]
    if rows:
        _copy_upsert(
            ToolCall,
            rows,
            unique_fields=["run", "call_id"],
            update_fields=["span_id", "tool_name", "arguments", "result", "error", "latency_ms", "started_at"],
        )
    return len(rows)


def _upsert_snapshots(project, run_by_trace, events, redactor: Redactor, now) -> int:
    rows = [
        dict(
            organization_id=project.organization_id,
            project_id=project.pk,
            run_id=run_by_trace[e.trace_id].pk,
            span_id=e.span_id,
            snapshot_id=e.snapshot_id,
            sequence=e.sequence,
            state=redactor.apply(e.state),
            taken_at=e.taken_at,
            created_at=now,
        )
        for e in events
    ]
    if rows:
        _copy_upsert(
            MemorySnapshot,
            rows,
            unique_fields=["run", "snapshot_id"],
            update_fields=["span_id", "sequence", "state", "taken_at"],
        )
    return len(rows)


def _link_to_steps(run_ids: list[int]) -> None:
    """Tie messages, tool calls and snapshots to their step by span id, whichever arrived first."""
    with connection.cursor() as cursor:
        for table in ("runs_message", "runs_toolcall", "runs_memorysnapshot"):
            cursor.execute(
                f"""
                UPDATE {table} AS item SET step_id = step.id
                FROM runs_step AS step
                WHERE item.run_id = ANY(%s) AND item.span_id <> '' AND item.step_id IS NULL
                  AND step.run_id = item.run_id AND step.span_id = item.span_id
                """,  # noqa: S608 - table names are constants
                [run_ids],
            )


def _link_parent_runs(project, run_ids: list[int], waiting_children: list[int]) -> None:
    """Tie sub-agent runs to their parent run by the parent's trace id, in either order.
    Only runs this batch has locked are written (``run_ids`` and the ``waiting_children``
    of its runs): a child that appeared since is linked by its own batch, or by the next
    one of its parent."""
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE runs_run AS child SET parent_run_id = parent.id
            FROM runs_run AS parent
            WHERE child.id = ANY(%s) AND child.parent_trace_id <> '' AND child.parent_run_id IS NULL
              AND parent.project_id = %s AND parent.trace_id = child.parent_trace_id AND parent.id <> child.id
              AND (child.id = ANY(%s) OR parent.id = ANY(%s))
            """,
            [run_ids + waiting_children, project.pk, run_ids, run_ids],
        )


def recompute_run_totals(run_ids: list[int]) -> None:
    """Recompute totals, time span, status, error and search text of ``run_ids`` from
    their steps, in one statement. Runs whose client stated a status or an error keep it."""
    if not run_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            WITH totals AS (
                SELECT run_id,
                       count(*) AS step_count,
                       count(*) FILTER (WHERE status = 'error') AS error_count,
                       count(*) FILTER (WHERE kind = 'llm') AS llm_call_count,
                       coalesce(sum(input_tokens), 0) AS input_tokens,
                       coalesce(sum(cached_input_tokens), 0) AS cached_input_tokens,
                       coalesce(sum(output_tokens), 0) AS output_tokens,
                       coalesce(sum(cost), 0) AS total_cost,
                       count(*) FILTER (WHERE unpriced) AS unpriced_step_count,
                       coalesce(array_agg(DISTINCT model) FILTER (WHERE model <> ''), '{}') AS models_used,
                       min(started_at) AS first_start,
                       max(ended_at) AS last_end,
                       -- A root step has ended when it has an end time or a final status (a
                       -- status is only known at the end, and scripts may send no times).
                       bool_or(parent_span_id = '' AND status = 'error') AS root_failed,
                       bool_or(parent_span_id = '' AND (ended_at IS NOT NULL OR status <> 'unset')) AS root_ended,
                       max(error) FILTER (WHERE parent_span_id = '' AND status = 'error') AS root_error
                FROM runs_step WHERE run_id = ANY(%s) GROUP BY run_id
            )
            UPDATE runs_run AS run SET
                step_count = totals.step_count,
                error_count = totals.error_count,
                llm_call_count = totals.llm_call_count,
                input_tokens = totals.input_tokens,
                cached_input_tokens = totals.cached_input_tokens,
                output_tokens = totals.output_tokens,
                total_cost = totals.total_cost,
                unpriced_step_count = totals.unpriced_step_count,
                models_used = totals.models_used,
                started_at = LEAST(run.started_at, totals.first_start),
                ended_at = CASE WHEN run.status_explicit AND run.status NOT IN ('succeeded', 'failed', 'cancelled')
                                THEN run.ended_at ELSE GREATEST(run.ended_at, totals.last_end) END,
                status = CASE
                    WHEN run.status_explicit THEN run.status
                    WHEN totals.root_failed THEN 'failed'
                    WHEN totals.root_ended THEN 'succeeded'
                    ELSE 'running' END,
                -- Unless the client stated it, the error is the root step's as it is now: a
                -- root re-sent as succeeded must not leave its old error on the run.
                error = CASE WHEN 'error' = ANY(run.explicit_fields) THEN run.error
                             WHEN totals.root_failed THEN coalesce(totals.root_error, '')
                             ELSE '' END
            FROM totals WHERE run.id = totals.run_id
            """,
            [run_ids],
        )
        cursor.execute(
            """
            UPDATE runs_run SET
                -- Never negative: a client clock stepping back can end a run before it starts.
                latency_ms = CASE WHEN started_at IS NOT NULL AND ended_at IS NOT NULL
                                  THEN GREATEST(extract(epoch FROM ended_at - started_at) * 1000, 0)::bigint END,
                -- The payloads as JSON text, where a newline, a tab or a carriage return is
                -- a backslash and a letter: as they are, "a\\nrefund" would index "nrefund".
                search = to_tsvector('simple', replace(replace(replace(
                    left(coalesce(name, '') || ' ' || coalesce(input::text, '') || ' ' || coalesce(output::text, ''),
                         500000),
                    '\\n', ' '), '\\t', ' '), '\\r', ' '))
            WHERE id = ANY(%s)
            """,
            [run_ids],
        )
