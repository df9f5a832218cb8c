"""Benchmark: read paths of the trace store at volume.

Loads 1,000,000 steps in 125,000 runs (8 steps each, plus one 500-step run) into a
private embedded PostgreSQL with COPY, then times through the REST API (in-process,
real PostgreSQL; each request goes through Django's WSGI handler with the middleware
and views a served process runs, not through the test client, whose bookkeeping keeps
every response in a reference cycle that a served one is not in):
  - the runs list, first page, filtered by status and a time range,
  - a 500-step run's detail and its steps,
  - the dashboard aggregates (selectors.dashboard) over 7 days.
Prints p50/p95 of each against the goals of issue 19 (list p95 < 15 ms, detail p95
< 60 ms, dashboard p95 < 100 ms).

With ``--data-dir DIR`` the embedded servers live in DIR and it is kept: the first run
loads the data there, later runs reuse it (applying any new migrations first), so a
change can be measured again in seconds rather than minutes.

    .venv/bin/python bench/runs_queries.py [--runs 125000] [--repeat 30] [--data-dir DIR]
        [--api-key] [--profile DIR]

``--api-key`` sends the API reads with a project API key (``Authorization: Bearer``, as
CI and agents do) instead of a signed-in session. ``--profile DIR`` also writes a
cProfile of each read's requests (``DIR/list.prof``, ``DIR/detail.prof``) for pstats.
"""

from __future__ import annotations

import argparse
import cProfile
import io
import json
import os
import random
import statistics
import sys
import time
from datetime import UTC, datetime, timedelta
from urllib.parse import urlencode

from _platform import percentile, private_platform

STATUSES = ["succeeded"] * 8 + ["failed", "running"]
MODELS = ["mistral-large-2512", "mistral-small-2603", "codestral-2508"]
KINDS = ["agent", "llm", "tool", "llm", "retrieval", "llm", "tool", "llm"]
# Columns with no database default the rows leave at their model default.
RUN_ZEROS = ["0", "0"]  # cache_write_input_tokens, reasoning_output_tokens
STEP_DEFAULTS = ["0", "0", "{}", "", ""]  # ... modality_tokens, reported_cost_currency, reported_cost_source


