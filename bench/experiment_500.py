"""Benchmark: a 500-item experiment on 2 Celery worker processes.

A local Mistral-speaking server answers each call after --latency seconds (0.05: 50 ms).
The agent answers in one model call per item, so the experiment makes 500 calls. Two
`celery worker` processes (thread pool, --threads each) on a private embedded
PostgreSQL and Redis run the items (concurrency = 2 x --threads, the experiment's own
limit) and score them with a rule evaluator. Prints items/s beside the 40 items/s target
and the ideal (calls x latency / concurrency), the workers' CPU per item (their process
CPU time from the experiment's start to its end, over the items) beside the 130 ms
measured before the work of issue 19 and its 43 ms target, and where that CPU goes per
stage with the SQL statements each sends (bench/_stage_worker.py; --plain runs the
workers unmeasured, without the breakdown).

    .venv/bin/python bench/experiment_500.py [--items 500] [--latency 0.05] [--threads 8] [--plain]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import tempfile
import time
from pathlib import Path

import psutil
from _platform import ROOT, bench_project, private_platform, serve_tool_calling_mistral
from concurrent_runs import start_workers, stop_workers, wait_for_workers

TARGET_ITEMS_PER_SECOND = 40
BASELINE_CPU_MS = 130  # per item, measured before issue 19 (15 items/s at concurrency 16)
TARGET_CPU_MS = BASELINE_CPU_MS / 3


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the model server takes per call")
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    parser.add_argument("--plain", action="store_true", help="unmeasured workers: no per-stage breakdown")
    args = parser.parse_args()
    # The stage workers' records: a folder of this run's own (removed at the end) unless
    # one is given; none for plain workers.
    given = os.environ.get("BENCH_STAGES_DIR")
    stages_dir = given or (None if args.plain else tempfile.mkdtemp(prefix="bench-stages-"))
    try:
        with private_platform(**({} if args.plain else {"BENCH_STAGES_DIR": stages_dir})) as env:
            program = ("-m", "celery") if args.plain else (str(ROOT / "bench" / "_stage_worker.py"),)
            workers = start_workers(env, count=2, threads=args.threads, program=program)
            try:
                wait_for_workers(2)
                cpu = run(args, serve_tool_calling_mistral(0, args.latency), workers)
            finally:
                stop_workers(workers)
        if not args.plain:
            print_stages(stages_dir, args.items, cpu)
    finally:
        if stages_dir and not given:
            shutil.rmtree(stages_dir, ignore_errors=True)


def cpu_seconds(pids: list[int]) -> float:
    total = 0.0
    for pid in pids:
        times = psutil.Process(pid).cpu_times()
        total += times.user + times.system
    return total


def database_cpu_seconds() -> float:
    """CPU time of the embedded PostgreSQL's processes (the server and its backends)."""
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = psutil.Process(cursor.fetchone()[0])
    server = backend.parent()
    total = 0.0
    for process in [server, *server.children()]:
        try:
            times = process.cpu_times()
        except psutil.NoSuchProcess:
            continue
        total += times.user + times.system + times.children_user + times.children_system
    return total


