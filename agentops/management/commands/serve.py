"""Run the whole platform in the foreground: the web server (HTTP and WebSocket),
a Celery worker and Celery beat, each restarted if it exits (agentops/supervisor.py).
Ctrl-C or SIGTERM stops them all, and with them the embedded PostgreSQL and Redis when
nothing else uses them."""

import fcntl
import os
import signal
import socket
import sys
from pathlib import Path

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from agentops.embedded import fail
from agentops.management.commands.seed_demo import format_credentials
from agentops.services.demo import demo_seed
from agentops.supervisor import Supervisor


def available_cores() -> int:
    """The cores this process may run on (a container's or a taskset's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


def web_environment(workers: int) -> dict[str, str]:
    """What the web processes read about their number: above 1, a busy one moves
    keep-alive connections to the others (agentops.rebalance)."""
    return {"WEB_PROCESSES": str(workers)}


def web_command(python: str, host: str, port: str, workers: int) -> list[str]:
    """The web server as ``serve`` starts it (bench/ingest_otlp.py starts the same): uvicorn
    with one process per core by default, since a request's Python work holds its process
    and a single process would leave the other cores to PostgreSQL alone."""
    return [
        python,
        "-m",
        "uvicorn",
        "agentops.asgi:application",
        "--host",
        host,
        "--port",
        str(port),
        "--workers",
        str(workers),
        # The MCP server's session manager starts in the ASGI lifespan (agentops/asgi.py).
        "--lifespan",
        "on",
        "--no-access-log",
    ]


def port_problem(host: str, port: int | str) -> str | None:
    """Why the web server could not listen on ``host``:``port``, or None when it can.
    Bound the way uvicorn binds (SO_REUSEADDR, so a port that only has connections
    closing is free), and released at once."""
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    with socket.socket(family, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, int(port)))
        except OSError as exc:
            return exc.strerror or str(exc)
    return None


def collect_static() -> None:
    """``collectstatic``, one installation at a time per ``STATIC_ROOT``: installations
    started together from one code folder share it (it is not under ``DATA_DIR``), and
    two collections at once delete each other's hashed files half-way (FileNotFoundError).
    The lock (flock, released when the process ends however it ends) is a file beside
    ``STATIC_ROOT``, where collectstatic writes anyway."""
    static_root = Path(settings.STATIC_ROOT)
    static_root.parent.mkdir(parents=True, exist_ok=True)
    with open(static_root.with_name(static_root.name + ".lock"), "a") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # waits for another installation's collection
        call_command("collectstatic", interactive=False, verbosity=0)


class Command(BaseCommand):
    help = "Migrate, optionally seed demo data, then keep web server, worker and beat running until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--demo", action="store_true", help="Create the demo data and print its credentials")
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", default=os.environ.get("PORT", "8000"))
        parser.add_argument("--concurrency", default=os.environ.get("CELERY_CONCURRENCY", "2"))
        parser.add_argument(
            "--web-workers",
            type=int,
            default=int(os.environ.get("WEB_CONCURRENCY") or available_cores()),
            help="Web server processes (default: WEB_CONCURRENCY, else one per available core)",
        )
        parser.add_argument(
            "--no-beat",
            action="store_true",
            help="Run no Celery beat: for every installation but one that share a database and Redis",
        )

    def handle(self, *args, demo, host, port, concurrency, web_workers, no_beat, **options):
        # Checked first: uvicorn would fail to bind, be restarted with backoff forever, and
        # the address printed below would lead to whatever program holds the port.
        problem = port_problem(host, port)
        if problem:
            fail(
                f"cannot serve on {host}:{port}: {problem} (another `make run`, or another program?); "
                "choose another port with PORT=<port> make run, or manage.py serve --port <port>"
            )
        call_command("migrate", interactive=False, verbosity=0)
        if not settings.DEBUG:
            collect_static()
        if demo:
            credentials = demo_seed()
            # The apps add their samples through their own commands (the core imports no app).
            call_command("seed_demo_runs", f"{credentials.organization}/{credentials.project}", verbosity=0)
            call_command("seed_demo_evals", f"{credentials.organization}/{credentials.project}", verbosity=0)
            call_command("seed_demo_jobs", f"{credentials.organization}/{credentials.project}", verbosity=0)
            call_command("seed_demo_analyst", f"{credentials.organization}/{credentials.project}", verbosity=0)
            self.stdout.write(format_credentials(credentials))
        # The children's settings read where the platform is served (JOBS_CALLBACK_URL's default).
        os.environ["HOST"], os.environ["PORT"] = host, str(port)
        web_workers = max(1, web_workers)
        os.environ.update(web_environment(web_workers))
        python = sys.executable
        commands = {
            "web": web_command(python, host, port, web_workers),
            "worker": [
                python,
                "-m",
                "celery",
                "-A",
                "agentops",
                "worker",
                "--loglevel",
                "INFO",
                "--concurrency",
                str(concurrency),
                # Unique per installation even with several on one host (the port is
                # theirs alone): Celery's default, celery@<host>, would be the same for
                # all, and their broadcast replies (ping, /readyz) would collide.
                "--hostname",
                f"worker-{port}@%h",
            ],
            "beat": [
                python,
                "-m",
                "celery",
                "-A",
                "agentops",
                "beat",
                "--loglevel",
                "INFO",
                "--schedule",
                settings.CELERY_BEAT_SCHEDULE_FILENAME,
            ],
        }
        if no_beat:
            # Beat is one per deployment: two would schedule every periodic task twice.
            del commands["beat"]

        def say(line: str) -> None:
            self.stderr.write(line)
            self.stderr.flush()

        supervisor = Supervisor(commands, say=say)
        signal.signal(signal.SIGINT, supervisor.stop)
        signal.signal(signal.SIGTERM, supervisor.stop)
        self.stdout.write(f"AgentOps Studio on http://{host}:{port}/  (Ctrl-C stops everything)")
        self.stdout.flush()
        supervisor.run()
