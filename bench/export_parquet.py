"""Benchmark: bulk export of a 1M-step project to Parquet.

Loads 125,000 runs of 8 steps (1,000,000 steps, each with a small JSON input and
output) into a private embedded PostgreSQL (the same set-based load as
bench/ledger_build.py), builds the ledger, then:

  - export: one export job of every table to a folder, run by ``export_run`` in a
    separate process, as a worker runs it (chunks of EXPORT_CHUNK_ROWS, one Parquet row
    group each); rows per second and the process's peak memory (ru_maxrss), beside its
    memory before the export;
  - COPY: PostgreSQL's ``COPY (SELECT the same step columns) TO STDOUT``, read by
    psycopg and thrown away: how fast the database alone hands the rows over;
  - in memory: the same step rows fetched at once and written by ``pq.write_table`` in
    another process: the speed and the peak memory of the naive way.

    .venv/bin/python bench/export_parquet.py [--runs 125000] [--chunk 10000]
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from _platform import bench_project, private_platform
from ledger_build import STEP_VALUES, _scalar, load

STEP_PAYLOADS = {
    **STEP_VALUES,
    "input": "jsonb_build_object('messages', jsonb_build_array(jsonb_build_object('role', 'user', "
    "'content', 'question ' || n || ' asked at step ' || i)))",
    "output": "jsonb_build_object('content', 'answer ' || n || '.' || i, 'finish_reason', 'stop')",
}


def peak_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024  # kilobytes on Linux


def child(mode: str, value: int) -> None:
    """A worker process: run one export job, or write the steps from memory."""
    import django

    django.setup()
    before = peak_mib()
    started = time.perf_counter()
    if mode == "export":
        from agentops.scoping import organization_scope
        from evals.bulk_export.runner import export_run
        from evals.models import ExportJob

        organization_id = ExportJob.dangerously_unscoped_objects.get(pk=value).organization_id
        with organization_scope(organization_id):
            status = export_run(export_id=value, worker="bench")
        rows = sum(ExportJob.dangerously_unscoped_objects.get(pk=value).progress.values())
        result = {"status": status, "rows": rows}
    else:
        import pyarrow as pa
        import pyarrow.parquet as pq
        from django.db import connection

        from evals.bulk_export.tables import TABLES

        table = TABLES["steps"]
        columns = ", ".join(
            f"{column.name}::text" if column.source is not None and not isinstance(column.source, str) else column.name
            for column in table.columns
        )
        with connection.cursor() as cursor:
            cursor.execute(f"SELECT {columns} FROM runs_step ORDER BY id")  # noqa: S608
            rows = cursor.fetchall()
        arrays = [pa.array([row[index] for row in rows], type=field.type) for index, field in enumerate(table.schema)]
        pq.write_table(
            pa.Table.from_arrays(arrays, schema=table.schema),
            Path(tempfile.gettempdir()) / f"steps-{os.getpid()}.parquet",
        )
        result = {"rows": len(rows)}
    result.update(seconds=time.perf_counter() - started, before_mib=before, peak_mib=peak_mib())
    print(json.dumps(result))


def in_child(env: dict, mode: str, value: int = 0) -> dict:
    output = subprocess.run(
        [sys.executable, __file__, "--child", mode, str(value)], env=env, check=True, capture_output=True, text=True
    )
    return json.loads(output.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=125_000)
    parser.add_argument("--chunk", type=int, default=10_000)
    parser.add_argument("--child", nargs=2)
    args = parser.parse_args()
    if args.child:
        child(args.child[0], int(args.child[1]))
        return
    root = tempfile.mkdtemp(prefix="agentops-bench-exports-")
    with private_platform(EXPORT_ROOT=root, EXPORT_CHUNK_ROWS=str(args.chunk)) as env:
        bench(args, env, root)


def bench(args, env: dict, root: str) -> None:
    from django.db import connection

    from agentops.scoping import organization_scope
    from billing.ledger import ledger_rebuild
    from evals.bulk_export import services
    from evals.bulk_export.tables import TABLES

    user, project = bench_project()
    organization = project.organization
    now = datetime.now(UTC)
    started = time.perf_counter()
    load(project, args.runs, now, step_values=STEP_PAYLOADS)
    ledger_rebuild()
    steps = _scalar("SELECT count(*) FROM runs_step")
    print(f"loaded {args.runs:,} runs and {steps:,} steps in {time.perf_counter() - started:.1f} s")

    with organization_scope(organization):
        destination = services.destination_create(
            organization=organization, actor=user, name="disk", kind="folder", config={"path": "bench"}
        )
        job = services.export_create(
            project=project,
            actor=user,
            destination_id=destination.pk,
            start_date=(now - timedelta(days=31)).date(),
            end_date=now.date(),
        )
    # The on_commit hook queued a task no worker consumes here: the child runs the job.
    connection.close()
    export = in_child(env, "export", job.pk)
    assert export["status"] == "succeeded", export
    size = sum(path.stat().st_size for path in Path(root).rglob("*.parquet"))
    print(
        f"export (worker process, chunks of {args.chunk:,}): {export['rows']:,} rows in {export['seconds']:.1f} s = "
        f"{export['rows'] / export['seconds']:,.0f} rows/s; {size / 2**20:.0f} MiB of Parquet; "
        f"peak RSS {export['peak_mib']:.0f} MiB (after start-up: {export['before_mib']:.0f} MiB)"
    )

    columns = ", ".join(
        f"{column.name}::text" if column.source is not None and not isinstance(column.source, str) else column.name
        for column in TABLES["steps"].columns
    )
    started = time.perf_counter()
    copied = 0
    with connection.cursor() as cursor:
        with cursor.copy(f"COPY (SELECT {columns} FROM runs_step ORDER BY id) TO STDOUT") as copy:  # noqa: S608
            for data in copy:
                copied += len(data)
    elapsed = time.perf_counter() - started
    print(
        f"COPY TO STDOUT of the steps: {steps:,} rows in {elapsed:.1f} s = {steps / elapsed:,.0f} rows/s "
        f"({copied / 2**20:.0f} MiB of text)"
    )

    connection.close()
    memory = in_child(env, "memory")
    print(
        f"in memory (fetchall + pq.write_table) of the steps: {memory['rows']:,} rows in {memory['seconds']:.1f} s = "
        f"{memory['rows'] / memory['seconds']:,.0f} rows/s; peak RSS {memory['peak_mib']:.0f} MiB "
        f"(after start-up: {memory['before_mib']:.0f} MiB)"
    )


if __name__ == "__main__":
    main()
