"""An item (step, message, tool call, memory snapshot) always names a run that exists:
checked by triggers instead of foreign keys (migration runs.0024). Every way rows are
written is refused when it names no run, a run cannot be deleted while items name it,
and a deletion racing an ingestion leaves no item without its run."""

import threading
from datetime import UTC, datetime

import psycopg
import pytest
from django.db import IntegrityError, connection, transaction

from agentops.scoping import organization_scope
from runs.events import MemoryEvent, MessageEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.ingest.item_rows import messages_upsert, snapshots_upsert, steps_upsert, tool_calls_upsert
from runs.ingest.run_rows import InsertedRun
from runs.ingest.sql import SMALL_UPSERT_ROWS, copy_new, copy_upsert
from runs.models import MemorySnapshot, Message, Run, Step, ToolCall
from runs.services.redaction import NO_REDACTION

T0 = datetime(2026, 11, 30, 12, 0, tzinfo=UTC)
NO_SUCH_RUN = 9_000_000_000
# A COPY goes through psycopg's own cursor, outside Django's wrapping of its errors.
REFUSED = (IntegrityError, psycopg.IntegrityError)


def _scope(project):
    return organization_scope(project.organization)


def _steps(trace_id: str, count: int, prefix: str = "s") -> list[StepEvent]:
    return [
        StepEvent(trace_id=trace_id, span_id=f"{prefix}{i}", kind="tool", name="search", started_at=T0)
        for i in range(count)
    ]


def _item_upserts(project, run_id: int, count: int):
    """The four tables' rows of ``count`` items each, all naming ``run_id`` (ids unlike
    ``_ingested_run``'s)."""
    run_by_trace = {"t": InsertedRun(pk=run_id, trace_id="t", parent_trace_id="", parent_run_id=None)}
    args = (project, run_by_trace)
    return {
        "steps": steps_upsert(*args, _steps("t", count, "new-s"), NO_REDACTION, T0),
        "messages": messages_upsert(
            *args,
            [MessageEvent(trace_id="t", message_id=f"new-m{i}", position=i, role="user") for i in range(count)],
            NO_REDACTION,
            T0,
        ),
        "tool calls": tool_calls_upsert(
            *args,
            [ToolCallEvent(trace_id="t", call_id=f"new-c{i}", tool_name="search") for i in range(count)],
            NO_REDACTION,
            T0,
        ),
        "snapshots": snapshots_upsert(
            *args,
            [MemoryEvent(trace_id="t", snapshot_id=f"new-n{i}", sequence=i, state={"i": i}) for i in range(count)],
            NO_REDACTION,
            T0,
        ),
    }


def _ingested_run(project) -> Run:
    with _scope(project):
        ingest(
            project=project,
            steps=_steps("t", 2),
            messages=[MessageEvent(trace_id="t", message_id="m", position=1, role="user")],
            tool_calls=[ToolCallEvent(trace_id="t", call_id="c", tool_name="search")],
            snapshots=[MemoryEvent(trace_id="t", snapshot_id="n", sequence=1, state={})],
            announce=False,
        )
        return Run.objects.get(trace_id="t")


def _item_counts(project) -> tuple[int, int, int, int]:
    with _scope(project):
        return tuple(model.objects.count() for model in (Step, Message, ToolCall, MemorySnapshot))


@pytest.mark.parametrize("table", ["steps", "messages", "tool calls", "snapshots"])
@pytest.mark.parametrize(
    ("how", "count"),
    [
        ("COPY into the table", 3),
        ("COPY then INSERT ... ON CONFLICT", SMALL_UPSERT_ROWS + 1),
        ("one INSERT from jsonb", 2),
    ],
)
def test_rows_naming_no_run_are_refused_by_every_write_path(tenant, table, how, count):
    project = tenant.project
    run = _ingested_run(project)
    before = _item_counts(project)
    upsert = _item_upserts(project, NO_SUCH_RUN, count)[table]
    # One row of an existing run among them: the statement is refused as a whole.
    upsert.rows[0]["run_id"] = run.pk
    write = copy_new if how == "COPY into the table" else copy_upsert
    with _scope(project), pytest.raises(REFUSED, match=f"run_id {NO_SUCH_RUN} names no run"):
        with transaction.atomic():
            write(upsert)
    assert _item_counts(project) == before


@pytest.mark.parametrize("model", [Step, Message, ToolCall, MemorySnapshot])
def test_an_item_saved_or_moved_through_the_orm_needs_its_run(tenant, model):
    project = tenant.project
    run = _ingested_run(project)
    with _scope(project):
        item = model.objects.get(run=run) if model is not Step else model.objects.filter(run=run).first()
        with pytest.raises(IntegrityError, match="names no run"), transaction.atomic():
            model.objects.filter(pk=item.pk).update(run_id=NO_SUCH_RUN)
        item.pk = None
        item.run_id = NO_SUCH_RUN
        for unique in ("span_id", "message_id", "call_id", "snapshot_id"):
            if hasattr(item, unique):
                setattr(item, unique, "copy")
        with pytest.raises(IntegrityError, match="names no run"), transaction.atomic():
            item.save()
        # Moved to another run that exists: allowed.
        other = Run.objects.create(organization=project.organization, project=project, trace_id="other")
        model.objects.filter(run=run).update(run=other)
        assert model.objects.filter(run=other).exists()


