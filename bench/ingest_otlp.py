"""Benchmark: OTLP ingestion throughput.

Starts the platform's ASGI app under uvicorn (``--workers``, default 2) on a private
embedded PostgreSQL/Redis, then 4 client processes POST realistic agent traces
(8 spans per trace, about 1.5 kB of attributes per span, protobuf, 512 spans per
request as the OpenTelemetry SDK's batch exporter sends by default) to
/api/v1/otlp/v1/traces. Prints the spans per second accepted (200 answers, minus any
rejected in partial_success) and the time until every run is readable through the
REST API (ingestion is synchronous: a 200 means stored, so this is the read-back).

    .venv/bin/python bench/ingest_otlp.py [--traces 10240] [--clients 4] [--workers 2]
"""

from __future__ import annotations

import argparse
import multiprocessing
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time

from _platform import ROOT, production_env, serve_platform

SPANS_PER_TRACE = 8
# 64 traces x 8 spans = 512 spans: the batch size the OpenTelemetry SDK exports by default
# (BatchSpanProcessor max_export_batch_size).
TRACES_PER_REQUEST = 64


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


def client(url: str, key: str, first_trace: int, traces: int, results) -> None:
    import requests
    from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse

    rng = random.Random(first_trace)
    bodies = [build_request(i, first_trace + i * TRACES_PER_REQUEST, rng) for i in range(traces // TRACES_PER_REQUEST)]
    session = requests.Session()
    headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/x-protobuf"}
    accepted = failed = 0
    started = time.perf_counter()
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
    results.put((accepted, failed, time.perf_counter() - started, time.perf_counter()))


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=10240, help="traces in all (8 spans each)")
    parser.add_argument("--clients", type=int, default=4)
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="agentops-bench-")
    env = production_env(data_dir, ALLOWED_HOSTS="127.0.0.1,localhost", API_RATE_LIMIT_PER_KEY="1000000/min")
    python = sys.executable
    holder = None
    server = None
    try:
        # One process holds the embedded servers for the whole run (see agentops/embedded.py).
        holder = subprocess.Popen(
            [
                python,
                "-c",
                "import os, time, django; os.environ.setdefault('DJANGO_SETTINGS_MODULE', "
                "'agentops.settings'); django.setup(); print('up', flush=True); time.sleep(10**6)",
            ],
            cwd=ROOT,
            env=env,
            stdout=subprocess.PIPE,
            text=True,
        )
        holder.stdout.readline()

        def manage(*arguments: str) -> str:
            done = subprocess.run(
                [python, "manage.py", *arguments], cwd=ROOT, env=env, check=True, capture_output=True, text=True
            )
            return done.stdout

        manage("migrate", "-v", "0")
        manage("create_organization", "bench", "--owner", "bench@example.com")
        manage("create_project", "bench/agent")
        key = manage("create_api_key", "bench/agent", "--scopes", "ingest,read").strip().splitlines()[-1]
        server, port = serve_platform(env, workers=args.workers)
        base = f"http://127.0.0.1:{port}"
        import requests

        for _ in range(200):
            try:
                if requests.get(f"{base}/healthz", timeout=1).status_code == 200:
                    break
            except requests.ConnectionError:
                time.sleep(0.1)
        per_client = args.traces // args.clients // TRACES_PER_REQUEST * TRACES_PER_REQUEST
        results = multiprocessing.Queue()
        workers = [
            multiprocessing.Process(
                target=client, args=(f"{base}/api/v1/otlp/v1/traces", key, c * per_client, per_client, results)
            )
            for c in range(args.clients)
        ]
        for worker in workers:
            worker.start()
        outcomes = [results.get() for _ in workers]
        for worker in workers:
            worker.join()
        accepted = sum(o[0] for o in outcomes)
        failed = sum(o[1] for o in outcomes)
        wall = max(o[2] for o in outcomes)
        done_at = max(o[3] for o in outcomes)
        expected_runs = per_client * args.clients
        headers = {"Authorization": f"Bearer {key}"}
        while True:
            listing = requests.get(
                f"{base}/api/v1/projects/bench/agent/runs/", headers=headers, params={"page_size": 1}, timeout=30
            ).json()
            count_response = requests.get(
                f"{base}/api/v1/projects/bench/agent/runs/export/", headers=headers, timeout=120
            )
            readable = sum(1 for line in count_response.iter_lines() if line)
            if readable >= expected_runs and listing["results"]:
                break
            time.sleep(0.2)
        readable_after = time.perf_counter() - done_at
        print(
            f"clients: {args.clients}, web workers: {args.workers}, traces: {expected_runs:,} "
            f"({accepted + failed:,} spans, {TRACES_PER_REQUEST * SPANS_PER_TRACE} spans per request)"
        )
        print(f"accepted: {accepted:,} spans in {wall:.2f} s = {accepted / wall:,.0f} spans/s; failed: {failed:,}")
        print(f"all {expected_runs:,} runs readable through the API {readable_after:.2f} s after the last response")
    finally:
        for process in (server, holder):
            if process is not None:
                # SIGINT, not SIGTERM: Python then runs its exit hooks, and the last
                # process using the embedded servers stops them.
                process.send_signal(signal.SIGINT)
                process.wait(timeout=60)
        shutil.rmtree(data_dir, ignore_errors=True)


if __name__ == "__main__":
    main()
