"""The runs of a batch: locked (or created) in an order that cannot deadlock, merged
with what the events say about them, and linked to their parent run.

A step may arrive before its run: its trace id creates the run. Fields a client stated
(``RunEvent``) win over what spans hint (``StepEvent.run_hints``), the root span's hints
over an inner span's; only runs this batch has locked are ever written.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from functools import cache, lru_cache

from django.contrib.postgres.fields import ArrayField
from django.core.exceptions import ImproperlyConfigured
from django.db import connection
from django.db.models import JSONField
from psycopg.sql import Literal

from runs.events import RUN_FIELDS, RUN_HINT_FIELDS
from runs.ingest.sql import records_parameter, storable
from runs.models import Run
from runs.services.redaction import Redactor

# Run fields its search text is made of.
SEARCHED_RUN_FIELDS = ("name", "input", "output")


@dataclass(slots=True)
class InsertedRun:
    """A run this batch inserted, as the rest of ``ingest()`` reads it: the events were
    merged into it before the INSERT, so only its id and its parent's trace are needed
    (a ``Run`` instance built from the whole returned row, its JSON parsed, was about 3%
    of the receiver's Python for a batch of new traces)."""

    pk: int
    trace_id: str
    parent_trace_id: str
    parent_run_id: int | None


@dataclass
class UpsertedRuns:
    # Runs that existed, locked (Run instances), and the runs inserted (InsertedRun).
    run_by_trace: dict[str, Run | InsertedRun]
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


# Run fields the events may set (``merge`` below): a new run is inserted with them.
MERGED_RUN_FIELDS = (*RUN_FIELDS, "explicit_fields", "status_explicit")


@cache
def _json_run_fields() -> frozenset[str]:
    return frozenset(name for name in MERGED_RUN_FIELDS if isinstance(Run._meta.get_field(name), JSONField))


def _as_read(f) -> str:
    """The type a run field is read as from a record of ``records_parameter``, before the
    cast to its column's type: JSON as jsonb, an array as text[], the rest as text."""
    return "jsonb" if isinstance(f, JSONField) else "text[]" if isinstance(f, ArrayField) else "text"


@cache
def _insert_runs_sql() -> str:
    """INSERT of new runs, one per record of ``%(runs)s`` (a JSON array, in trace id
    order: ``records_parameter``), returning them: the fields the events set
    (``MERGED_RUN_FIELDS``) from the records (read as jsonb, text[] or text, then cast to
    their columns' types, which cuts text to a varchar's length), the others their
    defaults written into it as constants (typed: a SELECT does not take its columns'
    types from the INSERT as VALUES would), returning what ``InsertedRun`` holds. The
    statement is the same for every batch: psycopg parses it once per process instead of
    once per batch."""
    new_fields = [f for f in Run._meta.concrete_fields if not f.primary_key]
    given = {"organization_id": "%(organization_id)s", "project_id": "%(project_id)s", "trace_id": "batch.trace_id"}
    given["api_key_id"] = "%(api_key_id)s::bigint"
    given |= {"created_at": "%(now)s::timestamptz", "updated_at": "%(now)s::timestamptz"}
    record = ["trace_id text"]
    for name in MERGED_RUN_FIELDS:
        f = Run._meta.get_field(name)
        record.append(f"{name} {_as_read(f)}")
        given[name] = f"batch.{name}::{f.db_type(connection)}"
    values = []
    for f in new_fields:
        if f.attname in given:
            values.append(given[f.attname])
            continue
        if f.has_default() and callable(f.default) and f.default not in (dict, list):
            raise ImproperlyConfigured(f"Run.{f.name}: ingest cannot write its default as a constant")
        literal = Literal(storable(f.get_default(), isinstance(f, JSONField))).as_string(connection.connection)
        values.append(f"{literal.replace('%', '%%')}::{f.db_type(connection)}")
    # In trace id order, as every batch: of two batches creating the same runs, the
    # second waits at the first one they share, before it has created any other.
    return f"""
        INSERT INTO runs_run ({", ".join(connection.ops.quote_name(f.column) for f in new_fields)})
        SELECT {", ".join(values)}
        FROM ROWS FROM (jsonb_to_recordset(%(runs)s::jsonb) AS ({", ".join(record)})) WITH ORDINALITY
            AS batch(trace_id, {", ".join(MERGED_RUN_FIELDS)}, position)
        ORDER BY batch.position
        ON CONFLICT (project_id, trace_id) DO NOTHING
        RETURNING id, trace_id, parent_trace_id, parent_run_id
        """  # noqa: S608 - names are quoted constants, defaults quoted literals


# The ids of project %(project_id)s's runs of the trace ids %(trace_ids)s: each trace id
# looked up alone in run_unique_trace, which leads with the trace id, and the project
# checked after the lookup (OFFSET 0 keeps the check out of it). With the project in the
# lookup, the planner could take one of the run_project_* indexes instead whenever it
# believed the project had at most one run (a table without statistics yet, or a project
# newer than them) and read all of the project's runs for every trace id of every batch:
# at 1,600 runs, 23 ms of a 512-span batch; quadratic as the project grew. A trace id
# has one run per project that sent it (almost always one), so the lookup reads as many.
_RUNS_OF_TRACES = (
    "SELECT found.id FROM unnest(%(trace_ids)s::text[]) AS batch(trace_id) CROSS JOIN LATERAL ("
    "  SELECT id, project_id FROM runs_run WHERE trace_id = batch.trace_id OFFSET 0"
    ") AS found WHERE found.project_id = %(project_id)s"
)


def runs_of_traces(project, trace_ids) -> dict[str, int]:
    """{trace id: run id} of ``project``'s runs of ``trace_ids`` that exist (the lookup of
    ``_RUNS_OF_TRACES``, without locking them)."""
    if not trace_ids:
        return {}
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT trace_id, id FROM runs_run WHERE id = ANY(ARRAY({_RUNS_OF_TRACES}))",  # noqa: S608 - a constant
            {"project_id": project.pk, "trace_ids": sorted(trace_ids)},
        )
        return dict(cursor.fetchall())


