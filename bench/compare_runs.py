"""Benchmark: comparing two 500-step runs.

Stores two realistic runs of 500 steps each through ``runs.ingest.ingest``
on a private embedded PostgreSQL (a root agent step, then LLM calls and tool calls in
turn, with chat-completion responses, tool arguments and results of about 1 kB, a
memory snapshot every 25 steps and a long final answer). Run B is run A replayed with
changes: about one tool result in ten differs, some tools get other arguments, a few
steps are added and removed, the answer differs in places. Then times, after one
warm-up, in process with Django's test client (signed in, real PostgreSQL):

  - the compare page, ``GET /o/<org>/p/<project>/runs/compare/?a=&b=`` (rendered HTML),
  - the API, ``GET /api/v1/projects/<org>/<project>/compare/?a=&b=`` (JSON),
  - ``runs.compare.compare_runs`` alone, with its query count.

Prints p50 and p95 of each against the goal: the diff renders in under 1 s.

    .venv/bin/python bench/compare_runs.py [--steps 500] [--repeat 10]
"""

from __future__ import annotations

import argparse
import json
import random
import statistics
import warnings
from datetime import UTC, datetime, timedelta

from _platform import bench_project, percentile, private_platform, timed

GOAL_MS = 1000
TOOLS = ("search_orders", "lookup_customer", "calculator", "http_fetch", "memory_set")
SENTENCES = (
    "The order was shipped from the Lyon warehouse on Tuesday and should arrive within three working days.",
    "A refund of the delivery fee was issued because the parcel left later than the promised date.",
    "The customer asked to be contacted by email rather than by phone for any further question.",
    "Their loyalty status was checked and the 10% discount applies to the next purchase as well.",
    "No other open ticket was found for this account during the last ninety days.",
)


def completion(rng: random.Random, index: int, tool: str | None, arguments: dict | None, text: str = "") -> dict:
    """A chat-completion response, as the executor stores an LLM step's output."""
    calls = None
    if tool:
        calls = [
            {
                "id": f"call{rng.getrandbits(40):x}",
                "type": "function",
                "function": {"name": tool, "arguments": json.dumps(arguments)},
            }
        ]
    return {
        "id": f"cmpl-{rng.getrandbits(64):x}",
        "object": "chat.completion",
        "created": 1_790_000_000 + index,
        "model": "mistral-large-2512",
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls" if tool else "stop",
                "message": {"role": "assistant", "content": text, "tool_calls": calls},
            }
        ],
        "usage": {"prompt_tokens": 900 + index, "completion_tokens": 40},
    }


def tool_payloads(rng: random.Random, index: int) -> tuple[str, dict, dict]:
    tool = TOOLS[index % len(TOOLS)]
    arguments = {"query": f"order {1000 + index}", "fields": ["status", "eta", "items"], "limit": 5}
    result = {
        "matches": [
            {"order": 1000 + index + k, "status": rng.choice(["shipped", "pending"]), "note": SENTENCES[k % 5]}
            for k in range(5)
        ],
        "took_ms": rng.randint(5, 80),
    }
    return tool, arguments, result


