"""While PostgreSQL is down, each refused request is one log line with the reason; only
the first failure of the outage carries the traceback (the console handler, as
configured by settings.LOGGING, is read)."""

from __future__ import annotations

import io
import logging
import re
from contextlib import contextmanager

import pytest
from django.db import OperationalError, connection

from agentops import outages
from agentops.outages import OutageLogFilter
from tests.runs.test_otlp_endpoint import agent_trace

REFUSED = 'connection to server at "127.0.0.1", port 5432 failed: Connection refused'


@pytest.fixture
def console(monkeypatch):
    """What the platform's console handler writes, from a fresh outage clock."""
    handler = next(
        (h for h in logging.getLogger().handlers if any(isinstance(f, OutageLogFilter) for f in h.filters)), None
    )
    assert handler is not None, "the console handler has no outage filter"
    buffer = io.StringIO()
    previous = handler.setStream(buffer)
    monkeypatch.setattr(outages, "_last_traceback", {})
    yield buffer
    handler.setStream(previous)


def records(output: str) -> list[str]:
    """The log records written (each starts with its time; a traceback follows its line)."""
    return [record for record in re.split(r"^(?=\d{4}-\d\d-\d\d )", output, flags=re.M) if record]


@contextmanager
def database_down():
    """Every query of this thread fails as a stopped PostgreSQL makes it fail."""

    def refuse(execute, sql, params, many, context):
        raise OperationalError(REFUSED)

    with connection.execute_wrapper(refuse):
        yield


def test_each_refusal_is_one_line_with_the_reason(tenant, key_client, client, make_api_key, client_for, console):
    batch_client = key_client(tenant.project, ["ingest"])
    _key, raw = make_api_key(tenant.project, ["ingest"])
    signed_in = client_for(tenant.owner)
    otlp_body = agent_trace().SerializeToString()
    with database_down():
        for _ in range(4):
            assert (
                batch_client.post("/api/v1/ingest", {"events": [{"type": "run", "id": "r"}]}, format="json").status_code
                == 503
            )
            otlp = client.post(
                "/api/v1/otlp/v1/traces",
                data=otlp_body,
                content_type="application/x-protobuf",
                headers={"Authorization": f"Bearer {raw}"},
            )
            assert otlp.status_code == 503
            assert signed_in.get("/api/v1/organizations/acme/").status_code == 503

    output = console.getvalue()
    reason = f"PostgreSQL unavailable (OperationalError: {REFUSED})"
    assert output.count(f"ingest refused: {reason}") == 4
    assert output.count(f"OTLP traces refused: {reason}") == 4
    assert output.count(f"GET /api/v1/organizations/acme/ refused: {reason}") == 4
    logged = records(output)
    assert len(logged) == 12  # Django's own "Service Unavailable" line would double each refusal
    assert ["Traceback" in record for record in logged] == [True] + [False] * 11  # the first failure's


def test_a_page_failing_on_the_database_logs_one_line_per_request(tenant, client_for, console):
    signed_in = client_for(tenant.owner)
    signed_in.raise_request_exception = False
    with database_down():
        for _ in range(3):
            assert signed_in.get("/").status_code == 500

    output = console.getvalue()
    logged = records(output)
    assert [
        record.splitlines()[0].endswith(f"PostgreSQL unavailable (OperationalError: {REFUSED})") for record in logged
    ] == [True] * 3
    assert ["Traceback" in record for record in logged] == [True, False, False]