def load(project, runs: int, now: datetime) -> int:
    """COPY ``runs`` runs of 8 steps and one 500-step run; return the big run's id."""
    from django.db import connection

    rng = random.Random(7)
    org_id, project_id = project.organization_id, project.pk
    run_buffer, step_buffer = io.StringIO(), io.StringIO()
    started = now - timedelta(days=30)
    span = 30 * 86400
    payload = json.dumps({"messages": [{"role": "user", "content": "How do I reset my password? " * 4}]})
    for n in range(runs):
        t0 = started + timedelta(seconds=span * n / runs)
        status = rng.choice(STATUSES)
        latency = rng.randint(500, 20000)
        cost = f"{rng.random() / 100:.9f}"
        run_buffer.write(
            "\t".join(
                [
                    str(n + 1),
                    str(org_id),
                    str(project_id),
                    f"{n:032x}",
                    f"agent run {n}",
                    "support-agent",
                    "1",
                    status,
                    "f",
                    "{}",
                    "",
                    payload,
                    "\\N",
                    t0.isoformat(),
                    (t0 + timedelta(milliseconds=latency)).isoformat(),
                    f"session-{n // 4}",
                    "\\N",
                    "",
                    f"user-{n % 1000}",
                    "production",
                    "v1",
                    "{prod}",
                    "{}",
                    "8",
                    "1" if status == "failed" else "0",
                    "4",
                    "4000",
                    "0",
                    "400",
                    cost,
                    "0",
                    "{" + rng.choice(MODELS) + "}",
                    str(latency),
                    t0.isoformat(),
                    t0.isoformat(),
                    "f",
                    "",
                    "{}",
                    *RUN_ZEROS,
                ]
            )
            + "\n"
        )
        for i, kind in enumerate(KINDS):
            s0 = t0 + timedelta(milliseconds=i * latency / 8)
            model = rng.choice(MODELS) if kind == "llm" else ""
            step_buffer.write(
                "\t".join(
                    [
                        str(org_id),
                        str(project_id),
                        str(n + 1),
                        f"{i:016x}",
                        "" if i == 0 else f"{0:016x}",
                        kind,
                        f"{kind} {i}",
                        s0.isoformat(),
                        (s0 + timedelta(milliseconds=latency / 8)).isoformat(),
                        str(latency / 8),
                        "ok",
                        "",
                        model,
                        "mistral_ai" if model else "",
                        "1000" if model else "0",
                        "0",
                        "100" if model else "0",
                        "0.000500000" if model else "\\N",
                        "f",
                        "\\N",
                        payload if i < 2 else "\\N",
                        "\\N",
                        '{"attr": "' + "x" * 200 + '"}',
                        "[]",
                        s0.isoformat(),
                        *STEP_DEFAULTS,
                    ]
                )
                + "\n"
            )
    big_id = runs + 1
    t0 = now - timedelta(hours=1)
    run_buffer.write(
        "\t".join(
            [
                str(big_id),
                str(org_id),
                str(project_id),
                "f" * 32,
                "big run",
                "support-agent",
                "1",
                "succeeded",
                "f",
                "{}",
                "",
                payload,
                "\\N",
                t0.isoformat(),
                (t0 + timedelta(seconds=500)).isoformat(),
                "big-session",
                "\\N",
                "",
                "",
                "production",
                "v1",
                "{prod}",
                "{}",
                "500",
                "0",
                "250",
                "250000",
                "0",
                "25000",
                "0.125000000",
                "0",
                "{mistral-large-2512}",
                "500000",
                t0.isoformat(),
                t0.isoformat(),
                "f",
                "",
                "{}",
                *RUN_ZEROS,
            ]
        )
        + "\n"
    )
    for i in range(500):
        s0 = t0 + timedelta(seconds=i)
        step_buffer.write(
            "\t".join(
                [
                    str(org_id),
                    str(project_id),
                    str(big_id),
                    f"{i:016x}",
                    "" if i == 0 else f"{(i - 1) // 10:016x}",
                    "llm" if i % 2 else "tool",
                    f"step {i}",
                    s0.isoformat(),
                    (s0 + timedelta(seconds=1)).isoformat(),
                    "1000",
                    "ok",
                    "",
                    "mistral-large-2512" if i % 2 else "",
                    "",
                    "1000" if i % 2 else "0",
                    "0",
                    "100" if i % 2 else "0",
                    "0.000650000" if i % 2 else "\\N",
                    "f",
                    "\\N",
                    payload,
                    payload,
                    '{"attr": "' + "x" * 1500 + '"}',
                    "[]",
                    s0.isoformat(),
                    *STEP_DEFAULTS,
                ]
            )
            + "\n"
        )
    run_columns = (
        "id, organization_id, project_id, trace_id, name, agent_name, agent_version, status, status_explicit, "
        "explicit_fields, error, "
        "input, output, started_at, ended_at, session_id, parent_run_id, parent_trace_id, end_user_id, environment, "
        "release, tags, metadata, step_count, error_count, llm_call_count, input_tokens, cached_input_tokens, "
        "output_tokens, total_cost, unpriced_step_count, models_used, latency_ms, created_at, updated_at, "
        "cancel_requested, worker, execution, cache_write_input_tokens, reasoning_output_tokens"
    )
    step_columns = (
        "organization_id, project_id, run_id, span_id, parent_span_id, kind, name, started_at, ended_at, duration_ms, "
        "status, error, model, provider, input_tokens, cached_input_tokens, output_tokens, cost, unpriced, price_id, "
        "input, output, attributes, events, created_at, cache_write_input_tokens, reasoning_output_tokens, "
        "modality_tokens, reported_cost_currency, reported_cost_source"
    )
    raw = connection.connection if connection.connection else None
    if raw is None:
        connection.ensure_connection()
        raw = connection.connection
    with raw.cursor() as cursor:
        with cursor.copy(f"COPY runs_run ({run_columns}) FROM STDIN") as copy:
            copy.write(run_buffer.getvalue())
        with cursor.copy(f"COPY runs_step ({step_columns}) FROM STDIN") as copy:
            copy.write(step_buffer.getvalue())
        cursor.execute("SELECT setval('runs_run_id_seq', (SELECT max(id) FROM runs_run))")
        cursor.execute("UPDATE runs_run SET search = to_tsvector('simple', name || ' ' || coalesce(input::text, ''))")
        # As autovacuum leaves a table that stopped changing: statistics and the
        # visibility map (which index-only scans need) up to date.
        cursor.execute("VACUUM ANALYZE runs_run")
        cursor.execute("VACUUM ANALYZE runs_step")
    raw.commit()
    return big_id


