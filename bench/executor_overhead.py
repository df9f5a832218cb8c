"""Benchmark: the platform's own overhead per LLM step of an executed run.

A local HTTP server speaking Mistral's chat-completions API answers instantly (a tool
call until the run has made --steps calls, then a final answer). Runs execute in this
process through the real `mistralai` SDK and the real write path (private embedded
PostgreSQL and Redis, production settings). For every LLM step the time spent outside
the model call (storing the llm step, running and storing the tool step, saving the
executor's state) is the overhead; p50 and p95 are printed against the goal (p50 < 10 ms),
with the SDK round trip to the local server shown separately.

    .venv/bin/python bench/executor_overhead.py [--runs 10] [--steps 20]
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import statistics
import sys
import tempfile
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))


def serve(steps: int) -> str:
    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            done = sum(1 for m in body["messages"] if m.get("role") == "tool")
            if done < steps:
                message = {
                    "role": "assistant",
                    "content": "",
                    "tool_calls": [
                        {
                            "id": f"c{done}",
                            "type": "function",
                            "index": 0,
                            "function": {"name": "calculator", "arguments": json.dumps({"expression": f"{done} * 3"})},
                        }
                    ],
                }
                finish = "tool_calls"
            else:
                message, finish = {"role": "assistant", "content": "done"}, "stop"
            data = json.dumps(
                {
                    "id": "b",
                    "object": "chat.completion",
                    "created": 0,
                    "model": "mistral-small-latest",
                    "choices": [{"index": 0, "finish_reason": finish, "message": message}],
                    "usage": {"prompt_tokens": 500, "completion_tokens": 20, "total_tokens": 520},
                }
            ).encode()
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    return f"http://127.0.0.1:{server.server_address[1]}"


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--runs", type=int, default=10)
    parser.add_argument("--steps", type=int, default=20, help="tool-calling steps per run")
    args = parser.parse_args()
    data_dir = tempfile.mkdtemp(prefix="agentops-bench-")
    os.environ.update(
        {
            "DATA_DIR": data_dir,
            "DEBUG": "false",
            "SECRET_KEY": "bench-" + "x" * 60,
            "ENCRYPTION_KEYS": "Y29sbGVjdHN0YXRpYy1vbmx5LW5vdC1zZWNyZXQhISE=",
            "SECURE_SSL_REDIRECT": "false",
            "ALLOW_PRIVATE_PROVIDER_URLS": "true",
            "DJANGO_SETTINGS_MODULE": "agentops.settings",
            "LOG_LEVEL": "WARNING",
        }
    )
    os.environ.pop("DATABASE_URL", None)
    os.environ.pop("REDIS_URL", None)
    try:
        import django

        django.setup()
        run(args)
    finally:
        from django.db import connections

        from agentops.embedded import release_all

        connections.close_all()
        release_all()  # stop the private servers before their folder goes
        shutil.rmtree(data_dir, ignore_errors=True)


def run(args) -> None:
    from django.core.management import call_command

    from agentops.llm import mistral
    from agentops.scoping import organization_scope
    from agentops.services.organizations import organization_create, project_create
    from agentops.services.secrets import provider_secret_set
    from agentops.services.users import user_get_or_create_verified
    from runs.models import Run
    from runs.services.agents import agent_create
    from runs.services.execute import run_execute, run_start

    call_command("migrate", verbosity=0)
    url = serve(args.steps)
    user, _ = user_get_or_create_verified(email="bench@example.com")
    organization = organization_create(name="Bench", slug="bench", owner=user)
    model_seconds: list[float] = []
    original_chat = mistral.MistralProvider.chat

    def timed_chat(self, **kwargs):
        started = time.perf_counter()
        try:
            return original_chat(self, **kwargs)
        finally:
            model_seconds.append(time.perf_counter() - started)

    mistral.MistralProvider.chat = timed_chat
    overheads: list[float] = []
    with organization_scope(organization):
        project = project_create(organization=organization, actor=user, name="Bench", slug="bench")
        provider_secret_set(
            organization=organization, actor=user, provider="mistral", api_key="bench-key-123456", base_url=url
        )
        agent = agent_create(
            project=project,
            actor=user,
            name="bench",
            model="mistral-small-latest",
            tools=["calculator"],
            step_limit=args.steps + 1,
        )
        for _ in range(args.runs + 1):  # the first run warms up
            model_seconds.clear()
            run = run_start(project=project, agent=agent, actor=user, input="Count in threes.")
            started = time.perf_counter()
            run_execute(run_id=run.pk)
            total = time.perf_counter() - started
            run.refresh_from_db()
            assert run.status == Run.Status.SUCCEEDED, run.error
            calls = len(model_seconds)
            overheads.append((total - sum(model_seconds)) / calls * 1000)
            round_trip = statistics.median(model_seconds) * 1000
        overheads = overheads[1:]
    ordered = sorted(overheads)
    p95 = ordered[min(len(ordered) - 1, round(0.95 * (len(ordered) - 1)))]
    print(
        f"{args.runs} runs x {args.steps + 1} LLM steps ({args.steps} with a tool call), local server answering at once"
    )
    print(
        f"platform overhead per LLM step: p50 {statistics.median(overheads):.2f} ms, p95 {p95:.2f} ms "
        f"(goal p50 < 10 ms; per run, averaged over its steps)"
    )
    print(f"SDK round trip to the local server (not overhead): median {round_trip:.2f} ms")


if __name__ == "__main__":
    main()
