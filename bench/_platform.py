"""What the benchmarks share: a private platform (embedded PostgreSQL and Redis in a
temporary folder, production settings), its bench user and project, a local
Mistral-speaking server, a uvicorn server of the platform, timings and percentiles."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def production_env(data_dir: str, **extra: str) -> dict[str, str]:
    """The environment of a benchmark: production settings (DEBUG off, so no per-query
    debug logging), plain HTTP on loopback, embedded servers under ``data_dir``."""
    env = {
        **os.environ,
        "DATA_DIR": data_dir,
        "DEBUG": "false",
        "SECRET_KEY": "bench-" + "x" * 60,
        "ENCRYPTION_KEYS": "Y29sbGVjdHN0YXRpYy1vbmx5LW5vdC1zZWNyZXQhISE=",
        "SECURE_SSL_REDIRECT": "false",
        "ALLOW_PRIVATE_PROVIDER_URLS": "true",
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "LOG_LEVEL": "WARNING",
        **extra,
    }
    env.pop("DATABASE_URL", None)
    env.pop("REDIS_URL", None)
    return env


@contextmanager
def private_platform(data_dir: str | None = None, **extra_env: str) -> Iterator[dict[str, str]]:
    """Set up Django in this process on private embedded servers, migrated; yield the
    environment (for subprocesses); stop the servers and delete their folder afterwards.
    With ``data_dir`` the servers live in that folder and it is kept, so a benchmark
    can reuse the data it built (migrations new since then are applied to it)."""
    keep = data_dir is not None
    if keep:
        data_dir = str(Path(data_dir).resolve())
        Path(data_dir).mkdir(parents=True, exist_ok=True)
    else:
        data_dir = tempfile.mkdtemp(prefix="agentops-bench-")
    env = production_env(data_dir, **extra_env)
    os.environ.clear()
    os.environ.update(env)
    try:
        import django

        django.setup()
        from django.core.management import call_command

        call_command("migrate", verbosity=0)
        yield env
    finally:
        if "django" in sys.modules:
            from django.db import connections

            from agentops.embedded import release_all

            connections.close_all()
            release_all()  # stop the private servers before their folder goes
        if not keep:
            shutil.rmtree(data_dir, ignore_errors=True)


def bench_project():
    """The bench user (bench@example.com) and the project bench/bench it owns, on the
    private platform: returns ``(user, project)``."""
    from agentops.scoping import organization_scope
    from agentops.services.organizations import organization_create, project_create
    from agentops.services.users import user_get_or_create_verified

    user, _ = user_get_or_create_verified(email="bench@example.com", password="bench-password")
    organization = organization_create(name="Bench", slug="bench", owner=user)
    with organization_scope(organization):
        project = project_create(organization=organization, actor=user, name="Bench", slug="bench")
    return user, project


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def serve_platform(env: dict[str, str], workers: int = 1) -> tuple[subprocess.Popen, int]:
    """The platform's ASGI app under uvicorn on a free loopback port, with ``env`` (see
    private_platform); returns the process (the caller stops it) and the port. The
    caller waits for it to answer in the way it measures."""
    port = free_port()
    server = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "uvicorn",
            "agentops.asgi:application",
            "--host",
            "127.0.0.1",
            "--port",
            str(port),
            "--workers",
            str(workers),
            "--lifespan",
            "off",
            "--no-access-log",
            "--log-level",
            "warning",
        ],
        cwd=ROOT,
        env=env,
    )
    return server, port


def serve_tool_calling_mistral(steps: int, latency: float = 0.0) -> str:
    """A local server speaking Mistral's chat-completions API: after ``latency`` seconds
    it asks for the calculator until a run has made ``steps`` tool calls, then answers."""

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802 - http.server's name
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            time.sleep(latency)
            done = sum(1 for m in body["messages"] if m.get("role") == "tool")
            if done < steps:
                call = {"name": "calculator", "arguments": json.dumps({"expression": f"{done} * 3"})}
                message = {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [{"id": f"c{done}", "type": "function", "index": 0, "function": call}],
                }
                finish = "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": "done"}, "stop"
            answer = {
                "id": "bench",
                "object": "chat.completion",
                "created": 0,
                "model": "mistral-small-latest",
                "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                "usage": {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520},
            }
            if body.get("stream"):
                # Streamed as the executor asks: the message in one chunk, then the finish.
                delta = {key: value for key, value in message.items() if value}
                chunks = [
                    {**answer, "choices": [{"index": 0, "delta": delta, "finish_reason": None}], "usage": None},
                    {**answer, "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": finish}]},
                ]
                data = b"".join(f"data: {json.dumps(chunk)}\n\n".encode() for chunk in chunks) + b"data: [DONE]\n\n"
                content_type = "text/event-stream"
            else:
                data, content_type = json.dumps(answer).encode(), "application/json"
            self.send_response(200)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def timed(fn, repeat: int) -> list[float]:
    """``fn``'s wall time in milliseconds, ``repeat`` times, after one warm-up call."""
    fn()  # warm up
    samples = []
    for _ in range(repeat):
        started = time.perf_counter()
        fn()
        samples.append((time.perf_counter() - started) * 1000)
    return samples


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]
