"""Run the whole platform in the foreground: the web server (HTTP and WebSocket),
a Celery worker and Celery beat, each restarted if it exits (agentops/supervisor.py).
Ctrl-C or SIGTERM stops them all, and with them the embedded PostgreSQL and Redis when
nothing else uses them."""

import os
import signal
import sys

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from agentops.management.commands.seed_demo import format_credentials
from agentops.services.demo import demo_seed
from agentops.supervisor import Supervisor


def available_cores() -> int:
    """The cores this process may run on (a container's or a taskset's share, not the host's)."""
    try:
        return len(os.sched_getaffinity(0))
    except AttributeError:  # not on Linux
        return os.cpu_count() or 1


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

    def handle(self, *args, demo, host, port, concurrency, web_workers, **options):
        call_command("migrate", interactive=False, verbosity=0)
        if not settings.DEBUG:
            call_command("collectstatic", interactive=False, verbosity=0)
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
        python = sys.executable
        commands = {
            "web": web_command(python, host, port, max(1, web_workers)),
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

        def say(line: str) -> None:
            self.stderr.write(line)
            self.stderr.flush()

        supervisor = Supervisor(commands, say=say)
        signal.signal(signal.SIGINT, supervisor.stop)
        signal.signal(signal.SIGTERM, supervisor.stop)
        self.stdout.write(f"AgentOps Studio on http://{host}:{port}/  (Ctrl-C stops everything)")
        self.stdout.flush()
        supervisor.run()
