"""`manage.py serve` (what `make run` starts), as a real process on the test run's
PostgreSQL and Redis: a SIGKILLed worker is restarted and the platform stays up;
SIGTERM stops everything."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time

import psutil
import pytest

from agentops.management.commands.serve import available_cores
from tests.worker_process import ROOT, worker_environment

START_TIMEOUT_SECONDS = 120


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def _wait_for(condition, what: str, log_path, timeout: float = START_TIMEOUT_SECONDS):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.2)
    pytest.fail(f"{what} did not happen within {timeout} s; serve wrote:\n{log_path.read_text()[-4000:]}")


def _child(serve: psutil.Process, role: str) -> psutil.Process | None:
    """serve's child running ``role`` (web: uvicorn; worker and beat: celery)."""
    for child in serve.children():
        try:
            argv = child.cmdline()
        except psutil.NoSuchProcess:
            continue
        if (role == "web" and "uvicorn" in argv) or (role in argv and "celery" in argv):
            return child
    return None


def test_serve_restarts_a_killed_worker_and_stops_on_sigterm(db, tmp_path):
    log_path = tmp_path / "serve.log"
    port = _free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port), "--concurrency", "1"],
            cwd=ROOT,
            env=worker_environment(DEBUG="true", LOG_LEVEL="WARNING", DATA_DIR=str(tmp_path)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        serve = psutil.Process(process.pid)
        _wait_for(lambda: b"AgentOps Studio on" in log_path.read_bytes(), "serve starting", log_path)
        children = {
            role: _wait_for(lambda r=role: _child(serve, r), f"{role} starting", log_path)
            for role in ("web", "worker", "beat")
        }

        os.kill(children["worker"].pid, signal.SIGKILL)

        restarted = _wait_for(
            lambda: (worker := _child(serve, "worker")) and worker.pid != children["worker"].pid and worker,
            "the worker restarting",
            log_path,
        )
        output = log_path.read_text()
        assert "worker was killed by SIGKILL" in output and "restarting it in 1 s" in output
        assert f"worker restarted (pid {restarted.pid})" in output
        assert process.poll() is None  # the platform stayed up
        assert children["web"].is_running() and children["beat"].is_running()

        process.send_signal(signal.SIGTERM)
        assert process.wait(timeout=60) == 0
        gone, alive = psutil.wait_procs([children["web"], children["beat"], restarted], timeout=10)
        assert alive == []
    finally:
        try:  # whatever is left of the session, the killed worker's pool included
            os.killpg(process.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        process.wait(timeout=10)


def test_serve_runs_the_web_server_with_the_lifespan_the_mcp_server_needs_in_a_process_per_core(
    transactional_db, tenant, make_api_key, tmp_path
):
    import httpx

    _key, raw = make_api_key(tenant.project, scopes=("read",))
    log_path = tmp_path / "serve.log"
    port = _free_port()
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [sys.executable, "manage.py", "serve", "--port", str(port), "--concurrency", "1"],
            cwd=ROOT,
            env=worker_environment(DEBUG="true", LOG_LEVEL="WARNING", DATA_DIR=str(tmp_path)),
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:

        def tools_listed():
            try:
                response = httpx.post(
                    f"http://127.0.0.1:{port}/mcp",
                    json={
                        "jsonrpc": "2.0",
                        "id": 1,
                        "method": "initialize",
                        "params": {
                            "protocolVersion": "2025-11-25",
                            "capabilities": {},
                            "clientInfo": {"name": "test", "version": "1"},
                        },
                    },
                    headers={"Authorization": f"Bearer {raw}", "Accept": "application/json, text/event-stream"},
                )
            except httpx.TransportError:
                return None  # not listening yet
            return response

        response = _wait_for(tools_listed, "the web server answering", log_path)
        # With --lifespan off the session manager never starts and /mcp answers 503.
        assert response.status_code == 200, response.text
        assert response.json()["result"]["serverInfo"]["name"] == "agentops"
        # One web process per core the machine gives serve (uvicorn's workers, under its
        # supervisor; a single process serves alone): a request's Python holds its process.
        web = _child(psutil.Process(process.pid), "web")
        workers = [child for child in web.children() if "spawn_main" in " ".join(child.cmdline())]
        cores = available_cores()
        assert len(workers) == (cores if cores > 1 else 0)
    finally:
        process.send_signal(signal.SIGTERM)
        try:
            process.wait(timeout=60)
        finally:
            try:
                os.killpg(process.pid, signal.SIGKILL)
            except ProcessLookupError:
                pass
