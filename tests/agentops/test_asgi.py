"""The ASGI web process (agentops/asgi.py) and its database connections: under ASGI each
request's synchronous code runs in a thread of its own, so a connection it kept open
for reuse would never be reused, only left open."""

from __future__ import annotations

import asyncio
import gc

import httpx
import pytest
from django.db import connection, connections

from agentops.asgi import application

REQUESTS = 12


def _open_connections() -> int:
    """Server sessions on this test database other than this thread's own."""
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() AND pid <> pg_backend_pid()"
        )
        return cursor.fetchone()[0]


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
def test_the_web_process_keeps_no_database_connection_per_request_it_served():
    settings_dict = connections.settings["default"]
    max_age = settings_dict["CONN_MAX_AGE"]
    settings_dict["CONN_MAX_AGE"] = 60  # production's persistent connections
    gc.disable()  # nothing frees an abandoned connection behind the test's back
    try:
        before = _open_connections()
        statuses = asyncio.run(_requests(REQUESTS))
        after = _open_connections()
    finally:
        gc.enable()
        settings_dict["CONN_MAX_AGE"] = max_age
    assert statuses == [401] * REQUESTS
    assert after <= before, f"{after - before} connections left open by {REQUESTS} requests"