def test_a_run_is_not_deleted_while_items_name_it(transactional_db, tenant):
    project = tenant.project
    run = _ingested_run(project)
    with pytest.raises(IntegrityError, match=f"run {run.pk} is still named by its items"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("DELETE FROM runs_run WHERE id = %s", [run.pk])
    with pytest.raises(IntegrityError, match="is still named by its items"):
        with transaction.atomic(), connection.cursor() as cursor:
            cursor.execute("UPDATE runs_run SET id = %s WHERE id = %s", [NO_SUCH_RUN, run.pk])
    with _scope(project):
        assert Run.objects.filter(pk=run.pk).exists()
    assert _item_counts(project) == (2, 1, 1, 1)
    # Through Django its items go first (on_delete): allowed, and nothing is left.
    with _scope(project):
        Run.objects.filter(pk=run.pk).delete()
        assert not Run.objects.exists()
    assert _item_counts(project) == (0, 0, 0, 0)


def _backend_waits_on_a_lock(pid: int, timeout: float = 30.0) -> None:
    """Return once the session ``pid`` waits for a lock (its statement blocked)."""
    deadline = threading.Event()
    timer = threading.Timer(timeout, deadline.set)
    timer.start()
    try:
        with connection.cursor() as cursor:
            while not deadline.is_set():
                cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [pid])
                row = cursor.fetchone()
                if row and row[0] == "Lock":
                    return
                deadline.wait(0.01)
        raise AssertionError(f"session {pid} never waited for a lock")
    finally:
        timer.cancel()


def _in_thread(work, pid_box: list, errors: list) -> threading.Thread:
    def run():
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                pid_box.append(cursor.fetchone()[0])
            work()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            errors.append(exc)
        finally:
            connection.close()

    thread = threading.Thread(target=run)
    thread.start()
    return thread


def test_a_deletion_waiting_for_an_ingestion_fails_when_the_ingestion_added_items(transactional_db, tenant):
    """An ingestion adds a step to a run (locked, not committed) while a deletion of the run,
    its items already deleted, waits for the lock: the deletion fails at its commit, and the
    new step keeps its run."""
    project = tenant.project
    run = _ingested_run(project)
    pid, errors = [], []
    ingested, release = threading.Event(), threading.Event()

    def delete():
        ingested.wait(30)
        with _scope(project), transaction.atomic():
            for model in (Step, Message, ToolCall, MemorySnapshot):
                model.objects.filter(run_id=run.pk).delete()
            with connection.cursor() as cursor:
                cursor.execute("DELETE FROM runs_run WHERE id = %s", [run.pk])

    deleter = _in_thread(delete, pid, errors)
    with _scope(project), transaction.atomic():
        ingest(
            project=project, steps=[StepEvent(trace_id="t", span_id="late", name="late", started_at=T0)], announce=False
        )
        ingested.set()
        while not pid:
            release.wait(0.01)
        _backend_waits_on_a_lock(pid[0])
    deleter.join(30)
    assert len(errors) == 1 and isinstance(errors[0], IntegrityError), errors
    with _scope(project):
        assert Run.objects.filter(pk=run.pk).exists()
        assert sorted(Step.objects.filter(run_id=run.pk).values_list("span_id", flat=True)) == ["late", "s0", "s1"]


def test_items_waiting_for_a_deletion_of_their_run_are_refused_when_it_commits(transactional_db, tenant):
    """A run is deleted (not committed) while items are written for it: the write waits
    for the deletion, then fails; no item is left without its run."""
    project = tenant.project
    run = _ingested_run(project)
    with _scope(project):
        Step.objects.filter(run=run).delete()
        Message.objects.filter(run=run).delete()
        ToolCall.objects.filter(run=run).delete()
        MemorySnapshot.objects.filter(run=run).delete()
    pid, errors = [], []
    deleted = threading.Event()

    def write():
        deleted.wait(30)
        with _scope(project), transaction.atomic():
            copy_new(_item_upserts(project, run.pk, 3)["steps"])

    writer = _in_thread(write, pid, errors)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM runs_run WHERE id = %s", [run.pk])
        deleted.set()
        while not pid:
            deleted.wait(0.01)
        _backend_waits_on_a_lock(pid[0])
    writer.join(30)
    assert len(errors) == 1 and isinstance(errors[0], REFUSED), errors
    assert "names no run" in str(errors[0])
    with _scope(project):
        assert not Run.objects.filter(pk=run.pk).exists()
    assert _item_counts(project) == (0, 0, 0, 0)
