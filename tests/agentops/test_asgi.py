"""The ASGI web process (agentops/asgi.py) and its database connections: under ASGI each
request's synchronous code runs in a thread of its own, so a connection it kept open
for reuse would never be reused, only left open. With the pool (settings.DATABASE_POOL,
the default) a request borrows one of the process's connections and gives it back."""

from __future__ import annotations

import asyncio
import gc
import time

import httpx
import pytest
from django.db import connection, connections

from agentops.asgi import application

REQUESTS = 12


def _sessions() -> set[int]:
    """Server sessions (backend pids) on this test database other than this thread's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT pid FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid() "
            # Not autovacuum's workers, which come and go on their own.
            "AND backend_type = 'client backend'"
        )
        return {pid for (pid,) in cursor.fetchall()}


def _open_connections() -> int:
    return len(_sessions())


async def _requests(count: int) -> list[int]:
    transport = httpx.ASGITransport(app=application)
    async with httpx.AsyncClient(transport=transport, base_url="http://localhost") as client:
        statuses = []
        for _ in range(count):
            # An unknown API key: refused after the key is looked up in PostgreSQL.
            response = await client.get(
                "/api/v1/projects/acme/agent/runs/", headers={"Authorization": "Bearer ak_unknown"}
            )
            statuses.append(response.status_code)
        return statuses


@pytest.mark.django_db(transaction=True)
def test_without_the_pool_the_web_process_keeps_no_database_connection_per_request_it_served():
    settings_dict = connections.settings["default"]
    max_age, pool = settings_dict["CONN_MAX_AGE"], settings_dict["OPTIONS"].pop("pool")
    settings_dict["CONN_MAX_AGE"] = 60  # DATABASE_POOL=false: persistent connections instead
    connection.close()
    gc.disable()  # nothing frees an abandoned connection behind the test's back
    try:
        before = _open_connections()
        statuses = asyncio.run(_requests(REQUESTS))
        after = _open_connections()
    finally:
        gc.enable()
        connection.close()
        settings_dict["CONN_MAX_AGE"] = max_age
        settings_dict["OPTIONS"]["pool"] = pool
    assert statuses == [401] * REQUESTS
    assert after <= before, f"{after - before} connections left open by {REQUESTS} requests"


def _wait_until_the_pool_holds_its_minimum(pool, seconds: float = 30.0) -> None:
    """The pool opens its first connections in the background."""
    deadline = time.monotonic() + seconds
    while (stats := pool.get_stats())["pool_size"] < stats["pool_min"]:
        assert time.monotonic() < deadline, f"the pool did not fill: {stats}"
        time.sleep(0.02)


@pytest.mark.django_db(transaction=True)
def test_requests_borrow_the_pools_connections_instead_of_opening_their_own():
    assert connections["default"].pool is not None, "the pool is on by default (DATABASE_POOL)"
    asyncio.run(_requests(1))  # the pool opens with the first request
    _wait_until_the_pool_holds_its_minimum(connections["default"].pool)
    pool = connections["default"].pool
    before, stats_before = _sessions(), pool.get_stats()
    gc.disable()
    try:
        statuses = asyncio.run(_requests(REQUESTS))
    finally:
        gc.enable()
    after, stats_after = _sessions(), pool.get_stats()
    assert statuses == [401] * REQUESTS
    # Every request borrowed a connection from the pool, and the pool opened none for them.
    assert stats_after["requests_num"] - stats_before["requests_num"] >= REQUESTS
    assert stats_after.get("connections_num", 0) == stats_before.get("connections_num", 0)
    # The same server sessions served every request: none opened, none left behind.
    assert after == before, f"sessions opened {sorted(after - before)}, gone {sorted(before - after)}"