def build_run(trace_id: str, steps: int, start: datetime, *, variant: bool):
    """The events of one run of ``steps`` steps; ``variant`` makes run B."""
    from runs.events import MemoryEvent, RunEvent, StepEvent, ToolCallEvent

    rng = random.Random(11)  # both runs draw the same payloads; B then changes some
    answer_lines = [SENTENCES[n % 5] for n in range(24)]
    if variant:
        answer_lines[3] = answer_lines[3].replace("three working days", "two working days")
        answer_lines[10] = "The parcel was split into two deliveries at the customer's request."
        answer_lines.insert(17, "A voucher code was sent by email.")
    answer = "\n".join(answer_lines)
    step_events = [
        StepEvent(
            trace_id=trace_id,
            span_id="root",
            kind="agent",
            name="support agent",
            started_at=start,
            ended_at=start + timedelta(seconds=steps),
            status="ok",
            input={"question": "Where are my orders, and is a refund due?"},
            output={"answer": answer},
        )
    ]
    calls, snapshots, memory = [], [], {"customer": "customer-77", "orders": [], "notes": []}
    position = 0
    for index in range(1, steps):
        at = start + timedelta(seconds=index)
        tool, arguments, result = tool_payloads(rng, index)
        if variant and index % 97 == 0:
            continue  # a step run B does not take
        if variant and index % 10 == 4:
            result = {**result, "took_ms": result["took_ms"] + 1}  # another result
        if variant and index % 31 == 0:
            arguments = {**arguments, "limit": 10}  # other arguments
        span_id = f"s{index}"
        if index % 2:  # an LLM call asking for the next tool
            step_events.append(
                StepEvent(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id="root",
                    kind="llm",
                    name="chat mistral-large-2512",
                    model="mistral-large-2512",
                    provider="mistral_ai",
                    started_at=at,
                    ended_at=at + timedelta(milliseconds=800),
                    status="ok",
                    input_tokens=900 + index,
                    output_tokens=40,
                    input={"messages": [{"role": "user", "content": SENTENCES[index % 5] * 4}]},
                    output=completion(rng, index, TOOLS[(index + 1) % len(TOOLS)], arguments),
                )
            )
        else:
            step_events.append(
                StepEvent(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id="root",
                    kind="tool",
                    name=tool,
                    started_at=at,
                    ended_at=at + timedelta(milliseconds=150),
                    status="ok",
                    input=arguments,
                    output=result,
                )
            )
            calls.append(
                ToolCallEvent(
                    trace_id=trace_id,
                    call_id=f"{trace_id}-{index}",
                    tool_name=tool,
                    span_id=span_id,
                    arguments=arguments,
                    result=result,
                    latency_ms=150.0,
                    started_at=at,
                )
            )
        if variant and index % 113 == 0:
            step_events.append(  # an extra step only run B takes
                StepEvent(
                    trace_id=trace_id,
                    span_id=f"extra{index}",
                    parent_span_id="root",
                    kind="tool",
                    name="http_fetch",
                    started_at=at + timedelta(milliseconds=500),
                    ended_at=at + timedelta(milliseconds=700),
                    status="ok",
                    input={"url": f"https://example.com/orders/{index}"},
                    output={"status": 200, "body": SENTENCES[index % 5]},
                )
            )
        if index % 25 == 0:
            memory = {
                **memory,
                "orders": [*memory["orders"], 1000 + index][-10:],
                "notes": [*memory["notes"], SENTENCES[index % 5]][-5:],
                "last_step": index if not variant else index + 1,
            }
            position += 1
            snapshots.append(MemoryEvent(trace_id, f"m{position}", position, dict(memory), span_id=span_id))
    run = RunEvent(trace_id, {"name": f"support run {trace_id}", "agent_name": "support", "agent_version": "3"})
    return {"runs": [run], "steps": step_events, "tool_calls": calls, "snapshots": snapshots}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--repeat", type=int, default=10)
    args = parser.parse_args()
    extra = {"API_RATE_LIMIT_PER_USER": "1000000/min", "ALLOWED_HOSTS": "testserver,localhost,127.0.0.1"}
    # WhiteNoise warns that no static files were collected; pages render without them.
    warnings.filterwarnings("ignore", message="No directory at")
    with private_platform(**extra):
        from django.conf import settings
        from django.test import override_settings

        # Production settings want collected static files (a manifest) to render pages; the
        # benchmark collects none, and a manifest lookup costs the same as a plain URL.
        storages = {
            **settings.STORAGES,
            "staticfiles": {"BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"},
        }
        with override_settings(STORAGES=storages):
            run(args)


def run(args) -> None:
    from django.db import connection
    from django.test import Client
    from django.test.utils import CaptureQueriesContext

    from agentops.scoping import organization_scope
    from runs.compare import compare_runs
    from runs.ingest import ingest
    from runs.models import Run

    user, project = bench_project()
    organization = project.organization
    with organization_scope(organization):
        start = datetime.now(UTC) - timedelta(hours=2)
        for trace_id, variant in (("run-a", False), ("run-b", True)):
            ingest(project=project, announce=False, **build_run(trace_id, args.steps, start, variant=variant))
        a = Run.objects.get(project=project, trace_id="run-a")
        b = Run.objects.get(project=project, trace_id="run-b")
    print(f"stored run A ({a.step_count} steps) and run B ({b.step_count} steps) through ingest()")

    client = Client()
    client.force_login(user)
    query = {"a": a.pk, "b": b.pk}
    sizes = {}

    def page():
        response = client.get("/o/bench/p/bench/runs/compare/", query)
        assert response.status_code == 200, response.content[:300]
        sizes["page"] = len(response.content)

    def api():
        response = client.get("/api/v1/projects/bench/bench/compare/", query)
        assert response.status_code == 200, response.content[:300]
        sizes["api"] = len(response.content)
        sizes["summary"] = response.json()["steps"]["summary"]

    def service():
        with organization_scope(organization):
            compare_runs(a, b)

    with organization_scope(organization), CaptureQueriesContext(connection) as queries:
        compare_runs(a, b)
    query_count = len(queries)  # read now: each request clears the connection's query log
    results = [
        ("compare page (HTML)", timed(page, args.repeat)),
        ("compare API (JSON)", timed(api, args.repeat)),
        ("compare_runs() alone", timed(service, args.repeat)),
    ]
    print(f"alignment: {sizes['summary']}; compare_runs() made {query_count} queries")
    print(f"page {sizes['page'] / 1024:.0f} KiB, API answer {sizes['api'] / 1024:.0f} KiB")
    print(f"{'request':28} {'p50 ms':>8} {'p95 ms':>8} {'goal ms':>8}")
    for name, samples in results:
        p95 = percentile(samples, 0.95)
        verdict = "ok" if p95 < GOAL_MS else "OVER"
        print(f"{name:28} {statistics.median(samples):8.1f} {p95:8.1f} {GOAL_MS:8d}  {verdict}")


if __name__ == "__main__":
    main()