class ServedClient:
    """GET requests answered by Django's WSGI handler in this process, as a WSGI server
    would have them answered: the response's iterable is read and closed, and nothing
    else holds it afterwards."""

    def __init__(self, headers: dict[str, str]):
        from django.core.handlers.wsgi import WSGIHandler

        self.handler = WSGIHandler()
        self.headers = {"HTTP_" + name.upper().replace("-", "_"): value for name, value in headers.items()}

    def get(self, path: str, params: dict | None = None) -> tuple[str, bytes]:
        environ = {
            "REQUEST_METHOD": "GET",
            "PATH_INFO": path,
            "QUERY_STRING": urlencode(params or {}),
            "SERVER_NAME": "testserver",
            "SERVER_PORT": "80",
            "SERVER_PROTOCOL": "HTTP/1.1",
            "HTTP_HOST": "testserver",
            "wsgi.url_scheme": "http",
            "wsgi.input": io.BytesIO(b""),
            "wsgi.errors": sys.stderr,
            **self.headers,
        }
        started: list[str] = []
        result = self.handler(environ, lambda status, headers: started.append(status))
        try:
            body = b"".join(result)
        finally:
            result.close()
        return started[0], body


def timed(fn, repeat: int) -> tuple[list[float], list[float]]:
    """Wall-clock and this process's CPU milliseconds of each call (the CPU is the
    platform's Python work, the part another engineer's load on the machine inflates
    least; PostgreSQL's work is in its own processes)."""
    fn()  # warm up
    samples, cpu = [], []
    for _ in range(repeat):
        start, start_cpu = time.perf_counter(), time.process_time()
        fn()
        samples.append((time.perf_counter() - start) * 1000)
        cpu.append((time.process_time() - start_cpu) * 1000)
    return samples, cpu


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=125_000)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--data-dir", help="keep the data here and reuse it on the next run")
    parser.add_argument("--api-key", action="store_true", help="read with a project API key, not a session")
    parser.add_argument("--profile", metavar="DIR", help="write a cProfile of each read's requests here")
    args = parser.parse_args()
    extra = {"API_RATE_LIMIT_PER_USER": "1000000/min", "ALLOWED_HOSTS": "testserver,localhost,127.0.0.1"}
    with private_platform(args.data_dir, **extra):
        run(args)


