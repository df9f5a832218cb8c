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


def test_serve_refuses_a_port_another_program_listens_on_with_one_line(db, tmp_path):
    # Without the check uvicorn fails to bind, is restarted every few seconds for ever,
    # and the printed address leads to the other program.
    with socket.socket() as other:
        other.bind(("127.0.0.1", 0))
        other.listen()
        port = other.getsockname()[1]
        result = subprocess.run(
            [sys.executable, "manage.py", "serve", "--port", str(port), "--concurrency", "1"],
            cwd=ROOT,
            env=worker_environment(DEBUG="true", LOG_LEVEL="WARNING", DATA_DIR=str(tmp_path)),
            capture_output=True,
            text=True,
            timeout=60,
        )
    assert result.returncode == 2, result.stdout + result.stderr
    assert result.stderr.strip() == (
        f"agentops: cannot serve on 127.0.0.1:{port}: Address already in use (another `make run`, or another "
        "program?); choose another port with PORT=<port> make run, or manage.py serve --port <port>"
    )
    assert "AgentOps Studio on" not in result.stdout


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


def test_two_installations_on_one_database_run_one_beat_and_workers_that_answer_apart(db, tmp_path):
    """Two `serve` installations (their own DATA_DIR, the same DATABASE_URL/REDIS_URL),
    started at once on one host: the one with --no-beat runs web and worker only, and a
    broadcast ping (what /readyz sends) tells their two workers apart."""
    from agentops.celery import app

    installations = []
    for name, extra in (("a", []), ("b", ["--no-beat"])):
        log_path = tmp_path / f"serve-{name}.log"
        port = _free_port()
        with log_path.open("wb") as log:
            process = subprocess.Popen(
                [sys.executable, "manage.py", "serve", "--port", str(port), "--concurrency", "1", *extra],
                cwd=ROOT,
                env=worker_environment(DEBUG="true", LOG_LEVEL="WARNING", DATA_DIR=str(tmp_path / name)),
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        installations.append((process, port, log_path))
    try:
        for _process, _port, log_path in installations:
            _wait_for(lambda p=log_path: b"AgentOps Studio on" in p.read_bytes(), "serve starting", log_path)
        (serve_a, port_a, log_a), (serve_b, port_b, log_b) = installations
        _wait_for(lambda: _child(psutil.Process(serve_a.pid), "beat"), "beat starting", log_a)
        _wait_for(lambda: _child(psutil.Process(serve_b.pid), "worker"), "worker starting", log_b)

        def both_workers_answer():
            names = {name for reply in app.control.ping(timeout=1.0) or [] for name in reply}
            return {name.partition("@")[0] for name in names} >= {f"worker-{port_a}", f"worker-{port_b}"}

        _wait_for(both_workers_answer, "both workers answering a ping", log_b)
        assert _child(psutil.Process(serve_b.pid), "beat") is None
        assert serve_a.poll() is None and serve_b.poll() is None  # neither failed migrating
    finally:
        for process, _port, _log in installations:
            process.send_signal(signal.SIGTERM)
        for process, _port, _log in installations:
            try:
                process.wait(timeout=60)
            finally:
                try:
                    os.killpg(process.pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass


def _blocked_on(path) -> bool:
    """Whether some process waits for a lock on ``path`` (a ``->`` line of /proc/locks)."""
    inode = os.stat(path).st_ino
    with open("/proc/locks") as locks:
        return any("->" in line and f":{inode} " in line for line in locks)


def test_installations_sharing_a_code_folder_collect_static_files_one_at_a_time(settings, tmp_path):
    """Two `serve` started at once from one checkout share STATIC_ROOT: the second
    collection waits for the first instead of deleting its files half-way."""
    import threading

    from agentops.management.commands.serve import collect_static

    settings.STATIC_ROOT = tmp_path / "staticfiles"
    lock_path = tmp_path / "staticfiles.lock"
    lock_path.touch()
    # The other installation, collecting: it holds the lock.
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, sys, time; lock = open(sys.argv[1], 'a'); fcntl.flock(lock, fcntl.LOCK_EX); "
            "print('held', flush=True); time.sleep(600)",
            str(lock_path),
        ],
        stdout=subprocess.PIPE,
    )
    outcome: list[object] = []

    def collect():
        try:
            collect_static()
            outcome.append("done")
        except Exception as exc:  # reported by the assertion below
            outcome.append(exc)

    thread = threading.Thread(target=collect)
    try:
        assert holder.stdout.readline().strip() == b"held"
        thread.start()
        deadline = time.monotonic() + START_TIMEOUT_SECONDS
        seen_waiting = False
        while time.monotonic() < deadline and thread.is_alive():
            if _blocked_on(lock_path):
                seen_waiting = True
                break
            time.sleep(0.05)
        assert seen_waiting, f"collected while another installation was collecting: {outcome}"
        assert not (tmp_path / "staticfiles").exists()  # nothing written while it waited
    finally:
        holder.kill()  # the other installation is done
        holder.wait()
        thread.join(START_TIMEOUT_SECONDS)
    assert outcome == ["done"]
    assert any((tmp_path / "staticfiles").rglob("*.js"))  # then it collected