def _lock_runs(project, trace_ids: list[str]) -> tuple[list[Run], list[str]]:
    """Lock the runs of ``trace_ids`` and the sub-agent runs waiting for one of them as
    their parent. Returns (the runs locked, the trace ids of ``trace_ids`` with no run)."""
    _, columns = _run_columns()
    with connection.cursor() as cursor:
        # Every lock a batch needs on existing runs, in one statement in id order. The
        # sub-agent runs waiting for one of these runs as their parent are locked too:
        # linking them writes to them, and a lock taken then, out of id order, could
        # deadlock with a batch that holds that child and waits for one of ours.
        # The runs of the trace ids are found by _RUNS_OF_TRACES; the waiting runs in
        # run_waiting_for_parent, which holds them only (its condition repeated here):
        # without statistics yet (a new table, the first minute of an installation) the
        # planner took the project's index for it and read all its runs.
        cursor.execute(
            f"SELECT {columns} FROM runs_run WHERE id = ANY(ARRAY("  # noqa: S608 - quoted constants
            f"  {_RUNS_OF_TRACES}"
            "  UNION ALL"
            "  SELECT id FROM runs_run WHERE project_id = %(project_id)s AND parent_trace_id = ANY(%(trace_ids)s)"
            "  AND parent_run_id IS NULL AND parent_trace_id <> ''"
            ")) ORDER BY id FOR UPDATE",
            {"project_id": project.pk, "trace_ids": trace_ids},
        )
        locked = _runs_from_rows(cursor.fetchall())
    existing = {run.trace_id for run in locked}
    return locked, [t for t in trace_ids if t not in existing]


def _insert_runs(project, new_runs: list[_NewRun], now, api_key=None) -> tuple[list[InsertedRun], list[str]]:
    """Insert ``new_runs`` (their fields merged from the events), recording
    ``api_key`` on them. Returns (the runs inserted, as stored; the trace ids another
    batch created first, which are not).

    New runs are this batch's own until it commits: another batch creating one of them
    too waits at its INSERT for this one to commit, and this one never waits for the
    runs that batch has locked (it writes only runs it locked or created)."""
    params = {
        "organization_id": project.organization_id,
        "project_id": project.pk,
        "now": now,
        "api_key_id": api_key.pk if api_key is not None else None,
        "runs": records_parameter(
            [
                {"trace_id": run.trace_id, **{name: getattr(run, name) for name in MERGED_RUN_FIELDS}}
                for run in new_runs
            ],
            _json_run_fields(),
        ),
    }
    with connection.cursor() as cursor:
        cursor.execute(_insert_runs_sql(), params)
        created = [InsertedRun(*row) for row in cursor.fetchall()]
    inserted = {run.trace_id for run in created}
    return created, [run.trace_id for run in new_runs if run.trace_id not in inserted]


