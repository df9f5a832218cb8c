"""Benchmark: a 500-item experiment on 2 Celery worker processes.

A local Mistral-speaking server answers each call after --latency seconds (0.05: 50 ms).
The agent answers in one model call per item, so the experiment makes 500 calls. Two
`celery worker` processes (thread pool, --threads each) on a private embedded
PostgreSQL and Redis run the items (concurrency = 2 x --threads, the experiment's own
limit) and score them with a rule evaluator. Prints the wall time from start to the
experiment's end against the ideal: calls x latency / concurrency.

    .venv/bin/python bench/experiment_500.py [--items 500] [--latency 0.05] [--threads 8]
"""

from __future__ import annotations

import argparse
import time

from _platform import bench_project, private_platform, serve_tool_calling_mistral
from concurrent_runs import start_workers, stop_workers, wait_for_workers


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--items", type=int, default=500)
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the model server takes per call")
    parser.add_argument("--threads", type=int, default=8, help="threads per worker process")
    args = parser.parse_args()
    with private_platform() as env:
        workers = start_workers(env, count=2, threads=args.threads)
        try:
            wait_for_workers(2)
            run(args, serve_tool_calling_mistral(0, args.latency))
        finally:
            stop_workers(workers)


def run(args, url: str) -> None:
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
        f"ratio {wall / ideal:.1f}x; {args.items / wall:.1f} items/s"
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
