"""A local HTTP server that speaks the Hugging Face Jobs API the way ``huggingface_hub``
calls it, for the real client to talk to in tests.

Endpoints (read from huggingface_hub's ``hf_api.py``):
- ``GET  /api/whoami-v2``                         who the token belongs to
- ``POST /api/jobs/{namespace}``                  run_job: the job spec in, a JobInfo out
- ``GET  /api/jobs/{namespace}/{id}``             inspect_job (404 for an unknown id)
- ``GET  /api/jobs/{namespace}/{id}/logs``        fetch_job_logs: server-sent events, one
  ``data: {"timestamp", "data"}`` per line, replayed from the first line on every request;
  the stream of a running job stays open (as the Hub's does) for ``hold_open`` seconds
- ``GET  /api/jobs/{namespace}/{id}/metrics``     fetch_job_metrics: ``event: metric`` events
- ``POST /api/jobs/{namespace}/{id}/cancel``      cancel_job (400 once the job has ended:
  an assumption about the Hub, so the backend's idempotent path is exercised)

Every request needs ``Authorization: Bearer <TOKEN>`` (401 otherwise) and is recorded.
States move when a test says so (``set_stage``, ``add_logs``), or along a script given
before the job is created (``script``), one step per inspect.
"""

from __future__ import annotations

import json
import threading
import time
import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

TOKEN = "hf_fake_token_0123456789"
USER = "alice"
TERMINAL = {"COMPLETED", "CANCELED", "ERROR", "DELETED"}


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%f")[:-3] + "Z"


@dataclass
class FakeJob:
    id: str
    namespace: str
    spec: dict
    stage: str = "SCHEDULING"
    message: str | None = None
    created_at: str = field(default_factory=_now)
    started_at: str | None = None
    finished_at: str | None = None
    logs: list[tuple[str, str]] = field(default_factory=list)  # (timestamp, line)
    script: list[tuple[str, str | None]] = field(default_factory=list)
    gpus: dict = field(default_factory=dict)

    def info(self) -> dict:
        return {
            "id": self.id,
            "createdAt": self.created_at,
            "startedAt": self.started_at,
            "finishedAt": self.finished_at,
            "dockerImage": self.spec.get("dockerImage"),
            "spaceId": self.spec.get("spaceId"),
            "command": self.spec.get("command"),
            "arguments": self.spec.get("arguments", []),
            "environment": self.spec.get("environment", {}),
            # The Hub never sends secret values back, only their names.
            "secrets": dict.fromkeys(self.spec.get("secrets") or {}, "***"),
            "flavor": self.spec.get("flavor"),
            "labels": self.spec.get("labels"),
            "status": {"stage": self.stage, "message": self.message},
            "owner": {"id": "5e9ecfc04957053f60648a3e", "name": self.namespace, "type": "user"},
        }


class FakeHfJobs:
    def __init__(self):
        self.url = ""
        self.jobs: dict[str, FakeJob] = {}
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        self.next_script: list[tuple[str, str | None]] = []
        # Seconds a running job's log stream stays open after the lines it has.
        self.hold_open = 0.0
        # Lines a held-open stream sends, ``late_delay`` seconds in: written after the
        # request began, so the client must stop before them.
        self.late_lines: list[str] = []
        self.late_delay = 0.0
        # (status, body) the next run_job gets instead of a job.
        self.fail_next_create: tuple[int, dict] | None = None
        self.stopped = threading.Event()

    # What tests call.

    def script(self, *stages: str | tuple[str, str | None]) -> None:
        """The stages the next job created goes through: it is created in the first, and
        each inspect answers the next one (the last one stays)."""
        self.next_script = [stage if isinstance(stage, tuple) else (stage, None) for stage in stages]

    def set_stage(self, job_id: str, stage: str, message: str | None = None) -> None:
        with self.lock:
            self._move(self.jobs[job_id], stage, message)

    def add_logs(self, job_id: str, *lines: str) -> None:
        with self.lock:
            self.jobs[job_id].logs.extend((_now(), line) for line in lines)

    def only_job(self) -> FakeJob:
        assert len(self.jobs) == 1, self.jobs
        return next(iter(self.jobs.values()))

    def requests_to(self, method: str, suffix: str = "") -> list[dict]:
        return [r for r in self.requests if r["method"] == method and r["path"].endswith(suffix)]

    # The server's side.

    def _move(self, job: FakeJob, stage: str, message: str | None) -> None:
        job.stage, job.message = stage, message
        if stage == "RUNNING" and job.started_at is None:
            job.started_at = _now()
        if stage in TERMINAL and job.finished_at is None:
            job.finished_at = _now()

    def create(self, namespace: str, spec: dict) -> FakeJob:
        with self.lock:
            job = FakeJob(id=uuid.uuid4().hex[:24], namespace=namespace, spec=spec, script=self.next_script)
            self.next_script = []
            if job.script:
                self._move(job, *job.script[0])
            self.jobs[job.id] = job
            return job

    def inspect(self, job: FakeJob) -> dict:
        with self.lock:
            if job.script:
                self._move(job, *job.script.pop(0))
            return job.info()


