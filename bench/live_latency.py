"""Benchmark: time from a step being stored to an open page's WebSocket receiving it.

The run's page is connected through the real ASGI WebSocket stack (Channels
consumer, Redis channel layer on a private embedded Redis, production settings); steps are
stored one at a time through the write path (`runs.ingest.ingest`, as the
executor and the ingestion endpoints do) from a worker thread; for each, the time from
the moment the transaction committed to the moment the page's socket received the update
is recorded. Prints p50/p95 against the goal (p95 < 200 ms).

    .venv/bin/python bench/live_latency.py [--steps 200]
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import time
from datetime import UTC, datetime

from _platform import bench_project, percentile, private_platform


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--steps", type=int, default=200)
    args = parser.parse_args()
    with private_platform():
        asyncio.run(measure(args.steps))


def setup():
    return bench_project()


def run_page(project) -> str:
    """The socket URL of the bench run's page (topic ``run:<id>``): the page a stored
    step of a running run is sent to (runs/live.py)."""
    from agentops import live
    from agentops.scoping import organization_scope
    from runs.models import Run

    with organization_scope(project.organization):
        run = Run.objects.get(project=project, trace_id="live-bench")
    return live.live_path(
        org_slug=project.organization.slug, project_slug=project.slug, topics=[live.topic("run", run.pk)]
    )


def store(project, n: int) -> float:
    """Store one step of a running run; return the moment it committed (perf_counter):
    a commit hook registered before ingest's own runs first, before the update is
    rendered and published."""
    from django.db import transaction

    from agentops.scoping import organization_scope
    from runs.events import StepEvent
    from runs.ingest import ingest

    committed: list[float] = []
    with organization_scope(project.organization), transaction.atomic():
        transaction.on_commit(lambda: committed.append(time.perf_counter()))
        ingest(
            project=project,
            steps=[
                StepEvent(
                    trace_id="live-bench",
                    span_id=f"step-{n}",
                    parent_span_id="root",
                    kind="tool",
                    name=f"step {n}",
                    started_at=datetime.now(UTC),
                    ended_at=datetime.now(UTC),
                    status="ok",
                )
            ],
        )
    return committed[0]


async def measure(steps: int) -> None:
    from asgiref.sync import sync_to_async
    from channels.routing import URLRouter
    from channels.testing import WebsocketCommunicator
    from django.db import connections

    from agentops.routing import websocket_urlpatterns

    user, project = await sync_to_async(setup)()
    await sync_to_async(store)(project, 0)
    page = WebsocketCommunicator(URLRouter(websocket_urlpatterns), await sync_to_async(run_page)(project))
    page.scope["user"] = user
    connected, _ = await page.connect()
    assert connected, "the page could not connect"
    latencies = []
    for n in range(1, steps + 1):
        committed = await asyncio.to_thread(store, project, n)
        await page.receive_from(timeout=5)
        latencies.append((time.perf_counter() - committed) * 1000)
        while not await page.receive_nothing(timeout=0.01):  # a batch may send two messages
            await page.receive_from(timeout=1)
    await page.disconnect()
    await sync_to_async(connections.close_all)()
    p95 = percentile(latencies, 0.95)
    print(f"{steps} steps stored one at a time while the run's page was open")
    print(
        f"stored -> received on the page's WebSocket: p50 {statistics.median(latencies):.1f} ms, "
        f"p95 {p95:.1f} ms (goal p95 < 200 ms)"
    )


if __name__ == "__main__":
    main()
