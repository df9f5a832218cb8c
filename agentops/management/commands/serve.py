"""Run the whole platform in the foreground: the web server (HTTP and WebSocket),
a Celery worker and Celery beat. Ctrl-C stops them all, and with them the embedded
PostgreSQL and Redis when nothing else uses them."""

import os
import signal
import subprocess
import sys
import time

from django.conf import settings
from django.core.management import call_command
from django.core.management.base import BaseCommand

from agentops.management.commands.seed_demo import format_credentials
from agentops.services.demo import demo_seed


class Command(BaseCommand):
    help = "Migrate, optionally seed demo data, then run web server, worker and beat until Ctrl-C."

    def add_arguments(self, parser):
        parser.add_argument("--demo", action="store_true", help="Create the demo data and print its credentials")
        parser.add_argument("--host", default=os.environ.get("HOST", "127.0.0.1"))
        parser.add_argument("--port", default=os.environ.get("PORT", "8000"))
        parser.add_argument("--concurrency", default=os.environ.get("CELERY_CONCURRENCY", "2"))

    def handle(self, *args, demo, host, port, concurrency, **options):
        call_command("migrate", interactive=False, verbosity=0)
        if not settings.DEBUG:
            call_command("collectstatic", interactive=False, verbosity=0)
        if demo:
            credentials = demo_seed()
            # The apps add their samples through their own commands (the core imports no app).
            call_command("seed_demo_runs", f"{credentials.organization}/{credentials.project}", verbosity=0)
            call_command("seed_demo_evals", f"{credentials.organization}/{credentials.project}", verbosity=0)
            call_command("seed_demo_jobs", f"{credentials.organization}/{credentials.project}", verbosity=0)
            self.stdout.write(format_credentials(credentials))
        # The children's settings read where the platform is served (JOBS_CALLBACK_URL's default).
        os.environ["HOST"], os.environ["PORT"] = host, str(port)
        python = sys.executable
        commands = {
            "web": [
                python,
                "-m",
                "uvicorn",
                "agentops.asgi:application",
                "--host",
                host,
                "--port",
                str(port),
                "--lifespan",
                "off",
                "--no-access-log",
            ],
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
        children = {name: subprocess.Popen(argv) for name, argv in commands.items()}
        self.stdout.write(f"AgentOps Studio on http://{host}:{port}/  (Ctrl-C stops everything)")
        stopping = False

        def stop(signum, frame):
            nonlocal stopping
            stopping = True

        signal.signal(signal.SIGINT, stop)
        signal.signal(signal.SIGTERM, stop)
        exit_code = 0
        while not stopping:
            for name, child in children.items():
                if child.poll() is not None:
                    self.stderr.write(f"{name} exited with code {child.returncode}; stopping the platform")
                    stopping, exit_code = True, 1
                    break
            time.sleep(0.5)
        for child in children.values():
            if child.poll() is None:
                child.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 20
        for child in children.values():
            try:
                child.wait(timeout=max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                child.kill()
        if exit_code:
            sys.exit(exit_code)
