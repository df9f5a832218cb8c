"""``manage.py migrate`` when several installations start at once against one
PostgreSQL: one migrates, the others wait for it instead of applying the same
migrations at the same time, and their waiting never holds up the first one's
migrations (an index built or dropped ``CONCURRENTLY`` waits for older snapshots)."""

from __future__ import annotations

import threading
import time
from contextlib import contextmanager

import pytest
from django.core.management import call_command
from django.db import connection, connections

from agentops.management.commands.migrate import MIGRATION_LOCK

WAIT_SECONDS = 120


def _session():
    session = connection.Database.connect(**connection.get_connection_params())
    session.autocommit = True
    return session


def _asking_for_the_lock(other) -> bool:
    """Whether a session of this database, not the other installation's, asked for the
    migration lock (pg_stat_activity: the last statement of each session)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND pid NOT IN (pg_backend_pid(), %s) AND query LIKE %s",
            [other.info.backend_pid, "%advisory_lock%"],
        )
        return cursor.fetchone()[0] > 0


@contextmanager
def _another_installation_migrating():
    """Another installation's migrate, half-way through: it holds the lock on its own
    session. Yields that session; closing it ends that migrate."""
    other = _session()
    other.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK])
    try:
        yield other
    finally:
        other.close()


def _migrate_in_a_thread() -> tuple[list, threading.Thread]:
    """``migrate`` of a second installation, started in a thread: its outcome (a list
    that gets "done" or the exception) and the thread."""
    outcome: list[object] = []

    def migrate():
        try:
            call_command("migrate", interactive=False, verbosity=0)
            outcome.append("done")
        except Exception as exc:  # reported by the assertions
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=migrate)
    thread.start()
    return outcome, thread


def _wait_until_it_waits(other, thread) -> None:
    """Until the second migrate asks for the lock (which the other installation holds),
    and a little longer, so that it is waiting, however it waits."""
    deadline = time.monotonic() + WAIT_SECONDS
    while time.monotonic() < deadline and thread.is_alive() and not _asking_for_the_lock(other):
        time.sleep(0.05)
    assert _asking_for_the_lock(other), "migrate did not ask for the migration lock"
    time.sleep(1)
    assert thread.is_alive(), "migrate ran while another installation was migrating"


@pytest.mark.django_db(transaction=True)
def test_migrate_waits_while_another_installation_is_migrating():
    with _another_installation_migrating() as other:
        outcome, thread = _migrate_in_a_thread()
        _wait_until_it_waits(other, thread)
        assert thread.is_alive() and not outcome  # still waiting: nothing applied
    thread.join(WAIT_SECONDS)  # the other installation is done: it runs
    assert outcome == ["done"]


@pytest.mark.django_db(transaction=True)
def test_a_waiting_migrate_does_not_hold_up_an_index_built_concurrently():
    """The first installation's migrations build (or drop) an index CONCURRENTLY while the
    second waits for the lock. A migrate waiting in one blocking statement held a
    snapshot that the build waited for: both installations hung for ever."""
    builder = _session()
    builder.execute("DROP TABLE IF EXISTS migrate_probe")
    builder.execute("CREATE TABLE migrate_probe (value integer)")
    try:
        with _another_installation_migrating() as other:
            outcome, thread = _migrate_in_a_thread()
            _wait_until_it_waits(other, thread)
            # A guard against hanging the suite, far above what the build takes.
            builder.execute("SET statement_timeout = '60s'")
            builder.execute("CREATE INDEX CONCURRENTLY migrate_probe_value ON migrate_probe (value)")
            builder.execute("DROP INDEX CONCURRENTLY migrate_probe_value")
            assert thread.is_alive() and not outcome  # still waiting for the lock
        thread.join(WAIT_SECONDS)
        assert outcome == ["done"]
    finally:
        builder.execute("DROP TABLE IF EXISTS migrate_probe")
        builder.close()
