"""Benchmark: many Server-Sent Events subscribers of one session on one web process.

Starts the platform's ASGI app under uvicorn (one process, production settings, private
embedded PostgreSQL and Redis), opens ``--subscribers`` concurrent streams of one
session's events (``GET .../agent-sessions/{id}/events/``, API key auth), then stores
``--events`` events one at a time through the write path (runs.services.events, as the
executor does). For each event and subscriber, the time from the event's commit to the
subscriber reading its frame is recorded. Prints p50/p95/max against the goal (p95 under
200 ms), and the web process's memory per subscriber (its RSS with the streams open,
minus before, divided by their number).

    .venv/bin/python bench/sse_subscribers.py [--subscribers 500] [--events 40]
"""

from __future__ import annotations

import argparse
import asyncio
import time

from _platform import bench_project, percentile, private_platform, serve_platform


def setup():
    from agentops.scoping import organization_scope
    from agentops.services.api_keys import api_key_create
    from runs.services.agents import agent_create
    from runs.services.sessions import session_create

    user, project = bench_project()
    organization = project.organization
    with organization_scope(organization):
        _, key = api_key_create(project=project, actor=user, name="bench", scopes=["read"])
        agent = agent_create(project=project, actor=user, name="chat", model="offline", tools=[])
        session = session_create(project=project, agent=agent, actor=user)
    return organization, session, key


def store(organization, session, n: int) -> float:
    """Store one event; return the moment it committed (time.time())."""
    from django.db import transaction

    from agentops.scoping import organization_scope
    from runs.services.events import event_append

    committed = []
    with organization_scope(organization), transaction.atomic():
        event_append(session=session, type="assistant_chunk", data={"step": 1, "text": f"piece {n} "})
        transaction.on_commit(lambda: committed.append(time.time()))
    return committed[0]


def rss_kib(pid: int) -> int:
    with open(f"/proc/{pid}/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    return 0


async def subscriber(host, port, path, key, last_id, received, ready, wanted):
    """One stream over a plain socket (the least client overhead): records when each
    event id arrived, until it has ``wanted`` of them."""
    reader, writer = await asyncio.open_connection(host, port)
    writer.write(
        f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {key}\r\n"
        f"Accept: text/event-stream\r\nLast-Event-ID: {last_id}\r\n\r\n".encode()
    )
    await writer.drain()
    status = await reader.readline()
    if b" 200 " not in status:
        raise RuntimeError(f"stream refused: {status!r}")
    ready.release()
    got = {}
    buffer = b""
    while len(got) < wanted:
        chunk = await reader.read(65536)
        if not chunk:
            break
        now = time.time()
        buffer += chunk
        lines = buffer.split(b"\n")
        buffer = lines.pop()
        for line in lines:
            if line.startswith(b"id: "):
                got[int(line[4:])] = now
    received.append(got)
    writer.close()


async def run(args, env, organization, session, key) -> None:
    server, port = serve_platform(env)
    try:
        for _ in range(300):
            try:
                _, writer = await asyncio.open_connection("127.0.0.1", port)
                writer.close()
                break
            except OSError:
                await asyncio.sleep(0.1)
        await asyncio.sleep(1.0)
        path = f"/api/v1/projects/bench/bench/agent-sessions/{session.pk}/events/"
        last_id = session.event_seq if session.event_seq else 1  # skip the "ready" event
        before = rss_kib(server.pid)
        ready = asyncio.Semaphore(0)
        received: list[dict] = []
        tasks = [
            asyncio.create_task(subscriber("127.0.0.1", port, path, key, last_id, received, ready, args.events))
            for _ in range(args.subscribers)
        ]
        for _ in range(args.subscribers):
            await ready.acquire()
        await asyncio.sleep(2.0)  # every stream has read its (empty) catch-up and waits
        during = rss_kib(server.pid)
        stored = {}
        for n in range(args.events):
            committed = await asyncio.to_thread(store, organization, session, n)
            stored[last_id + n + 1] = committed
            await asyncio.sleep(args.interval)
        await asyncio.wait_for(asyncio.gather(*tasks), timeout=120)
    finally:
        server.terminate()
        server.wait(timeout=30)
    latencies = [(got[i] - stored[i]) * 1000 for got in received for i in got if i in stored]
    complete = sum(len(got) == args.events for got in received)
    print(f"subscribers: {args.subscribers} (complete streams: {complete}), events: {args.events}")
    print(
        f"stored -> delivered: p50 {percentile(latencies, 0.5):.1f} ms, p95 {percentile(latencies, 0.95):.1f} ms, "
        f"max {max(latencies):.1f} ms ({len(latencies)} deliveries; goal p95 < 200 ms)"
    )
    print(
        f"web process RSS: {before / 1024:.1f} MiB before, {during / 1024:.1f} MiB with the streams open: "
        f"{(during - before) / args.subscribers:.1f} KiB per subscriber"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--subscribers", type=int, default=500)
    parser.add_argument("--events", type=int, default=40)
    parser.add_argument("--interval", type=float, default=0.1, help="seconds between two events")
    args = parser.parse_args()
    with private_platform(ALLOWED_HOSTS="127.0.0.1,localhost") as env:
        organization, session, key = setup()
        asyncio.run(run(args, env, organization, session, key))


if __name__ == "__main__":
    main()
