"""A real Celery worker in its own process, on this test run's database and queue, that
a test can kill with SIGKILL as a crash or an out-of-memory kill would.

The worker runs the production settings (``agentops.settings``), given the test run's
servers through DATABASE_URL and REDIS_URL, so it starts no servers of its own. It
cannot use tests/settings.py: that names the Redis prefix after its own process id,
and the worker must consume this process's queue.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote, urlencode

ROOT = Path(__file__).resolve().parents[1]
READY_TIMEOUT_SECONDS = 30


def database_url() -> str:
    """The URL of the database this test uses (pytest-django's test database)."""
    from django.db import connection

    database = connection.settings_dict
    # A DATABASE_URL such as postgresql://u@/db?host=/socket/dir leaves HOST empty and
    # puts the host in OPTIONS; the libpq options (text, numbers) go back in the query.
    query = {
        key: value
        for key, value in database.get("OPTIONS", {}).items()
        # prepare_threshold is psycopg's, set by the settings themselves, not libpq's.
        if isinstance(value, str | int) and not isinstance(value, bool) and key != "prepare_threshold"
    }
    query.update({key: database[key.upper()] for key in ("host", "port") if database[key.upper()]})
    user = quote(database["USER"] or "", safe="")
    password = f":{quote(database['PASSWORD'], safe='')}" if database.get("PASSWORD") else ""
    return f"postgresql://{user}{password}@/{quote(database['NAME'], safe='')}?{urlencode(query)}"


def worker_environment(**overrides: str) -> dict[str, str]:
    """This process's environment (its SECRET_KEY and ENCRYPTION_KEYS, so the worker
    can read the provider keys the test stored), pointed at the test run's servers."""
    from django.conf import settings

    environment = {
        **os.environ,
        "DJANGO_SETTINGS_MODULE": "agentops.settings",
        "DATABASE_URL": database_url(),
        "REDIS_URL": settings.REDIS_URL,
        "AGENTOPS_REDIS_PREFIX": settings.REDIS_KEY_PREFIX,
        "LOG_LEVEL": "WARNING",
    }
    environment.update(overrides)
    return environment


@contextmanager
def worker_process(log_path: Path, *, name: str = "doomed", **environment: str):
    """Start ``celery worker`` (the prefork pool, as in production) in a new process
    group, wait until it answers a ping, and yield its Popen. The whole group is killed
    on the way out, whatever happened."""
    from agentops.celery import app

    log = log_path.open("wb")
    process = subprocess.Popen(
        [sys.executable, "-m", "celery", "-A", "agentops", "worker", "--pool", "prefork", "--concurrency", "1"]
        + ["--hostname", f"{name}-{os.getpid()}@%h", "--without-mingle", "--without-gossip", "--loglevel", "INFO"],
        cwd=ROOT,
        env=worker_environment(**environment),
        stdout=log,
        stderr=subprocess.STDOUT,
        start_new_session=True,  # its own process group: the pool's children die with it
    )
    try:
        node = f"{name}-{os.getpid()}@"
        deadline = time.monotonic() + READY_TIMEOUT_SECONDS
        while not any(node in next(iter(reply)) for reply in app.control.ping(timeout=0.5)):
            if process.poll() is not None or time.monotonic() > deadline:
                raise AssertionError(
                    f"the worker process did not become ready in {READY_TIMEOUT_SECONDS} s "
                    f"(exit code {process.poll()}):\n{log_path.read_text()[-3000:]}"
                )
        yield process
    finally:
        kill(process)
        log.close()


def kill(process: subprocess.Popen) -> None:
    """SIGKILL the worker and its pool: no shutdown, no acknowledgement, no clean-up."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass  # Already dead.
    process.wait(timeout=10)
