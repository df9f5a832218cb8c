"""Benchmark: 50 concurrent executed runs on 2 Celery worker processes.

A local Mistral-speaking server answers each call after --latency seconds (a tool call
for the first --steps calls of a run, then a final answer). Two `celery worker`
processes (thread pool, --threads each) on a private embedded PostgreSQL and Redis
execute --runs runs started at once through the real start path. Prints the wall time,
and checks that every run succeeded with every step, tool call and message stored.

    .venv/bin/python bench/concurrent_runs.py [--runs 50] [--steps 3] [--latency 0.2] [--threads 25]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time

from _platform import ROOT, bench_project, private_platform, serve_tool_calling_mistral


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=50)
    parser.add_argument("--steps", type=int, default=3, help="tool-calling steps per run")
    parser.add_argument("--latency", type=float, default=0.2, help="seconds the model server takes per call")
    parser.add_argument("--threads", type=int, default=25, help="threads per worker process")
    args = parser.parse_args()
    workers = []
    with private_platform() as env:
        try:
            project, agent, user = prepare(serve_tool_calling_mistral(args.steps, args.latency))
            workers = start_workers(env, count=2, threads=args.threads)
            wait_for_workers(2)
            run_ids, started = start_runs(project, agent, user, args.runs)
            check(project, run_ids, started, args)
        finally:
            stop_workers(workers)


def start_workers(
    env: dict[str, str], *, count: int, threads: int, program: tuple[str, ...] = ("-m", "celery")
) -> list[subprocess.Popen]:
    """``count`` `celery worker` processes with a pool of ``threads`` threads each
    (``program``: how Python starts Celery, e.g. bench/_stage_worker.py's measuring one)."""
    return [
        subprocess.Popen(
            [
                sys.executable,
                *program,
                "-A",
                "agentops",
                "worker",
                "--pool",
                "threads",
                "--concurrency",
                str(threads),
                "--loglevel",
                "WARNING",
                "-n",
                f"bench{n}@%h",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.DEVNULL,
        )
        for n in range(count)
    ]


def stop_workers(workers: list[subprocess.Popen]) -> None:
    for worker in workers:
        worker.terminate()
    for worker in workers:
        worker.wait(timeout=60)


def prepare(url: str):
    from agentops.scoping import organization_scope
    from agentops.services.secrets import provider_secret_set
    from runs.services.agents import agent_create

    user, project = bench_project()
    organization = project.organization
    with organization_scope(organization):
        provider_secret_set(
            organization=organization, actor=user, provider="mistral", api_key="bench-key-123456", base_url=url
        )
        agent = agent_create(
            project=project, actor=user, name="bench", model="mistral-small-latest", tools=["calculator"], step_limit=20
        )
    return project, agent, user


def wait_for_workers(count: int) -> None:
    from agentops.celery import app

    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        if len(app.control.ping(timeout=1.0) or []) >= count:
            return
    raise RuntimeError("the workers did not start")


def start_runs(project, agent, user, runs: int):
    from agentops.scoping import organization_scope
    from runs.execution import run_start

    started = time.perf_counter()
    with organization_scope(project.organization):
        ids = [run_start(project=project, agent=agent, actor=user, input=f"task {n}").pk for n in range(runs)]
    return ids, started


def wait_for_runs(run_ids) -> list[str]:
    """The runs' statuses once every one has ended (call in the organization's scope)."""
    from runs.models import Run

    while True:
        statuses = list(Run.objects.filter(pk__in=run_ids).values_list("status", flat=True))
        if all(status in Run.ENDED for status in statuses):
            return statuses
        time.sleep(0.2)


def check(project, run_ids, started, args) -> None:
    from agentops.scoping import organization_scope
    from runs.models import Message, Step, ToolCall

    with organization_scope(project.organization):
        statuses = wait_for_runs(run_ids)
        wall = time.perf_counter() - started
        succeeded = statuses.count("succeeded")
        steps = Step.objects.filter(run_id__in=run_ids).count()
        calls = ToolCall.objects.filter(run_id__in=run_ids).count()
        messages = Message.objects.filter(run_id__in=run_ids).count()
    runs = len(run_ids)
    # Per run: the root, steps+1 llm steps, steps tool steps; user + (steps+1) assistant + steps tool messages.
    expected_steps = runs * (1 + (args.steps + 1) + args.steps)
    expected_messages = runs * (1 + (args.steps + 1) + args.steps)
    print(
        f"{runs} runs started at once, {args.steps + 1} model calls of {args.latency:g} s each per run, "
        f"2 worker processes x {args.threads} threads"
    )
    print(
        f"all finished in {wall:.1f} s; succeeded {succeeded}/{runs}; steps stored {steps}/{expected_steps}, "
        f"tool calls {calls}/{runs * args.steps}, messages {messages}/{expected_messages}"
    )
    ok = succeeded == runs and steps == expected_steps and calls == runs * args.steps and messages == expected_messages
    print("every step stored" if ok else "MISSING DATA")


if __name__ == "__main__":
    main()
