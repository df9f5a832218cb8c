"""Benchmark: OTLP ingestion throughput, beside PostgreSQL's own COPY limit in the same run.

On a private platform (embedded PostgreSQL and Redis in a temporary folder, production
settings), starts the web server exactly as ``manage.py serve`` (``make run``) does: one
uvicorn process per available core unless ``--workers``. Then 4 client processes POST
realistic agent traces (8 spans per trace, about 1.5 kB of attributes per span, protobuf,
512 spans per request as the OpenTelemetry SDK's batch exporter sends by default) to
/api/v1/otlp/v1/traces. A 200 means stored (ingestion is synchronous), so the figure is
spans accepted (200 answers, minus any rejected in partial_success) per second until
every run is readable through the REST API.

It prints, from the same run:

- spans/s accepted and readable, and the share of the COPY limit: PostgreSQL's COPY of
  the very step rows just stored (their text) into a table like ``runs_step`` (same
  columns and indexes), in rows/s;
- the web processes' peak RSS (each must stay under 300 MB);
- where the CPU went, per span: the web processes, PostgreSQL and the clients over the
  HTTP run (from the processes' CPU times), then the web's share by stage (body decode,
  mapping to events, the write's Python, the write's PostgreSQL) from the same requests
  re-sent in this process under new trace ids;
- the machine's CPU-bound capacity: its cores over the CPU a span took. On a shared
  machine the wall-clock figures (throughput and COPY alike) fall with the others' load;
  this one does not, and it is what the wall clock reaches when nothing else runs.

    .venv/bin/python bench/ingest_otlp.py [--traces 8192] [--clients 4] [--workers N]
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import random
import subprocess
import sys
import threading
import time
from io import StringIO
from pathlib import Path

from _platform import ROOT, free_port, private_platform

SPANS_PER_TRACE = 8
# 64 traces x 8 spans = 512 spans: the batch size the OpenTelemetry SDK exports by default
# (BatchSpanProcessor max_export_batch_size).
TRACES_PER_REQUEST = 64
RSS_LIMIT_MB = 300
# Requests re-sent in this process for the stage breakdown.
PROFILED_REQUESTS = 16


def build_request(batch: int, start_index: int, rng: random.Random) -> bytes:
    """One ExportTraceServiceRequest of TRACES_PER_REQUEST agent traces."""
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
    from opentelemetry.proto.common.v1.common_pb2 import AnyValue, KeyValue
    from opentelemetry.proto.trace.v1.trace_pb2 import ResourceSpans, ScopeSpans, Span, Status

    def kv(key, value):
        if isinstance(value, int):
            return KeyValue(key=key, value=AnyValue(int_value=value))
        return KeyValue(key=key, value=AnyValue(string_value=value))

    now = time.time_ns()
    spans = []
    filler = "lorem ipsum dolor sit amet " * 12  # ~320 bytes
    for t in range(TRACES_PER_REQUEST):
        trace_id = (start_index + t + 1).to_bytes(16, "big")  # all-zero ids are invalid
        root = (1).to_bytes(8, "big")
        for s in range(SPANS_PER_TRACE):
            span_id = (s + 1).to_bytes(8, "big")
            start = now - (SPANS_PER_TRACE - s) * 1_000_000
            if s == 0:
                attributes = [
                    kv("gen_ai.operation.name", "invoke_agent"),
                    kv("gen_ai.agent.name", "support"),
                    kv("session.id", f"session-{(start_index + t) // 4}"),
                ]
            elif s % 2:
                attributes = [
                    kv("gen_ai.operation.name", "chat"),
                    kv("gen_ai.request.model", "mistral-large-2512"),
                    kv("gen_ai.usage.input_tokens", rng.randint(200, 4000)),
                    kv("gen_ai.usage.output_tokens", rng.randint(20, 400)),
                    kv(
                        "gen_ai.input.messages",
                        '[{"role":"user","parts":[{"type":"text","content":"' + filler + '"}]}]',
                    ),
                ]
            else:
                attributes = [
                    kv("gen_ai.operation.name", "execute_tool"),
                    kv("gen_ai.tool.name", "search"),
                    kv("gen_ai.tool.call.arguments", '{"q": "' + filler[:200] + '"}'),
                ]
            attributes += [kv(f"app.detail.{i}", filler[:150]) for i in range(6)]
            spans.append(
                Span(
                    trace_id=trace_id,
                    span_id=span_id,
                    parent_span_id=b"" if s == 0 else root,
                    name=f"span {s}",
                    start_time_unix_nano=start,
                    end_time_unix_nano=start + 900_000,
                    attributes=attributes,
                    status=Status(code=Status.STATUS_CODE_OK),
                )
            )
    request = ExportTraceServiceRequest(
        resource_spans=[
            ResourceSpans(
                resource={"attributes": [kv("service.name", "bench-agent")]},
                scope_spans=[ScopeSpans(spans=spans)],
            )
        ]
    )
    return request.SerializeToString()


def client(url: str, key: str, first_trace: int, traces: int, ready, go, results) -> None:
    import requests
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    rng = random.Random(first_trace)
    bodies = [build_request(i, first_trace + i * TRACES_PER_REQUEST, rng) for i in range(traces // TRACES_PER_REQUEST)]
    session = requests.Session()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/x-protobuf"}
    accepted = failed = 0
    ready.put(os.getpid())
    go.wait()
    cpu = time.process_time()
    for body in bodies:
        for _attempt in range(5):
            response = session.post(url, data=body, headers=headers, timeout=120)
            if response.status_code in (429, 503):
                time.sleep(float(response.headers.get("Retry-After", "1")))
                continue
            break
        sent = TRACES_PER_REQUEST * SPANS_PER_TRACE
        if response.status_code == 200:
            answer = ExportTraceServiceResponse()
            answer.ParseFromString(response.content)
            rejected = answer.partial_success.rejected_spans
            accepted += sent - rejected
            failed += rejected
        else:
            failed += sent
    results.put((accepted, failed, time.process_time() - cpu))


def cpu_seconds(processes) -> float:
    import psutil

    total = 0.0
    for process in processes:
        try:
            times = process.cpu_times()
        except psutil.Error:  # noqa: S112 - gone
            continue
        total += times.user + times.system + getattr(times, "children_user", 0) + getattr(times, "children_system", 0)
    return total


def tree(root):
    import psutil

    try:
        return [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        return []


class RssSampler(threading.Thread):
    """The largest RSS any web process reached, sampled every 50 ms."""

    def __init__(self, web):
        super().__init__(daemon=True)
        self.web, self.peak, self.peak_total, self.running = web, 0, 0, True

    def run(self):
        import psutil

        while self.running:
            sizes = []
            for process in tree(self.web):
                try:
                    sizes.append(process.memory_info().rss)
                except psutil.Error:  # noqa: S110 - gone
                    pass
            if sizes:
                self.peak, self.peak_total = max(self.peak, *sizes), max(self.peak_total, sum(sizes))
            time.sleep(0.05)


def per_process_cpu(web) -> dict[int, float]:
    """CPU seconds of each web process (the server's children: one per worker)."""
    return {process.pid: cpu_seconds([process]) for process in web.children()}


def connections_per_process(web, port: int) -> list[int]:
    """How many client connections each web process holds (a connection stays with the
    process that accepted it while the client keeps it alive)."""
    import psutil

    counts = []
    for process in web.children():
        try:
            held = process.net_connections(kind="tcp")
        except psutil.Error:  # noqa: S112 - gone
            continue
        counts.append(sum(1 for c in held if c.status == psutil.CONN_ESTABLISHED and c.laddr.port == port))
    return sorted(counts, reverse=True)


def postgres_processes(data_dir: str):
    """The embedded PostgreSQL's postmaster and its children (the backends)."""
    import psutil

    pid = int((Path(data_dir) / "postgres" / "pgdata" / "postmaster.pid").read_text().split()[0])
    return tree(psutil.Process(pid))


def copy_limit(steps: int) -> tuple[int, float]:
    """PostgreSQL's COPY of the stored step rows (their COPY text, read back first) into a
    table like runs_step: its columns, defaults and indexes, without its foreign keys;
    committed (autocommit), as durable as an acknowledged ingest."""
    from django.db import connection

    with connection.cursor() as cursor:
        columns = ", ".join(
            f'"{c.name}"' for c in connection.introspection.get_table_description(cursor, "runs_step") if c.name != "id"
        )
        data = bytearray()
        with cursor.copy(f"COPY (SELECT {columns} FROM runs_step ORDER BY id LIMIT {steps}) TO STDOUT") as copy:  # noqa: S608
            for chunk in copy:
                data += chunk
        cursor.execute(
            "CREATE TABLE bench_copy_step (LIKE runs_step INCLUDING DEFAULTS INCLUDING IDENTITY INCLUDING INDEXES)"
        )
    rows = data.count(b"\n")
    started = time.perf_counter()
    with connection.cursor() as cursor:
        with cursor.copy(f"COPY bench_copy_step ({columns}) FROM STDIN") as copy:
            view = memoryview(data)
            for offset in range(0, len(view), 1 << 20):
                copy.write(view[offset : offset + (1 << 20)])
    return rows, time.perf_counter() - started


def stage_breakdown(project, data_dir: str) -> dict[str, tuple[float, float]]:
    """CPU seconds (this process, PostgreSQL) of each stage of PROFILED_REQUESTS requests
    like the clients', under new trace ids: decode, map, write (as the receiver does)."""
    from django.db import connection

    from agentops.heap import settle_heap
    from agentops.scoping import organization_scope
    from runs.api.otlp import store
    from runs.otlp import decode, map_traces

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend = __import__("psutil").Process(cursor.fetchone()[0])
    rng = random.Random(7)
    first = 10**9
    bodies = [build_request(i, first + i * TRACES_PER_REQUEST, rng) for i in range(PROFILED_REQUESTS + 1)]
    stages = {"decode": [0.0, 0.0], "map": [0.0, 0.0], "write": [0.0, 0.0]}

    def mark():
        return time.process_time(), cpu_seconds([backend])

    for index, body in enumerate(bodies):
        t0 = mark()
        request = decode.decode_traces(body, decode.PROTOBUF)
        t1 = mark()
        batch = map_traces(request)
        t2 = mark()
        with organization_scope(project.organization):
            store(project, batch)
        t3 = mark()
        if index == 0:
            settle_heap()  # as a web process is (agentops/asgi.py)
            continue  # warm-up: statements prepared, caches filled
        for name, (before, after) in (("decode", (t0, t1)), ("map", (t1, t2)), ("write", (t2, t3))):
            stages[name][0] += after[0] - before[0]
            stages[name][1] += after[1] - before[1]
    return {name: (python, postgres) for name, (python, postgres) in stages.items()}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=8192, help="traces in all (8 spans each)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=None, help="web processes (default: as serve, one per core)")
    args = parser.parse_args()
    with private_platform(ALLOWED_HOSTS="127.0.0.1,localhost", API_RATE_LIMIT_PER_KEY="1000000/min") as env:
        import psutil
        import requests
        from django.core.management import call_command
        from django.db import connections

        from agentops.management.commands.serve import available_cores, web_command, web_environment
        from agentops.models import Project
        from agentops.scoping import dangerously_unscoped

        data_dir = env["DATA_DIR"]
        call_command("create_organization", "bench", "--owner", "bench@example.com", stdout=StringIO())
        call_command("create_project", "bench/agent", stdout=StringIO())
        out = StringIO()
        call_command("create_api_key", "bench/agent", "--scopes", "ingest,read", stdout=out)
        key = out.getvalue().strip().splitlines()[-1]
        workers = args.workers or available_cores()
        port = free_port()
        connections.close_all()  # nothing shared with the client processes forked below
        log = open(Path(data_dir) / "web.log", "wb")  # noqa: SIM115 - closed with the server
        server = subprocess.Popen(
            web_command(sys.executable, "127.0.0.1", str(port), workers),
            cwd=ROOT,
            env={**env, **web_environment(workers)},
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        try:
            base = f"http://127.0.0.1:{port}"
            for _ in range(600):
                try:
                    if requests.get(f"{base}/healthz", timeout=5).status_code == 200:
                        break
                except (requests.ConnectionError, requests.Timeout):
                    time.sleep(0.1)
            per_client = args.traces // args.clients // TRACES_PER_REQUEST * TRACES_PER_REQUEST
            ready, results, go = multiprocessing.Queue(), multiprocessing.Queue(), multiprocessing.Event()
            clients = [
                multiprocessing.Process(
                    target=client,
                    args=(f"{base}/api/v1/otlp/v1/traces", key, c * per_client, per_client, ready, go, results),
                )
                for c in range(args.clients)
            ]
            for process in clients:
                process.start()
            for _ in clients:
                ready.get()  # every client has built its requests
            web = psutil.Process(server.pid)
            postgres = postgres_processes(data_dir)
            sampler = RssSampler(web)
            sampler.start()
            web_cpu, pg_cpu = cpu_seconds(tree(web)), cpu_seconds(postgres)
            each_web_cpu = per_process_cpu(web)
            started = time.perf_counter()
            go.set()
            time.sleep(1.0)
            held = connections_per_process(web, port)
            outcomes = [results.get() for _ in clients]
            for process in clients:
                process.join()
            accepted = sum(o[0] for o in outcomes)
            failed = sum(o[1] for o in outcomes)
            client_cpu = sum(o[2] for o in outcomes)
            answered = time.perf_counter() - started
            web_cpu, pg_cpu = cpu_seconds(tree(web)) - web_cpu, cpu_seconds(postgres_processes(data_dir)) - pg_cpu
            each_web_cpu = sorted(
                (seconds - each_web_cpu.get(pid, 0.0) for pid, seconds in per_process_cpu(web).items()), reverse=True
            )
            expected_runs = per_client * args.clients
            headers = {"Authorization": f"Bearer {key}"}
            while True:
                listing = requests.get(
                    f"{base}/api/v1/projects/bench/agent/runs/", headers=headers, params={"page_size": 1}, timeout=30
                ).json()
                export = requests.get(f"{base}/api/v1/projects/bench/agent/runs/export/", headers=headers, timeout=120)
                # The body is read whole by get(); split at once (iter_lines() walks it in 512-byte pieces).
                readable = sum(1 for line in export.content.splitlines() if line)
                if readable >= expected_runs and listing["results"]:
                    break
                time.sleep(0.2)
            readable_wall = time.perf_counter() - started
            sampler.running = False
            sampler.join()
        finally:
            server.terminate()
            server.wait(timeout=60)
            log.close()
            errors = [line for line in (Path(data_dir) / "web.log").read_text().splitlines() if "ERROR" in line]
            if errors:
                print("the web server logged errors:", *errors[:20], sep="\n")

        with dangerously_unscoped("benchmark"):
            project = Project.objects.select_related("organization").get(organization__slug="bench", slug="agent")
        stages = stage_breakdown(project, data_dir)
        rows, copy_seconds = copy_limit(accepted)

    spans = accepted + failed
    rate = accepted / readable_wall
    copy_rate = rows / copy_seconds
    profiled = PROFILED_REQUESTS * TRACES_PER_REQUEST * SPANS_PER_TRACE
    print(
        f"clients: {args.clients}, web processes: {workers} ({available_cores()} cores), traces: {expected_runs:,} "
        f"({spans:,} spans, {TRACES_PER_REQUEST * SPANS_PER_TRACE} spans per request)"
    )
    print(f"accepted: {accepted:,} spans, failed: {failed:,}; answered in {answered:.2f} s")
    print(
        f"accepted and readable through the API: {readable_wall:.2f} s = {rate:,.0f} spans/s "
        f"(the read-back of every run: {readable_wall - answered:.2f} s)"
    )
    print(
        f"COPY limit, same run: {rows:,} step rows in {copy_seconds:.2f} s = {copy_rate:,.0f} rows/s; "
        f"ingestion is {rate / copy_rate:.0%} of it"
    )
    verdict = "under" if sampler.peak < RSS_LIMIT_MB * 2**20 else "OVER"
    print(
        f"web RSS peak: {sampler.peak / 2**20:.0f} MB per process ({verdict} {RSS_LIMIT_MB} MB), "
        f"{sampler.peak_total / 2**20:.0f} MB for all {workers + (workers > 1)} web processes"
    )
    print(
        "each web process over the HTTP run: "
        + ", ".join(f"{seconds:.1f} s" for seconds in each_web_cpu)
        + f" of CPU in {answered:.1f} s; client connections held 1 s in: {', '.join(map(str, held)) or 'none seen'}"
    )
    per_span = 1e6 / accepted
    cores = available_cores()
    print(
        f"CPU per span over the HTTP run: web {web_cpu * per_span:.0f} us, PostgreSQL {pg_cpu * per_span:.0f} us, "
        f"clients {client_cpu * per_span:.0f} us (wall {readable_wall * per_span:.0f} us x {cores} cores "
        f"= {readable_wall * cores * per_span:.0f} us of CPU available)"
    )
    used = (web_cpu + pg_cpu + client_cpu) * per_span
    print(
        f"CPU-bound capacity of this machine: {cores} cores / {used:.0f} us of CPU per span = "
        f"{cores * 1e6 / used:,.0f} spans/s (what the wall clock shows when nothing else runs)"
    )
    print(f"where the web's CPU goes, per span ({PROFILED_REQUESTS} requests re-sent in-process):")
    for name, (python, postgres) in stages.items():
        print(f"  {name:<7} Python {python / profiled * 1e6:6.1f} us   PostgreSQL {postgres / profiled * 1e6:6.1f} us")
    rest = web_cpu * per_span - sum(python for python, _ in stages.values()) / profiled * 1e6
    print(f"  HTTP, authentication and the rest (the web's CPU minus the stages' Python): {rest:.1f} us")


if __name__ == "__main__":
    main()
