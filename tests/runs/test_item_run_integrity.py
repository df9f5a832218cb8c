"""An item (step, message, tool call, memory snapshot) always names a run that exists:
checked by triggers instead of foreign keys (migration runs.0024). Every way rows are
written is refused when it names no run, a run cannot be deleted while items name it,
and a deletion racing an ingestion leaves no item without its run."""

import threading
import time
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
ITEM_MODELS = (Step, Message, ToolCall, MemorySnapshot)


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
        return tuple(model.objects.count() for model in ITEM_MODELS)


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


@pytest.mark.parametrize("model", ITEM_MODELS)
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


class _OtherSession:
    """``work`` run in a thread, on a database session of its own; ``errors``: what it raised."""

    def __init__(self, work):
        self.errors: list[Exception] = []
        self._pid: int | None = None
        self._connected = threading.Event()
        self._thread = threading.Thread(target=self._run, args=(work,))
        self._thread.start()

    def _run(self, work) -> None:
        try:
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_backend_pid()")
                self._pid = cursor.fetchone()[0]
            self._connected.set()
            work()
        except Exception as exc:  # noqa: BLE001 - reported by the test
            self.errors.append(exc)
        finally:
            self._connected.set()
            connection.close()

    def wait_for_a_lock(self, timeout: float = 30.0) -> None:
        """Return once the session waits for a lock (its statement blocked)."""
        deadline = time.monotonic() + timeout
        self._connected.wait(timeout)
        with connection.cursor() as cursor:
            while time.monotonic() < deadline and self._thread.is_alive():
                cursor.execute("SELECT wait_event_type FROM pg_stat_activity WHERE pid = %s", [self._pid])
                row = cursor.fetchone()
                if row and row[0] == "Lock":
                    return
                time.sleep(0.01)
        raise AssertionError(f"session {self._pid} did not wait for a lock (errors: {self.errors})")

    def join(self) -> None:
        self._thread.join(30)


def _delete_items(project, run_id: int) -> None:
    with _scope(project):
        for model in ITEM_MODELS:
            model.objects.filter(run_id=run_id).delete()


def test_a_deletion_waiting_for_an_ingestion_fails_when_the_ingestion_added_items(transactional_db, tenant):
    """An ingestion adds a step to a run (locked, not committed) while a deletion of the run,
    its items already deleted, waits for the lock: the deletion fails at its commit, and the
    new step keeps its run."""
    project = tenant.project
    run = _ingested_run(project)
    ingested = threading.Event()

    def delete():
        ingested.wait(30)
        with transaction.atomic():
            _delete_items(project, run.pk)
            with connection.cursor() as cursor:
                cursor.execute("DELETE FROM runs_run WHERE id = %s", [run.pk])

    deleter = _OtherSession(delete)
    with _scope(project), transaction.atomic():
        ingest(
            project=project, steps=[StepEvent(trace_id="t", span_id="late", name="late", started_at=T0)], announce=False
        )
        ingested.set()
        deleter.wait_for_a_lock()
    deleter.join()
    assert len(deleter.errors) == 1 and isinstance(deleter.errors[0], IntegrityError), deleter.errors
    with _scope(project):
        assert Run.objects.filter(pk=run.pk).exists()
        assert sorted(Step.objects.filter(run_id=run.pk).values_list("span_id", flat=True)) == ["late", "s0", "s1"]


def test_items_waiting_for_a_deletion_of_their_run_are_refused_when_it_commits(transactional_db, tenant):
    """A run is deleted (not committed) while items are written for it: the write waits
    for the deletion, then fails; no item is left without its run."""
    project = tenant.project
    run = _ingested_run(project)
    _delete_items(project, run.pk)
    deleted = threading.Event()

    def write():
        deleted.wait(30)
        with _scope(project), transaction.atomic():
            copy_new(_item_upserts(project, run.pk, 3)["steps"])

    writer = _OtherSession(write)
    with transaction.atomic():
        with connection.cursor() as cursor:
            cursor.execute("DELETE FROM runs_run WHERE id = %s", [run.pk])
        deleted.set()
        writer.wait_for_a_lock()
    writer.join()
    assert len(writer.errors) == 1 and isinstance(writer.errors[0], REFUSED), writer.errors
    assert "names no run" in str(writer.errors[0])
    with _scope(project):
        assert not Run.objects.filter(pk=run.pk).exists()
    assert _item_counts(project) == (0, 0, 0, 0)
