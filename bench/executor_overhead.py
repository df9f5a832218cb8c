"""Benchmark: the platform's own overhead per LLM step of an executed run.

A local HTTP server speaking Mistral's chat-completions API answers instantly (a tool
call until the run has made --steps calls, then a final answer). Runs execute in this
process through the real `mistralai` SDK and the real write path (private embedded
PostgreSQL and Redis, production settings). For every LLM step the time spent outside
the model call (storing the llm step, running and storing the tool step, saving the
executor's state) is the overhead; p50 and p95 are printed against the goal (p50 < 10 ms),
with the SDK round trip to the local server shown separately.

    .venv/bin/python bench/executor_overhead.py [--runs 10] [--steps 20]
"""

from __future__ import annotations

import argparse
import statistics
import time

from _platform import bench_project, percentile, private_platform, serve_tool_calling_mistral


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20, help="tool-calling steps per run")
    args = parser.parse_args()
    with private_platform():
        run(args)


def run(args) -> None:
    from agentops.llm import mistral
    from agentops.scoping import organization_scope
    from agentops.services.secrets import provider_secret_set
    from runs.execution import run_execute, run_start
    from runs.models import Run
    from runs.services.agents import agent_create

    url = serve_tool_calling_mistral(args.steps)
    user, project = bench_project()
    organization = project.organization
    model_seconds: list[float] = []
    original_chat = mistral.MistralProvider.chat

    def timed_chat(self, **kwargs):
        started = time.perf_counter()
        try:
            return original_chat(self, **kwargs)
        finally:
            model_seconds.append(time.perf_counter() - started)

    mistral.MistralProvider.chat = timed_chat
    overheads: list[float] = []
    with organization_scope(organization):
        provider_secret_set(
            organization=organization, actor=user, provider="mistral", api_key="bench-key-123456", base_url=url
        )
        agent = agent_create(
            project=project,
            actor=user,
            name="bench",
            model="mistral-small-latest",
            tools=["calculator"],
            step_limit=args.steps + 1,
        )
        for _ in range(args.runs + 1):  # the first run warms up
            model_seconds.clear()
            run = run_start(project=project, agent=agent, actor=user, input="Count in threes.")
            started = time.perf_counter()
            run_execute(run_id=run.pk)
            total = time.perf_counter() - started
            run.refresh_from_db()
            assert run.status == Run.Status.SUCCEEDED, run.error
            calls = len(model_seconds)
            overheads.append((total - sum(model_seconds)) / calls * 1000)
            round_trip = statistics.median(model_seconds) * 1000
        overheads = overheads[1:]
    p95 = percentile(overheads, 0.95)
    print(
        f"{args.runs} runs x {args.steps + 1} LLM steps ({args.steps} with a tool call), local server answering at once"
    )
    print(
        f"platform overhead per LLM step: p50 {statistics.median(overheads):.2f} ms, p95 {p95:.2f} ms "
        f"(goal p50 < 10 ms; per run, averaged over its steps)"
    )
    print(f"SDK round trip to the local server (not overhead): median {round_trip:.2f} ms")


if __name__ == "__main__":
    main()
