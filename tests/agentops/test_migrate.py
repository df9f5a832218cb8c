"""``manage.py migrate`` when several installations start at once against one
PostgreSQL: one migrates, the others wait for it instead of applying the same
migrations at the same time."""

from __future__ import annotations

import threading
import time

import pytest
from django.core.management import call_command
from django.db import connection, connections

from agentops.management.commands.migrate import MIGRATION_LOCK

WAIT_SECONDS = 120


def _waiting_for_the_lock() -> bool:
    """Whether a session of this database waits for the migration lock (pg_locks)."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_locks WHERE locktype = 'advisory' AND NOT granted "
            "AND database = (SELECT oid FROM pg_database WHERE datname = current_database()) "
            "AND ((classid::bigint << 32) | objid::bigint) = %s",
            [MIGRATION_LOCK],
        )
        return cursor.fetchone()[0] > 0


@pytest.mark.django_db(transaction=True)
def test_migrate_waits_while_another_installation_is_migrating():
    # Another installation's migrate, half-way through: it holds the lock on its own session.
    other = connection.Database.connect(**connection.get_connection_params())
    other.autocommit = True
    other.execute("SELECT pg_advisory_lock(%s)", [MIGRATION_LOCK])
    outcome: list[object] = []

    def migrate():
        try:
            call_command("migrate", interactive=False, verbosity=0)
            outcome.append("done")
        except Exception as exc:  # reported by the assertion below
            outcome.append(exc)
        finally:
            connections.close_all()

    thread = threading.Thread(target=migrate)
    try:
        thread.start()
        deadline = time.monotonic() + WAIT_SECONDS
        seen_waiting = False
        while time.monotonic() < deadline and thread.is_alive():
            if _waiting_for_the_lock():
                seen_waiting = True
                break
            time.sleep(0.05)
        assert seen_waiting, f"migrate ran while another installation was migrating: {outcome}"
        assert thread.is_alive() and not outcome  # still waiting: nothing applied
    finally:
        other.close()  # the other installation is done
        thread.join(WAIT_SECONDS)
    assert outcome == ["done"]