def run(args) -> None:
    from django.conf import settings
    from django.test import Client

    # The garbage collector tuned as in a served web process (agentops.asgi freezes what
    # start-up loaded and collects the young generation less often).
    import agentops.asgi  # noqa: F401
    from agentops.models import Organization, Project
    from agentops.scoping import organization_scope
    from agentops.services.organizations import organization_create, project_create
    from agentops.services.users import user_get_or_create_verified
    from runs import selectors
    from runs.models import Run

    user, _ = user_get_or_create_verified(email="bench@example.com", password="bench-password")
    organization = Organization.objects.filter(slug="bench").first()
    if organization is None:
        organization = organization_create(name="Bench", slug="bench", owner=user)
        with organization_scope(organization):
            project = project_create(organization=organization, actor=user, name="Bench", slug="bench")
        now = datetime.now(UTC)
        started = time.perf_counter()
        big_id = load(project, args.runs, now)
        print(
            f"loaded {args.runs + 1:,} runs and {args.runs * 8 + 500:,} steps in {time.perf_counter() - started:.1f} s"
        )
    else:
        with organization_scope(organization):
            project = Project.objects.get(slug="bench")
            big = Run.objects.get(project=project, trace_id="f" * 32)
        # The data was loaded relative to its "now": the big run started an hour before it.
        big_id, now = big.pk, big.started_at + timedelta(hours=1)
        print(f"reusing the data in {args.data_dir} (loaded at {now:%Y-%m-%d %H:%M} UTC)")

    if args.api_key:
        from agentops.services.api_keys import api_key_create

        with organization_scope(organization):
            _, raw_key = api_key_create(project=project, actor=user, name="bench reads", scopes=["read"])
        client = ServedClient({"Authorization": f"Bearer {raw_key}"})
    else:
        signed_in = Client()
        signed_in.force_login(user)
        cookie = settings.SESSION_COOKIE_NAME
        client = ServedClient({"Cookie": f"{cookie}={signed_in.cookies[cookie].value}"})
    base = "/api/v1/projects/bench/bench"
    week_ago = (now - timedelta(days=7)).isoformat().replace("+00:00", "Z")

    def list_page():
        status, body = client.get(f"{base}/runs/", {"status": "succeeded", "started_after": week_ago})
        assert status.startswith("200"), body[:300]
        assert len(json.loads(body)["results"]) == 50

    def detail():
        status, body = client.get(f"{base}/runs/{big_id}/")
        assert status.startswith("200"), body[:300]
        status, body = client.get(f"{base}/runs/{big_id}/steps/", {"page_size": 500})
        assert status.startswith("200"), body[:300]

    def dashboard():
        with organization_scope(organization):
            board = selectors.dashboard(project=project, start=now - timedelta(days=7), end=now)
        assert board["totals"]["runs"] > 0

    if args.profile:
        os.makedirs(args.profile, exist_ok=True)
        for name, fn in [("list", list_page), ("detail", detail)]:
            fn()
            profiler = cProfile.Profile(time.process_time)  # CPU, not waits on PostgreSQL
            profiler.enable()
            for _ in range(args.repeat):
                fn()
            profiler.disable()
            profiler.dump_stats(os.path.join(args.profile, f"{name}.prof"))
        print(f"profiles of {args.repeat} calls each written to {args.profile}")

    results = [
        ("runs list (status + time range, first page)", *timed(list_page, args.repeat), 15),
        ("500-step run detail + steps", *timed(detail, args.repeat), 60),
        ("dashboard aggregates (7 days)", *timed(dashboard, max(5, args.repeat // 3)), 100),
    ]
    averages = ", ".join(f"{value:.1f}" for value in os.getloadavg())
    print(f"load average {averages} on {os.cpu_count()} cores (wall times grow with it)")
    print(f"API reads signed in with {'a project API key (Bearer)' if args.api_key else 'a session'}")
    print(f"{'query':48} {'p50 ms':>8} {'p95 ms':>8} {'goal ms':>8}  {'cpu p50':>8} {'cpu best':>8}")
    for name, samples, cpu, goal in results:
        p95 = percentile(samples, 0.95)
        verdict = "ok  " if p95 < goal else "OVER"
        print(
            f"{name:48} {statistics.median(samples):8.1f} {p95:8.1f} {goal:8d}  {verdict} "
            f"{statistics.median(cpu):5.1f} {min(cpu):8.1f}"
        )


if __name__ == "__main__":
    main()