def _lock_raced_runs(project, trace_ids: list[str]) -> list[Run]:
    """Lock runs another batch created since ``_lock_runs`` (this batch's INSERT waited
    for it to commit): the one lock out of id order, and only when two batches create
    a run at once."""
    _, columns = _run_columns()
    with connection.cursor() as cursor:
        cursor.execute(
            f"SELECT {columns} FROM runs_run WHERE id = ANY(ARRAY({_RUNS_OF_TRACES})) ORDER BY id FOR UPDATE",  # noqa: S608
            {"project_id": project.pk, "trace_ids": trace_ids},
        )
        return _runs_from_rows(cursor.fetchall())


class _NewRun:
    """A run to insert: the fields ``_merge_events`` reads and writes, with Run's
    defaults (a model instance costs several times more to build, one per new trace)."""

    def __init__(self, trace_id: str):
        constants, factories = _new_run_defaults()
        self.__dict__.update(constants)
        for name, factory in factories:
            setattr(self, name, factory())  # a new list or dict for each run
        self.trace_id = trace_id
        self.parent_run_id = None


@cache
def _new_run_defaults() -> tuple[dict, list]:
    """The defaults of the fields a ``_NewRun`` holds, as ``get_default()`` gives them:
    (the constant ones by name, (name, factory) of those made by a call), worked out once
    rather than by a call per field and new run."""
    constants, factories = {}, []
    for name in (*MERGED_RUN_FIELDS, "parent_trace_id"):
        field_ = Run._meta.get_field(name)
        if field_.has_default() and callable(field_.default):
            factories.append((name, field_.default))
        else:
            constants[name] = field_.get_default()
    return constants, factories


@dataclass
class _Merged:
    """What merging the events changed: the fields written (of every run changed), the
    trace ids of the runs changed, and of those whose name, input or output changed."""

    fields: set[str] = field(default_factory=set)
    runs: set[str] = field(default_factory=set)
    search: set[str] = field(default_factory=set)


def _merge_events(run_by_trace: dict[str, Run], run_events, step_events, redactor: Redactor) -> _Merged:
    """Merge into ``run_by_trace``'s runs what the events say about them (only the runs
    of the events' traces that it holds)."""
    merged = _Merged()

    def merge(run, name, value):
        setattr(run, name, value)
        merged.fields.add(name)
        merged.runs.add(run.trace_id)
        if name in SEARCHED_RUN_FIELDS:
            merged.search.add(run.trace_id)

    parent_trace_before = {trace_id: run.parent_trace_id for trace_id, run in run_by_trace.items()}
    # Hints of inner spans only fill gaps; the root span's hints win over them (a
    # sub-agent's span may arrive before the root); explicit run events win over both.
    ordered = sorted(step_events, key=lambda e: not e.parent_span_id)
    for event in ordered:
        run = run_by_trace.get(event.trace_id)
        if run is None:
            continue
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
        run = run_by_trace.get(event.trace_id)
        if run is None:
            continue
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
            # Named another parent (or none): link_parent_runs links it again.
            merge(run, "parent_run_id", None)
    return merged


def _update_runs(run_by_trace: dict[str, Run], merged: _Merged) -> None:
    """Write the merged fields of runs that exist and are locked, by id: one UPDATE of
    only those fields, its values one jsonb parameter (``records_parameter``, read and
    cast as ``_insert_runs_sql`` reads them). The statement is the same for every batch
    that changes the same fields: psycopg parses it once per process (the INSERT ... ON
    CONFLICT of whole rows it replaced sent all fifty columns, their defaults included,
    as parameters: over psycopg's limit for caching a statement's parse)."""
    names = tuple(sorted(merged.fields))
    records = [
        {"id": run.pk, **{name: getattr(run, name) for name in names}}
        for trace_id, run in run_by_trace.items()
        if trace_id in merged.runs
    ]
    if not records:
        return
    with connection.cursor() as cursor:
        cursor.execute(_update_runs_sql(names), {"runs": records_parameter(records, _json_run_fields())})