def run(args, url: str, workers) -> float:
    from agentops.scoping import organization_scope
    from agentops.services.secrets import provider_secret_set
    from evals.models import Dataset, DatasetItem, DatasetVersion, Evaluator, Experiment, ExperimentResult
    from evals.services.experiments import experiment_start
    from runs.services.agents import agent_create

    concurrency = 2 * args.threads
    user, project = bench_project()
    organization = project.organization
    with organization_scope(organization):
        provider_secret_set(
            organization=organization, actor=user, provider="mistral", api_key="bench-key-123456", base_url=url
        )
        agent = agent_create(project=project, actor=user, name="bench", model="mistral-small-latest")
        dataset = Dataset.objects.create(organization=organization, project=project, name="bench", latest_version=1)
        DatasetVersion.objects.create(
            organization=organization, project=project, dataset=dataset, number=1, item_count=args.items
        )
        DatasetItem.objects.bulk_create(
            DatasetItem(
                organization=organization,
                project=project,
                dataset=dataset,
                key=f"item-{n}",
                input=f"task {n}",
                expected="done",
                added_in=1,
            )
            for n in range(args.items)
        )
        evaluator = Evaluator.objects.create(
            organization=organization, project=project, name="answered", kind="exact_match"
        )
        pids = [worker.pid for worker in workers]
        cpu_before, database_before = cpu_seconds(pids), database_cpu_seconds()
        started = time.perf_counter()
        experiment = experiment_start(
            project=project, actor=user, dataset=dataset, agent=agent, evaluators=[evaluator], concurrency=concurrency
        )
        while True:
            experiment.refresh_from_db()
            if experiment.ended:
                break
            time.sleep(0.05)
        wall = time.perf_counter() - started
        cpu = cpu_seconds(pids) - cpu_before
        database_cpu = database_cpu_seconds() - database_before
        done = ExperimentResult.objects.filter(experiment=experiment, status="done").count()
        stages = breakdown(experiment)
    assert experiment.status == Experiment.Status.SUCCEEDED, experiment.error
    ideal = args.items * args.latency / concurrency
    print(
        f"{args.items} items, 1 model call each, server answering in {args.latency * 1000:.0f} ms, "
        f"2 worker processes x {args.threads} threads (experiment concurrency {concurrency})"
    )
    print(f"items done: {done}; score: {experiment.summary['metrics']['answered']['mean']:.2f}")
    print(
        "per item, median ms: waiting for a worker {queued:.0f}, executing (model call included) {executing:.0f}, "
        "ended -> scored {scoring:.0f}".format(**stages)
    )
    print(
        f"wall time {wall:.2f} s; ideal (calls x {args.latency * 1000:.0f} ms / {concurrency}) {ideal:.2f} s; "
        f"ratio {wall / ideal:.1f}x"
    )
    print(
        f"items/s: {args.items / wall:.1f} (target {TARGET_ITEMS_PER_SECOND}, ideal {args.items / ideal:.0f}, "
        f"CPU bound of 2 cores at this CPU per item {2 * args.items / (cpu + database_cpu):.0f})"
    )
    print(
        f"worker CPU per item: {cpu / args.items * 1000:.1f} ms (before issue 19 {BASELINE_CPU_MS} ms, "
        f"target {TARGET_CPU_MS:.0f} ms); PostgreSQL CPU per item {database_cpu / args.items * 1000:.1f} ms"
    )
    return cpu


def print_stages(directory: str, items: int, cpu: float) -> None:
    """Worker CPU and SQL statements per item, by stage, from bench/_stage_worker.py's reports
    (the workers' tasks are the experiment's, but for a ping or two before it)."""
    reports = [json.loads(path.read_text()) for path in Path(directory).glob("*.json")]
    if not reports:
        print("no per-stage report (the workers did not write one)")
        return
    stages: dict[str, float] = {}
    sql: dict[str, int] = {}
    for report in reports:
        for stage, seconds in report["stages_cpu"].items():
            stages[stage] = stages.get(stage, 0.0) + seconds
        for stage, count in report["sql"].items():
            sql[stage] = sql.get(stage, 0) + count
    # The stages add up the tasks' CPU; the rest of the workers' CPU over the experiment is Celery's own.
    outside = cpu - sum(stages.values())
    print(f"per stage, per item (worker CPU ms, SQL statements), {len(reports)} worker processes:")
    rows = sorted(stages.items(), key=lambda row: -row[1])
    rows.append(("Celery outside tasks (consumer, broker, acks, pool)", outside))
    for stage, seconds in rows:
        print(f"  {stage:<58} {seconds / items * 1000:7.2f} ms  {sql.get(stage, 0) / items:6.1f} SQL")
    print(f"  {'total':<58} {cpu / items * 1000:7.2f} ms  {sum(sql.values()) / items:6.1f} SQL")
    collected = sum(report.get("gc", {}).get("cpu", 0.0) for report in reports)
    collections = [sum(report.get("gc", {}).get("collections", [0, 0, 0])[g] for report in reports) for g in range(3)]
    print(
        f"  of which the garbage collector: {collected / items * 1000:.2f} ms per item "
        f"(collections of generations 0/1/2 over the run: {'/'.join(map(str, collections))})"
    )


def breakdown(experiment) -> dict[str, float]:
    """Median time per item in each stage, from the stored timestamps: created -> first
    model call starts (queue), first model call -> run ended, run ended -> item scored."""
    import statistics

    from evals.models import ExperimentResult
    from runs.models import Step

    results = list(
        ExperimentResult.objects.filter(experiment=experiment).values(
            "run_id", "ended_at", "run__created_at", "run__ended_at"
        )
    )
    first_call = dict(
        Step.objects.filter(run_id__in=[r["run_id"] for r in results], kind="llm")
        .order_by("run_id", "started_at")
        .distinct("run_id")
        .values_list("run_id", "started_at")
    )

    def ms(later, earlier):
        return (later - earlier).total_seconds() * 1000

    return {
        "queued": statistics.median(ms(first_call[r["run_id"]], r["run__created_at"]) for r in results),
        "executing": statistics.median(ms(r["run__ended_at"], first_call[r["run_id"]]) for r in results),
        "scoring": statistics.median(ms(r["ended_at"], r["run__ended_at"]) for r in results),
    }


if __name__ == "__main__":
    main()