@pytest.fixture
def fake_hf_jobs():
    state = FakeHfJobs()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle(self):
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass  # The client closed a kept-alive connection.

        def _record(self, body=None) -> bool:
            parts = urlsplit(self.path)
            state.requests.append(
                {
                    "method": self.command,
                    "path": parts.path,
                    "query": parse_qs(parts.query),
                    "authorization": self.headers.get("Authorization"),
                    "body": body,
                }
            )
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._json(401, {"error": "Invalid credentials in Authorization header"})
                return False
            return True

        def _json(self, status: int, payload) -> None:
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def _job(self, namespace: str, job_id: str) -> FakeJob | None:
            job = state.jobs.get(job_id)
            if job is None or job.namespace != namespace:
                self._json(404, {"error": "Job not found"})
                return None
            return job

        def _events(self, events: list[str], *, hold: float = 0.0, job: FakeJob | None = None, late_delay: float = 0.0):
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Cache-Control", "no-cache")
            self.send_header("Connection", "close")
            self.end_headers()
            self.close_connection = True
            try:
                for event in events:
                    self.wfile.write(event.encode())
                self.wfile.flush()
                deadline = time.monotonic() + hold
                if job is not None and state.late_lines:
                    time.sleep(late_delay)
                    for line in state.late_lines:
                        stamp = _now()
                        with state.lock:
                            job.logs.append((stamp, line))  # The next replay has it.
                        self.wfile.write(f"data: {json.dumps({'timestamp': stamp, 'data': line})}\n\n".encode())
                    state.late_lines = []
                    self.wfile.flush()
                # Silent, like the Hub between its keep-alives (every 30 s).
                while time.monotonic() < deadline and not state.stopped.is_set():
                    time.sleep(0.05)
            except (BrokenPipeError, ConnectionResetError):
                pass  # The client stopped reading.

        def do_GET(self):  # noqa: N802
            if not self._record():
                return
            path = urlsplit(self.path).path.strip("/").split("/")
            if path == ["api", "whoami-v2"]:
                self._json(200, {"type": "user", "id": "5e9ecfc04957053f60648a3e", "name": USER})
                return
            if len(path) < 4 or path[:2] != ["api", "jobs"]:
                self._json(404, {"error": "Not found"})
                return
            job = self._job(path[2], path[3])
            if job is None:
                return
            if len(path) == 4:
                self._json(200, state.inspect(job))
            elif path[4] == "logs":
                with state.lock:
                    lines = [("", "===== Job started at 2025-01-01 00:00:00 =====")] + list(job.logs)
                    running = job.stage not in TERMINAL
                events = [f"data: {json.dumps({'timestamp': ts or _now(), 'data': line})}\n\n" for ts, line in lines]
                self._events(
                    [": keep-alive\n\n", *events],
                    hold=state.hold_open if running else 0.0,
                    job=job if running else None,
                    late_delay=state.late_delay,
                )
            elif path[4] == "metrics":
                if job.stage != "RUNNING":
                    self._json(406, {"error": "Job is not running"})
                    return
                metric = {"cpu_usage_pct": 12, "memory_used_bytes": 1024, "gpus": job.gpus, "replica": "abcde"}
                self._events([f"event: metric\ndata: {json.dumps(metric)}\n\n"])
            else:
                self._json(404, {"error": "Not found"})

        def do_POST(self):  # noqa: N802
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            if not self._record(body):
                return
            path = urlsplit(self.path).path.strip("/").split("/")
            if len(path) == 3 and path[:2] == ["api", "jobs"]:
                if state.fail_next_create:
                    status, payload = state.fail_next_create
                    state.fail_next_create = None
                    self._json(status, payload)
                    return
                if not body or not body.get("dockerImage") and not body.get("spaceId"):
                    self._json(400, {"error": "dockerImage or spaceId is required"})
                    return
                self._json(200, state.create(path[2], body).info())
                return
            if len(path) == 5 and path[:2] == ["api", "jobs"] and path[4] == "cancel":
                job = self._job(path[2], path[3])
                if job is None:
                    return
                with state.lock:
                    if job.stage in TERMINAL:
                        ended = True
                    else:
                        ended = False
                        state._move(job, "CANCELED", None)
                if ended:
                    self._json(400, {"error": "Job is not running"})
                else:
                    self._json(200, {})
                return
            self._json(404, {"error": "Not found"})

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    state.stopped.set()
    server.shutdown()
    server.server_close()
