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


def _web_process_database(**env: str) -> str:
    """DATABASES["default"]'s pool and CONN_MAX_AGE in a new process started by importing
    agentops.asgi, as the web server starts (on this test's database and Redis)."""
    import os
    import subprocess
    import sys

    from django.conf import settings

    db = settings.DATABASES["default"]
    database_url = f"postgresql://{db['USER']}@/{db['NAME']}?host={db['HOST']}&port={db['PORT']}"
    code = (
        "import agentops.asgi; from django.conf import settings; "
        "d = settings.DATABASES['default']; print(d['OPTIONS'].get('pool'), d['CONN_MAX_AGE'])"
    )
    result = subprocess.run(
        [sys.executable, "-c", code],
        env={**os.environ, "DEBUG": "true", "DATABASE_URL": database_url, "REDIS_URL": settings.REDIS_URL, **env},
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    return result.stdout.strip().splitlines()[-1]


def test_the_web_process_takes_its_connections_from_a_pool_unless_told_not_to():
    """Each request runs in a thread of its own: without a pool each opened a connection
    (a new PostgreSQL backend, its caches cold). Other processes keep theirs."""
    assert _web_process_database() == "{'min_size': 2, 'max_size': 20} 0"
    assert _web_process_database(DATABASE_POOL="false").startswith("None ")