@lru_cache(maxsize=64)
def _update_runs_sql(names: tuple[str, ...]) -> str:
    """UPDATE of the fields ``names`` (attribute names) of the runs of ``%(runs)s``."""
    quote = connection.ops.quote_name
    record, assignments = ["id bigint"], []
    for name in names:
        f = Run._meta.get_field(name)
        record.append(f"{quote(name)} {_as_read(f)}")
        assignments.append(f"{quote(f.column)} = batch.{quote(name)}::{f.db_type(connection)}")
    return (
        f"UPDATE runs_run AS run SET {', '.join(assignments)} "  # noqa: S608 - quoted names of Run's fields
        f"FROM jsonb_to_recordset(%(runs)s::jsonb) AS batch({', '.join(record)}) WHERE run.id = batch.id"
    )


def upsert_runs(project, trace_ids, run_events, step_events, redactor: Redactor, now, api_key=None) -> UpsertedRuns:
    """Lock (or create) the runs of ``trace_ids`` and merge what the events say. Their
    ``updated_at`` is left to recompute_run_totals(), which writes every run anyway. The
    runs created record ``api_key``, the key that sent them (the ledger counts spend by key).

    A new run is inserted with what the events say about it already merged (one write
    of the run instead of an insert and an update): merged into a ``_NewRun`` holding
    the defaults, exactly as into a stored one."""
    run_events, step_events = list(run_events), list(step_events)
    locked, missing = _lock_runs(project, trace_ids)
    batch_traces = set(trace_ids)
    run_by_trace, waiting_children = {}, []
    for run in locked:
        if run.trace_id in batch_traces:
            run_by_trace[run.trace_id] = run
        else:
            waiting_children.append(run.pk)
    new_by_trace = {trace_id: _NewRun(trace_id) for trace_id in missing}
    merged = _merge_events({**run_by_trace, **new_by_trace}, run_events, step_events, redactor)
    search_changed = {trace_id for trace_id in merged.search if trace_id in run_by_trace}
    created: list[InsertedRun] = []
    if new_by_trace:
        created, raced = _insert_runs(project, list(new_by_trace.values()), now, api_key)
        for run in created:
            run_by_trace[run.trace_id] = run
            if run.trace_id in merged.search:
                search_changed.add(run.trace_id)
        merged.runs -= set(new_by_trace)  # written by the INSERT
        if raced:
            # Another batch created them first: merge into them as stored, like any run.
            raced_by_trace = {run.trace_id: run for run in _lock_raced_runs(project, raced)}
            raced_merged = _merge_events(raced_by_trace, run_events, step_events, redactor)
            _update_runs(raced_by_trace, raced_merged)
            run_by_trace.update(raced_by_trace)
            search_changed |= raced_merged.search
    _update_runs(run_by_trace, merged)
    # The batch's order (trace ids sorted), whatever the order of locking.
    run_by_trace = {trace_id: run_by_trace[trace_id] for trace_id in trace_ids}
    return UpsertedRuns(
        run_by_trace=run_by_trace,
        created=[run.trace_id for run in created],
        waiting_children=waiting_children,
        search_changed=search_changed,
    )


def link_parent_runs(project, runs: list[Run], waiting_children: list[int]) -> None:
    """Tie sub-agent runs to their parent run by the parent's trace id, in either order.
    Only runs this batch has locked are written (``runs`` and the ``waiting_children``
    of its runs): a child that appeared since is linked by its own batch, or by the next
    one of its parent."""
    if not waiting_children and not any(run.parent_trace_id and run.parent_run_id is None for run in runs):
        return  # no run this batch has locked waits for its parent
    run_ids = [run.pk for run in runs]
    with connection.cursor() as cursor:
        cursor.execute(
            # The parent of each waiting run looked up by trace id alone and the project
            # checked after, as _RUNS_OF_TRACES does and for the same reason.
            """
            UPDATE runs_run AS child SET parent_run_id = link.parent_id
            FROM (
                SELECT waiting.id AS child_id, parent.id AS parent_id
                FROM runs_run AS waiting CROSS JOIN LATERAL (
                    SELECT id, project_id FROM runs_run AS parent WHERE trace_id = waiting.parent_trace_id OFFSET 0
                ) AS parent
                WHERE waiting.id = ANY(%s) AND waiting.parent_trace_id <> '' AND waiting.parent_run_id IS NULL
                  AND parent.project_id = %s AND parent.id <> waiting.id
                  AND (waiting.id = ANY(%s) OR parent.id = ANY(%s))
            ) AS link
            WHERE child.id = link.child_id
            """,
            [run_ids + waiting_children, project.pk, run_ids, run_ids],
        )
