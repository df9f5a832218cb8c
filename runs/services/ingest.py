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
from functools import cache
from typing import Any

from django.core.exceptions import ImproperlyConfigured
from django.db import connection, transaction
from django.db.models import JSONField
from django.utils import timezone
from psycopg.sql import Literal
from psycopg.types.json import Jsonb

from agentops.jsonsafe import storable_lossless, storable_text
from agentops.models import Project
from billing.ledger import ledger_mark
from billing.services import step_cost, tool_cost
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
# Run fields its search text is made of.
SEARCHED_RUN_FIELDS = ("name", "input", "output")


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


def _characters(value: Any) -> int:
    """How many characters a tool was given (the unit of tools priced per character,
    such as text to speech): the text itself, or the JSON of structured input."""
    if value is None:
        return 0
    if isinstance(value, str):
        return len(value)
    if isinstance(value, dict) and len(value) == 1 and isinstance(next(iter(value.values())), str):
        return len(next(iter(value.values())))  # {"text": "..."}: the text
    return len(json.dumps(value, default=str))


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
    redactor: Redactor | None = None,
    api_key=None,
) -> IngestResult:
    """Store a batch of trace data for ``project`` durably; see the module docstring.

    ``redactor``: the project's, for a caller that sends many batches (the executor, for
    a whole run); read from the project's settings when not given. ``api_key``: the key
    that sent the batch, recorded on the runs it creates (the ledger counts spend by key).
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
        upserted = _upsert_runs(project, trace_ids, runs, steps, redactor, now)
        run_by_trace = upserted.run_by_trace
        result.runs_created = [run_by_trace[t].pk for t in upserted.created]
        result.runs_touched = sorted(run.pk for run in run_by_trace.values())
        upserts = (
            _steps_upsert(project, run_by_trace, steps, redactor, now),
            _messages_upsert(project, run_by_trace, messages, redactor, now),
            _tool_calls_upsert(project, run_by_trace, tool_calls, redactor, now),
            _snapshots_upsert(project, run_by_trace, snapshots, redactor, now),
        )
        _copy_upsert(*upserts)
        result.steps, result.messages, result.tool_calls, result.snapshots = (len(u.rows) for u in upserts)
        _link_parent_runs(project, list(run_by_trace.values()), upserted.waiting_children)
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
                if steps or items
            ],
        )
        if api_key is not None and result.runs_created:
            Run.objects.filter(pk__in=result.runs_created, api_key__isnull=True).update(api_key=api_key)
        ledger_mark(organization_id=project.organization_id, run_ids=result.runs_touched)
        if announce:
            runs_changed = [{"id": pk, "new": pk in result.runs_created} for pk in result.runs_touched]
            transaction.on_commit(lambda: announce_runs_ingested(project=project, runs=runs_changed))
    return result


@dataclass
class _UpsertedRuns:
    run_by_trace: dict[str, Run]
    # Trace ids of the runs this batch inserted: the new runs, announced as new.
    created: list[str]
    # Other runs locked: sub-agent runs waiting for one of these runs as their parent.
    waiting_children: list[int]
    # Trace ids of the runs whose name, input or output this batch set (their search text).
    search_changed: set[str]


@cache
def _run_columns() -> tuple[list, str]:
    """The run fields ingest reads back, and their columns as SQL: all but the executor's
    state and the search text, which grow large and which ingest never reads."""
    fields = [f for f in Run._meta.concrete_fields if f.attname not in ("execution", "search")]
    return fields, ", ".join(connection.ops.quote_name(f.column) for f in fields)


def _runs_from_rows(rows) -> list[Run]:
    """Run instances of rows of ``_run_columns()`` (without those two, which stay deferred)."""
    fields, _ = _run_columns()
    attnames = [f.attname for f in fields]
    json_positions = [i for i, f in enumerate(fields) if isinstance(f, JSONField)]
    runs = []
    for row in rows:
        values = list(row)
        for i in json_positions:  # jsonb comes as text (Django's loader), as for a queryset
            values[i] = fields[i].from_db_value(values[i], None, connection)
        runs.append(Run.from_db(connection.alias, attnames, values))
    return runs


@cache
def _insert_runs_sql() -> str:
    """INSERT of new runs, one per trace id of ``%(trace_ids)s``, returning them. Their
    defaults are written into it as constants (typed: a SELECT does not take its
    columns' types from the INSERT as VALUES would): with a handful of parameters and
    under 4 kB, psycopg parses it once per process instead of once per batch."""
    _, columns = _run_columns()
    new_fields = [f for f in Run._meta.concrete_fields if not f.primary_key]
    given = {"organization_id": "%(organization_id)s", "project_id": "%(project_id)s", "trace_id": "batch.trace_id"}
    given |= {"created_at": "%(now)s::timestamptz", "updated_at": "%(now)s::timestamptz"}
    values = []
    for f in new_fields:
        if f.attname in given:
            values.append(given[f.attname])
            continue
        if f.has_default() and callable(f.default) and f.default not in (dict, list):
            raise ImproperlyConfigured(f"Run.{f.name}: ingest cannot write its default as a constant")
        literal = Literal(_storable(f.get_default(), isinstance(f, JSONField))).as_string(connection.connection)
        values.append(f"{literal.replace('%', '%%')}::{f.db_type(connection)}")
    # In trace id order, as every batch: of two batches creating the same runs, the
    # second waits at the first one they share, before it has created any other.
    return f"""
        INSERT INTO runs_run ({", ".join(connection.ops.quote_name(f.column) for f in new_fields)})
        SELECT {", ".join(values)} FROM unnest(%(trace_ids)s::text[]) WITH ORDINALITY AS batch(trace_id, position)
        ORDER BY batch.position
        ON CONFLICT (project_id, trace_id) DO NOTHING
        RETURNING {columns}
        """  # noqa: S608 - names are quoted constants, defaults quoted literals


def _lock_runs(project, trace_ids: list[str], now) -> tuple[list[Run], list[Run]]:
    """Lock the runs of ``trace_ids`` and the sub-agent runs waiting for one of them as
    their parent, then create the runs that do not exist yet. Returns (created, locked)."""
    _, columns = _run_columns()
    params = {"organization_id": project.organization_id, "project_id": project.pk, "now": now}
    with connection.cursor() as cursor:
        # Every lock a batch needs on existing runs, in one statement in id order. The
        # sub-agent runs waiting for one of these runs as their parent are locked too:
        # linking them writes to them, and a lock taken then, out of id order, could
        # deadlock with a batch that holds that child and waits for one of ours.
        cursor.execute(
            f"SELECT {columns} FROM runs_run WHERE project_id = %(project_id)s "  # noqa: S608 - quoted constants
            "AND (trace_id = ANY(%(trace_ids)s) OR (parent_trace_id = ANY(%(trace_ids)s) AND parent_run_id IS NULL)) "
            "ORDER BY id FOR UPDATE",
            {**params, "trace_ids": trace_ids},
        )
        locked = _runs_from_rows(cursor.fetchall())
        existing = {run.trace_id for run in locked}
        missing = [t for t in trace_ids if t not in existing]
        if not missing:
            return [], locked  # the usual batch: its runs exist (an executed run's, always)
        # New runs are this batch's own until it commits: another batch creating one of
        # them too waits at its INSERT for this one to commit, and this one never waits
        # for the runs that batch has locked (it writes only runs it locked or created).
        cursor.execute(_insert_runs_sql(), {**params, "trace_ids": missing})
        created = _runs_from_rows(cursor.fetchall())
        inserted = {run.trace_id for run in created}
        raced = [t for t in missing if t not in inserted]
        if raced:
            # Another batch created them since the lock above (the INSERT waited for it to
            # commit): lock them now. The one lock out of id order, and only when two
            # batches create a run at once.
            cursor.execute(
                f"SELECT {columns} FROM runs_run WHERE project_id = %s AND trace_id = ANY(%s) "  # noqa: S608
                "ORDER BY id FOR UPDATE",
                [project.pk, raced],
            )
            locked += _runs_from_rows(cursor.fetchall())
    return created, locked


def _upsert_runs(project, trace_ids, run_events, step_events, redactor: Redactor, now) -> _UpsertedRuns:
    """Lock (or create) the runs of ``trace_ids`` and merge what the events say. Their
    ``updated_at`` is left to recompute_run_totals(), which writes every run anyway."""
    created, locked = _lock_runs(project, trace_ids, now)
    batch_traces = set(trace_ids)
    run_by_trace, waiting_children = {}, []
    for run in created + locked:
        if run.trace_id in batch_traces:
            run_by_trace[run.trace_id] = run
        else:
            waiting_children.append(run.pk)

    changed: set[str] = set()  # the fields written, of every run in changed_runs
    changed_runs: set[str] = set()
    search_changed: set[str] = set()

    def merge(run, name, value):
        setattr(run, name, value)
        changed.add(name)
        changed_runs.add(run.trace_id)
        if name in SEARCHED_RUN_FIELDS:
            search_changed.add(run.trace_id)

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
                merge(run, name, redactor.apply(value) if name in ("input", "output", "metadata") else value)
    for event in run_events:
        run = run_by_trace[event.trace_id]
        for name, value in event.fields.items():
            if name not in RUN_FIELDS:
                continue
            if name in ("input", "output", "metadata", "error"):
                value = redactor.apply(value)
            merge(run, name, value)
            if name not in run.explicit_fields:
                merge(run, "explicit_fields", [*run.explicit_fields, name])
            if name == "status":
                merge(run, "status_explicit", True)
    for trace_id, run in run_by_trace.items():
        if run.parent_trace_id != parent_trace_before[trace_id] and run.parent_run_id is not None:
            # Named another parent (or none): _link_parent_runs links it again.
            merge(run, "parent_run_id", None)
    if changed:
        # Every run exists and is locked: this INSERT only ever updates.
        _copy_upsert(
            _Upsert(
                Run,
                [
                    {
                        "organization_id": project.organization_id,
                        "project_id": project.pk,
                        "trace_id": run.trace_id,
                        **{name: getattr(run, name) for name in changed},
                    }
                    for trace_id, run in run_by_trace.items()
                    if trace_id in changed_runs
                ],
                unique_fields=("project", "trace_id"),
                update_fields=tuple(sorted(changed)),
            )
        )
    return _UpsertedRuns(
        run_by_trace=run_by_trace,
        created=[run.trace_id for run in created],
        waiting_children=waiting_children,
        search_changed=search_changed,
    )


def _steps_upsert(project, run_by_trace, events, redactor: Redactor, now) -> _Upsert:
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
                organization_id=project.organization_id,
            )
            cost, price_id = computed.amount, computed.price_id
            unpriced = computed.amount is None and (
                event.kind == Step.Kind.LLM or event.input_tokens or event.output_tokens
            )
        elif event.kind == Step.Kind.TOOL:
            # A tool with a price (per call, character of its input, or second): most
            # have none and cost nothing, which is not "unpriced".
            duration = _duration_ms(event.started_at, event.ended_at)
            computed = tool_cost(
                tool_name=event.name,
                characters=_characters(event.input),
                seconds=(duration or 0) / 1000,
                at=event.started_at or now,
                organization_id=project.organization_id,
            )
            cost, price_id = computed.amount, computed.price_id
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
    return _Upsert(Step, rows, unique_fields=("run", "span_id"), update_fields=STEP_FIELDS)


# One encoder for every document: json.dumps() with any option builds a new one per call.
_STRICT_JSON = json.JSONEncoder(allow_nan=False)


def _jsonb_text(value: Any) -> str:
    """``value`` as JSON that ``jsonb`` takes. Callers other than the OTLP mapping and
    the batch API (which clean or refuse them) may hand over NaN, Infinity, NUL
    characters or unpaired surrogates (a webhook tool's answer, say): jsonb refuses
    them, and the whole batch would fail. They are cleaned as the OTLP mapping does
    (lossless: NaN is kept as text)."""
    try:
        text = _STRICT_JSON.encode(value)
    except (ValueError, TypeError):
        text = None
    # Escaped: a NUL is \u0000; an unpaired surrogate, like every astral character, \udXXX.
    if text is None or "\\u0000" in text or "\\ud" in text:
        text = _STRICT_JSON.encode(storable_lossless(value))
    return text


def _storable(value: Any, is_json_column: bool) -> Any:
    """``value`` as psycopg takes it for a column: JSON wrapped as Jsonb, text cleaned of
    what PostgreSQL would refuse."""
    if value is None:
        return None
    if is_json_column:
        return Jsonb(value, dumps=_jsonb_text)
    if isinstance(value, str):
        return storable_text(value)
    if isinstance(value, list):  # an array of text
        return [storable_text(item) if isinstance(item, str) else item for item in value]
    return value


# Up to this many rows, one multi-row INSERT; beyond, COPY through a temporary table.
SMALL_UPSERT_ROWS = 20


@dataclass
class _Upsert:
    """Rows (dicts by attribute name) to insert into ``model``'s table, or to update on
    ``unique_fields`` (only ``update_fields``; with none, existing rows are left alone)."""

    model: type
    rows: list[dict]
    unique_fields: tuple[str, ...]
    update_fields: tuple[str, ...]


@dataclass(frozen=True)
class _UpsertSQL:
    fields: list
    columns: str
    table: str
    on_conflict: str


@cache
def _upsert_sql(model, unique_fields: tuple[str, ...], update_fields: tuple[str, ...]) -> _UpsertSQL:
    """The parts of an upsert's SQL that depend only on its model and fields."""
    quote, meta = connection.ops.quote_name, model._meta
    fields = [f for f in meta.concrete_fields if not f.primary_key]
    conflict = ", ".join(quote(meta.get_field(name).column) for name in unique_fields)
    updates = ", ".join(
        f"{column} = EXCLUDED.{column}" for column in (quote(meta.get_field(name).column) for name in update_fields)
    )
    return _UpsertSQL(
        fields=fields,
        columns=", ".join(quote(f.column) for f in fields),
        table=quote(meta.db_table),
        on_conflict=f"ON CONFLICT ({conflict}) " + (f"DO UPDATE SET {updates}" if updates else "DO NOTHING"),
    )


def _copy_upsert(*upserts: _Upsert) -> None:
    """Write ``upserts``. Many rows go through COPY into a temporary table and one INSERT
    ... ON CONFLICT DO UPDATE: the fastest way PostgreSQL takes many rows of large JSON
    (about 3x bulk_create's, measured with bench/ingest_otlp.py). A few rows (the
    executor's batches) go as INSERT ... VALUES, those of every table in one statement:
    one round trip instead of one per table, or the four statements of the COPY path.
    Values go to psycopg as the builders above made them, JSON wrapped as Jsonb; only
    what PostgreSQL would refuse (NUL characters, unpaired surrogates, NaN) is cleaned on
    the way."""
    small, params = [], []
    with connection.cursor() as cursor:
        for upsert in upserts:
            if not upsert.rows:
                continue
            sql = _upsert_sql(upsert.model, upsert.unique_fields, upsert.update_fields)
            defaults = {f.attname: f.get_default() for f in sql.fields}
            json_columns = [isinstance(f, JSONField) for f in sql.fields]

            def values_of(row: dict, sql=sql, defaults=defaults, json_columns=json_columns) -> list:
                return [
                    _storable(row.get(f.attname, defaults[f.attname]), json_column)
                    for f, json_column in zip(sql.fields, json_columns, strict=True)
                ]

            if len(upsert.rows) <= SMALL_UPSERT_ROWS:
                placeholders = "(" + ", ".join(["%s"] * len(sql.fields)) + ")"
                small.append(
                    f"INSERT INTO {sql.table} ({sql.columns}) "  # noqa: S608 - names are quoted constants
                    f"VALUES {', '.join([placeholders] * len(upsert.rows))} {sql.on_conflict}"
                )
                params += [value for row in upsert.rows for value in values_of(row)]
                continue
            temp = connection.ops.quote_name(f"_ingest_{upsert.model._meta.db_table}")
            # One temporary table per connection, emptied before each use and at commit.
            cursor.execute(
                f"CREATE TEMP TABLE IF NOT EXISTS {temp} ON COMMIT DELETE ROWS AS "  # noqa: S608 - quoted constants
                f"SELECT {sql.columns} FROM {sql.table} WITH NO DATA"
            )
            cursor.execute(f"TRUNCATE {temp}")
            with cursor.cursor.copy(f"COPY {temp} ({sql.columns}) FROM STDIN") as copy:
                for row in upsert.rows:
                    copy.write_row(values_of(row))
            cursor.execute(
                f"INSERT INTO {sql.table} ({sql.columns}) SELECT {sql.columns} FROM {temp} {sql.on_conflict}"  # noqa: S608
            )
        if len(small) == 1:
            cursor.execute(small[0], params)
        elif small:
            # Data-modifying WITH queries run to their end even when nothing reads them.
            ctes = ", ".join(f"upsert_{i} AS ({statement})" for i, statement in enumerate(small))
            cursor.execute(f"WITH {ctes} SELECT 1", params)


def _messages_upsert(project, run_by_trace, events, redactor: Redactor, now) -> _Upsert:
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
    return _Upsert(
        Message,
        rows,
        unique_fields=("run", "message_id"),
        update_fields=(
            "span_id",
            "position",
            "role",
            "content",
            "tool_calls",
            "tool_call_id",
            "name",
            "tokens",
            "finish_reason",
        ),
    )


def _tool_calls_upsert(project, run_by_trace, events, redactor: Redactor, now) -> _Upsert:
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
    return _Upsert(
        ToolCall,
        rows,
        unique_fields=("run", "call_id"),
        update_fields=("span_id", "tool_name", "arguments", "result", "error", "latency_ms", "started_at"),
    )


def _snapshots_upsert(project, run_by_trace, events, redactor: Redactor, now) -> _Upsert:
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
    return _Upsert(
        MemorySnapshot,
        rows,
        unique_fields=("run", "snapshot_id"),
        update_fields=("span_id", "sequence", "state", "taken_at"),
    )


def _link_to_steps_sql(tables: Iterable[str]) -> list[str]:
    """WITH queries that tie the items of ``tables`` (messages, tool calls, snapshots) of
    the runs ``%(run_ids)s`` to their step by span id, whichever arrived first."""
    return [
        f"""
        {table}_linked AS (
            UPDATE {table} AS item SET step_id = step.id
            FROM runs_step AS step
            WHERE item.run_id = ANY(%(run_ids)s) AND item.span_id <> '' AND item.step_id IS NULL
              AND step.run_id = item.run_id AND step.span_id = item.span_id
        )"""  # noqa: S608 - table names are constants
        for table in tables
    ]


def _link_parent_runs(project, runs: list[Run], waiting_children: list[int]) -> None:
    """Tie sub-agent runs to their parent run by the parent's trace id, in either order.
    Only runs this batch has locked are written (``runs`` and the ``waiting_children``
    of its runs): a child that appeared since is linked by its own batch, or by the next
    one of its parent."""
    if not waiting_children and not any(run.parent_trace_id and run.parent_run_id is None for run in runs):
        return  # no run this batch has locked waits for its parent
    run_ids = [run.pk for run in runs]
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


# The run's time span as recompute_run_totals() sets it, for its latency in the same
# statement: the run's own times widened by its steps' (totals.* are NULL without steps,
# and LEAST and GREATEST skip NULLs). A status the client stated and that is not final
# keeps the run's end as stated.
_RUN_STARTED = "LEAST(run.started_at, totals.first_start)"
_ENDED_SQL = ", ".join(f"'{status}'" for status in sorted(Run.ENDED))
_RUN_ENDED = (
    f"CASE WHEN run.status_explicit AND run.status NOT IN ({_ENDED_SQL}) "
    "THEN run.ended_at ELSE GREATEST(run.ended_at, totals.last_end) END"
)


def recompute_run_totals(
    run_ids: list[int],
    *,
    updated_at: datetime | None = None,
    search_run_ids: list[int] | None = None,
    link_tables: Iterable[str] = (),
) -> None:
    """Recompute totals, time span, latency, status, error and search text of ``run_ids``
    from their steps, in one statement. Runs whose client stated a status or an error
    keep it; runs without steps keep theirs.

    The search text is recomputed for ``search_run_ids`` (by default all of ``run_ids``)
    and for runs that have none yet: it reads up to 500 kB of name, input and output, and
    only a change of those changes it; ingest() names the runs whose name, input or
    output it wrote. The other writers of runs (the executor, approvals) never write
    those.

    ``updated_at``: set it too. ``link_tables``: in the same statement, tie the items of
    these tables to their steps (see _link_to_steps_sql; the totals do not read them)."""
    if not run_ids:
        return
    if search_run_ids is None:
        search_run_ids = run_ids
    links = "".join(f"{cte}," for cte in _link_to_steps_sql(link_tables))
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH {links} totals AS (
                SELECT run_id,
                       count(*) AS step_count,
                       count(*) FILTER (WHERE status = 'error') AS error_count,
                       count(*) FILTER (WHERE kind = 'llm') AS llm_call_count,
                       coalesce(sum(input_tokens), 0) AS input_tokens,
                       coalesce(sum(cached_input_tokens), 0) AS cached_input_tokens,
                       coalesce(sum(output_tokens), 0) AS output_tokens,
                       coalesce(sum(cost), 0) AS total_cost,
                       count(*) FILTER (WHERE unpriced) AS unpriced_step_count,
                       coalesce(array_agg(DISTINCT model) FILTER (WHERE model <> ''), '{{}}') AS models_used,
                       min(started_at) AS first_start,
                       max(ended_at) AS last_end,
                       -- A root step has ended when it has an end time or a final status (a
                       -- status is only known at the end, and scripts may send no times).
                       bool_or(parent_span_id = '' AND status = 'error') AS root_failed,
                       bool_or(parent_span_id = '' AND (ended_at IS NOT NULL OR status <> 'unset')) AS root_ended,
                       max(error) FILTER (WHERE parent_span_id = '' AND status = 'error') AS root_error
                FROM runs_step WHERE run_id = ANY(%(run_ids)s) GROUP BY run_id
            )
            UPDATE runs_run AS run SET
                -- totals.* are NULL for a run without steps: it keeps its own.
                step_count = coalesce(totals.step_count, run.step_count),
                error_count = coalesce(totals.error_count, run.error_count),
                llm_call_count = coalesce(totals.llm_call_count, run.llm_call_count),
                input_tokens = coalesce(totals.input_tokens, run.input_tokens),
                cached_input_tokens = coalesce(totals.cached_input_tokens, run.cached_input_tokens),
                output_tokens = coalesce(totals.output_tokens, run.output_tokens),
                total_cost = coalesce(totals.total_cost, run.total_cost),
                unpriced_step_count = coalesce(totals.unpriced_step_count, run.unpriced_step_count),
                models_used = coalesce(totals.models_used, run.models_used),
                started_at = {_RUN_STARTED},
                ended_at = {_RUN_ENDED},
                -- Never negative: a client clock stepping back can end a run before it starts.
                latency_ms = CASE WHEN {_RUN_STARTED} IS NOT NULL AND {_RUN_ENDED} IS NOT NULL
                                  THEN GREATEST(extract(epoch FROM ({_RUN_ENDED}) - {_RUN_STARTED}) * 1000, 0)::bigint
                             END,
                status = CASE
                    WHEN run.status_explicit OR totals.run_id IS NULL THEN run.status
                    WHEN totals.root_failed THEN 'failed'
                    WHEN totals.root_ended THEN 'succeeded'
                    ELSE 'running' END,
                -- Unless the client stated it, the error is the root step's as it is now: a
                -- root re-sent as succeeded must not leave its old error on the run.
                error = CASE WHEN 'error' = ANY(run.explicit_fields) OR totals.run_id IS NULL THEN run.error
                             WHEN totals.root_failed THEN coalesce(totals.root_error, '')
                             ELSE '' END,
                -- The payloads as JSON text, where a newline, a tab or a carriage return is
                -- a backslash and a letter: as they are, "a\\nrefund" would index "nrefund".
                search = CASE WHEN run.search IS NULL OR run.id = ANY(%(search_run_ids)s)
                    THEN to_tsvector('simple', replace(replace(replace(
                        left(coalesce(name, '') || ' ' || coalesce(input::text, '') || ' '
                             || coalesce(output::text, ''), 500000),
                        '\\n', ' '), '\\t', ' '), '\\r', ' '))
                    ELSE run.search END,
                updated_at = coalesce(%(updated_at)s::timestamptz, run.updated_at)
            FROM unnest(%(run_ids)s::bigint[]) AS touched(id) LEFT JOIN totals ON totals.run_id = touched.id
            WHERE run.id = touched.id
            """,  # noqa: S608 - the interpolated fragments are constants
            {"run_ids": run_ids, "search_run_ids": search_run_ids, "updated_at": updated_at},
        )
