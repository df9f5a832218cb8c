"""Benchmark: building the usage ledger.

Loads 1,000,000 steps in 125,000 runs (8 each: 4 model calls over 3 models, with
random costs, spread over 30 days, 1,000 end users) into a private embedded PostgreSQL
with set-based INSERT ... SELECT generate_series (every other NOT NULL column gets a
neutral constant, read from the catalog, so the load survives schema changes), then
times:
  - ledger_rebuild(): the ledger from scratch over every step,
  - ledger_refresh(): draining a backlog of 10,000 marked runs (on an empty ledger, so
    every run's usage is new), in batches as the ledger task does,
and checks that the ledger's cost equals the sum of the steps' costs exactly.

    .venv/bin/python bench/ledger_build.py [--runs 125000] [--backlog 10000]
"""

from __future__ import annotations

import argparse
import time
from datetime import UTC, datetime, timedelta

from _platform import bench_project, private_platform


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=125_000)
    parser.add_argument("--backlog", type=int, default=10_000)
    args = parser.parse_args()
    with private_platform():
        run(args)


# The columns the ledger reads, as SQL over generate_series(1, runs) AS n (and, for
# steps, generate_series(0, 7) AS i).
RUN_VALUES = {
    "id": "n",
    "organization_id": "%(organization_id)s",
    "project_id": "%(project_id)s",
    "trace_id": "lpad(to_hex(n), 32, '0')",
    "agent_name": "'agent-' || (n %% 5)",
    "end_user_id": "'user-' || (n %% 1000)",
    "started_at": "%(start)s::timestamptz + (n * interval '20 seconds')",
}
STEP_VALUES = {
    "organization_id": "%(organization_id)s",
    "project_id": "%(project_id)s",
    "run_id": "n",
    "span_id": "lpad(to_hex(i), 16, '0')",
    "kind": "CASE WHEN i %% 2 = 1 THEN 'llm' ELSE 'tool' END",
    "started_at": "%(start)s::timestamptz + (n * interval '20 seconds') + (i * interval '2 seconds')",
    "model": "CASE WHEN i %% 2 = 1 THEN (ARRAY['mistral-large-2512', 'mistral-small-2603', 'codestral-2508'])"
    "[1 + (n + i) %% 3] ELSE '' END",
    "input_tokens": "CASE WHEN i %% 2 = 1 THEN 1000 + (n * 7 + i) %% 500 ELSE 0 END",
    "output_tokens": "CASE WHEN i %% 2 = 1 THEN 100 + (n + i) %% 50 ELSE 0 END",
    "cost": "CASE WHEN i %% 2 = 1 THEN round((random() / 100)::numeric, 9) END",
}


def _insert_sql(table: str, given: dict, source: str) -> str:
    """INSERT ... SELECT ``given`` columns, and a neutral constant for every other
    NOT NULL column without a database default."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT column_name, data_type FROM information_schema.columns "
            "WHERE table_name = %s AND is_nullable = 'NO' AND column_default IS NULL AND is_identity = 'NO'",
            [table],
        )
        required = cursor.fetchall()
    neutral = {"boolean": "false", "ARRAY": "'{}'", "jsonb": "'{}'", "tsvector": "''"}
    values = dict(given)
    for column, data_type in required:
        if column in values:
            continue
        if data_type.startswith("timestamp"):
            values[column] = "now()"
        elif data_type in ("integer", "bigint", "smallint", "numeric", "double precision", "real"):
            values[column] = "0"
        else:
            values[column] = neutral.get(data_type, "''")
    return f"INSERT INTO {table} ({', '.join(values)}) SELECT {', '.join(values.values())} FROM {source}"  # noqa: S608


def load(project, runs: int, now: datetime, step_values: dict = STEP_VALUES) -> None:
    """``runs`` runs of 8 steps (``step_values``'s columns) in 30 days before ``now``, then ANALYZE."""
    from django.db import connection, transaction

    params = {
        "organization_id": project.organization_id,
        "project_id": project.pk,
        "start": now - timedelta(days=30),
        "runs": runs,
    }
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(_insert_sql("runs_run", RUN_VALUES, "generate_series(1, %(runs)s) AS n"), params)
        cursor.execute(
            _insert_sql("runs_step", step_values, "generate_series(1, %(runs)s) AS n, generate_series(0, 7) AS i"),
            params,
        )
        cursor.execute("SELECT setval('runs_run_id_seq', (SELECT max(id) FROM runs_run))")
    with connection.cursor() as cursor:
        cursor.execute("ANALYZE runs_run")
        cursor.execute("ANALYZE runs_step")


def _scalar(sql: str, params=None):
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()[0]


def run(args) -> None:
    from django.db import connection

    from billing.ledger import ledger_mark, ledger_rebuild, ledger_refresh

    _, project = bench_project()
    organization = project.organization
    started = time.perf_counter()
    load(project, args.runs, datetime.now(UTC))
    steps = _scalar("SELECT count(*) FROM runs_step")
    print(f"loaded {args.runs:,} runs and {steps:,} steps in {time.perf_counter() - started:.1f} s")

    started = time.perf_counter()
    counts = ledger_rebuild()
    elapsed = time.perf_counter() - started
    print(
        f"ledger_rebuild: {elapsed:.2f} s for {steps:,} steps "
        f"({counts['run_usage_rows']:,} run usage rows, {counts['daily_rows']:,} daily rows)"
    )
    ledger = _scalar("SELECT sum(cost) FROM billing_usagedaily")
    expected = _scalar("SELECT sum(cost) FROM runs_step")
    assert ledger == expected, (ledger, expected)
    print(f"  ledger cost {ledger} == sum of step costs {expected}")

    with connection.cursor() as cursor:
        cursor.execute("TRUNCATE billing_runusage, billing_usagedaily")
    run_ids = list(range(1, args.backlog + 1))
    ledger_mark(organization_id=organization.pk, run_ids=run_ids)
    backlog_steps = _scalar("SELECT count(*) FROM runs_step WHERE run_id <= %s", [args.backlog])
    started = time.perf_counter()
    done = 0
    while count := ledger_refresh(500):
        done += count
    elapsed = time.perf_counter() - started
    print(f"ledger_refresh: {elapsed:.2f} s for a backlog of {done:,} runs ({backlog_steps:,} steps, batches of 500)")
    ledger = _scalar("SELECT sum(cost) FROM billing_usagedaily")
    expected = _scalar("SELECT sum(cost) FROM runs_step WHERE run_id <= %s", [args.backlog])
    assert ledger == expected, (ledger, expected)
    print(f"  ledger cost {ledger} == sum of those steps' costs {expected}")


if __name__ == "__main__":
    main()
