"""The evaluation runner as a job runs it: ``python -m jobs.runner`` in a subprocess,
against a small HTTP server playing the platform's two job endpoints (and an
OpenAI-compatible chat completions server). The transformers mode needs transformers,
torch and a model's weights, none of which the test suite has: it is not tested here."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

PROJECT_ROOT = Path(__file__).resolve().parents[2]
TOKEN = "job-token-3f1c9a0b7d2e4c6a"
JOB_ID = 42


class FakePlatform:
    """The platform's items and results endpoints for job ``JOB_ID`` (token ``TOKEN``),
    and a chat completions endpoint under ``/v1/``. ``answers`` scripts the next
    answers of a path: a list of (status, body) used before the normal answer."""

    def __init__(self, items: list[dict]):
        self.items = items
        self.evaluators = ["exact_match"]
        self.requests: list[dict] = []
        self.result_batches: list[list[dict]] = []
        self.chat_requests: list[dict] = []
        self.answers: dict[str, list[tuple[int, dict]]] = {}
        platform = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, *args):
                pass

            def do_GET(self):
                platform.handle(self, None)

            def do_POST(self):
                length = int(self.headers.get("Content-Length") or 0)
                platform.handle(self, json.loads(self.rfile.read(length)))

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()
        self.url = f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self):
        self.server.shutdown()
        self.server.server_close()

    @property
    def results(self) -> list[dict]:
        return [result for batch in self.result_batches for result in batch]

    def handle(self, request: BaseHTTPRequestHandler, body):
        path = request.path
        self.requests.append(
            {"method": request.command, "path": path, "authorization": request.headers.get("Authorization")}
        )
        scripted = self.answers.get(path)
        if scripted:
            return self.send(request, *scripted.pop(0))
        if path.startswith("/v1/"):
            return self.chat(request, path, body)
        if request.headers.get("Authorization") != f"Bearer {TOKEN}":
            return self.send(request, 401, {"error": {"code": "not_authenticated", "message": "invalid job token"}})
        if request.command == "GET" and path == f"/api/v1/jobs/{JOB_ID}/items/":
            return self.send(request, 200, {"experiment": 5, "items": self.items, "evaluators": self.evaluators})
        if request.command == "POST" and path == f"/api/v1/jobs/{JOB_ID}/results/":
            self.result_batches.append(body["results"])
            return self.send(request, 202, {"accepted": len(body["results"])})
        return self.send(request, 404, {"error": {"code": "not_found", "message": "no such endpoint"}})

    def chat(self, request, path, body):
        if path == "/v1/models":
            return self.send(request, 200, {"data": [{"id": "tiny"}]})
        self.chat_requests.append({"body": body, "authorization": request.headers.get("Authorization")})
        content = body["messages"][-1]["content"]
        if content == "refuse me":
            return self.send(request, 400, {"error": {"message": "this prompt is refused"}})
        return self.send(
            request,
            200,
            {
                "choices": [{"message": {"role": "assistant", "content": f"answer to {content}"}}],
                "usage": {"prompt_tokens": 5, "completion_tokens": 7, "total_tokens": 12},
            },
        )

    @staticmethod
    def send(request, status: int, body: dict):
        data = json.dumps(body).encode()
        request.send_response(status)
        request.send_header("Content-Type", "application/json")
        request.send_header("Content-Length", str(len(data)))
        request.end_headers()
        request.wfile.write(data)


ITEMS = [
    {"key": f"q{number}", "input": f"question {number}", "expected": None, "metadata": {}} for number in range(1, 21)
]
ITEMS += [
    {"key": "chat", "input": {"messages": [{"role": "user", "content": "hello"}]}, "expected": "hi", "metadata": {}},
    {"key": "prompt", "input": {"prompt": "2+2?"}, "expected": "4", "metadata": {}},
    {"key": "numbers", "input": [1, 2, 3], "expected": None, "metadata": {}},
]


@pytest.fixture
def platform():
    server = FakePlatform(ITEMS)
    yield server
    server.stop()


def run_runner(platform: FakePlatform, *, model: str = "echo", token: str = TOKEN, command=None, **extra_env):
    env = {
        "PATH": "/usr/bin:/bin",
        "AGENTOPS_URL": platform.url,
        "AGENTOPS_JOB_ID": str(JOB_ID),
        "AGENTOPS_JOB_TOKEN": token,
        "AGENTOPS_MODEL": model,
        **extra_env,
    }
    return subprocess.run(
        command or [sys.executable, "-m", "jobs.runner"],
        cwd=PROJECT_ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )


def test_echo_posts_every_result_in_batches_with_the_job_token(platform):
    finished = run_runner(platform)

    assert finished.returncode == 0, finished.stderr
    assert [result["item"] for result in platform.results] == [item["key"] for item in ITEMS]
    assert [result["output"] for result in platform.results] == [item["input"] for item in ITEMS]
    assert all(isinstance(result["latency_ms"], int) and "error" not in result for result in platform.results)
    assert [len(batch) for batch in platform.result_batches] == [10, 10, 3]
    assert {request["authorization"] for request in platform.requests} == {f"Bearer {TOKEN}"}
    assert "evaluating echo on 23 items of experiment 5 (evaluators: exact_match)" in finished.stdout
    progress = [line for line in finished.stdout.splitlines() if line.startswith("item ")]
    assert len(progress) == len(ITEMS)
    assert progress[2].startswith("item 3/23 q3: ") and progress[2].endswith(" ms")
    assert "done: 23 results delivered, 0 with an error" in finished.stdout
    assert TOKEN not in finished.stdout + finished.stderr


def test_a_refused_token_stops_the_runner_with_a_clear_message(platform):
    finished = run_runner(platform, token="job-token-of-an-ended-job")

    assert finished.returncode == 1
    assert "error: the job token was refused: invalid job token" in finished.stderr
    assert platform.results == []
    assert "job-token-of-an-ended-job" not in finished.stdout + finished.stderr


def test_a_server_error_is_retried_and_the_batch_delivered_once(platform):
    results_path = f"/api/v1/jobs/{JOB_ID}/results/"
    platform.answers[results_path] = [(503, {"error": {"code": "unavailable", "message": "retry later"}})]

    finished = run_runner(platform)

    assert finished.returncode == 0, finished.stderr
    assert "POST results/ failed (HTTP 503: retry later); retrying in 0.5 s" in finished.stdout
    assert len([request for request in platform.requests if request["path"] == results_path]) == 4
    assert [result["item"] for result in platform.results] == [item["key"] for item in ITEMS]


def test_an_unreachable_platform_fails_after_its_retries(platform):
    platform.stop()

    finished = run_runner(platform, AGENTOPS_RETRY_SECONDS="0.01")

    assert finished.returncode == 1
    assert "GET items/ failed 6 times; the last error: cannot reach the platform" in finished.stderr


@pytest.mark.parametrize("status", [302, 307])
def test_the_job_token_never_follows_a_redirect(redirect_trap, status):
    """A platform address that redirects (a proxy's rule, a moved host) is an error: the
    job token reaches only the address the job was given, never the one redirected to."""
    redirect_trap.status = status
    env = {
        "PATH": "/usr/bin:/bin",
        "AGENTOPS_URL": redirect_trap.url,
        "AGENTOPS_JOB_ID": str(JOB_ID),
        "AGENTOPS_JOB_TOKEN": TOKEN,
        "AGENTOPS_MODEL": "echo",
        "AGENTOPS_RETRY_SECONDS": "0.01",
    }
    finished = subprocess.run(
        [sys.executable, "-m", "jobs.runner"], cwd=PROJECT_ROOT, env=env, capture_output=True, text=True, timeout=60
    )

    assert finished.returncode == 1
    assert f"GET items/ was refused (HTTP {status})" in finished.stderr
    assert [request["authorization"] for request in redirect_trap.redirected] == [f"Bearer {TOKEN}"]
    assert redirect_trap.elsewhere == []


def test_openai_mode_asks_a_chat_completions_server(platform):
    finished = run_runner(
        platform,
        model=f"openai:{platform.url}|tiny-llama",
        AGENTOPS_MODEL_PARAMS='{"temperature": 0, "max_tokens": 32}',
        OPENAI_API_KEY="vllm-key",
    )

    assert finished.returncode == 0, finished.stderr
    outputs = {result["item"]: result for result in platform.results}
    assert outputs["q1"]["output"] == "answer to question 1"
    assert outputs["chat"]["output"] == "answer to hello"
    assert outputs["prompt"]["output"] == "answer to 2+2?"
    assert outputs["numbers"]["output"] == "answer to [1, 2, 3]"
    assert outputs["q1"]["tokens"] == 12
    first_request = platform.chat_requests[0]
    assert first_request["body"] == {
        "model": "tiny-llama",
        "messages": [{"role": "user", "content": "question 1"}],
        "temperature": 0,
        "max_tokens": 32,
    }
    assert first_request["authorization"] == "Bearer vllm-key"
    chat_request = next(r for r in platform.chat_requests if r["body"]["messages"][0]["content"] == "hello")
    assert chat_request["body"]["messages"] == [{"role": "user", "content": "hello"}]
    assert "item 1/23 q1: " in finished.stdout and ", 12 tokens" in finished.stdout


def test_openai_mode_reports_an_item_the_server_refuses_and_goes_on(platform):
    platform.items = [
        {"key": "ok", "input": "fine", "expected": None, "metadata": {}},
        {"key": "bad", "input": "refuse me", "expected": None, "metadata": {}},
    ]

    finished = run_runner(platform, model=f"openai:{platform.url}/v1|tiny")

    assert finished.returncode == 0, finished.stderr
    bad = next(result for result in platform.results if result["item"] == "bad")
    assert bad["output"] is None
    assert bad["error"] == "HTTP 400: this prompt is refused"
    assert "item 2/2 bad: " in finished.stdout and "error: HTTP 400: this prompt is refused" in finished.stdout


def test_a_model_that_fails_on_every_item_fails_the_job(platform):
    platform.items = [{"key": "bad", "input": "refuse me", "expected": None, "metadata": {}}]

    finished = run_runner(platform, model=f"openai:{platform.url}|tiny")

    assert finished.returncode == 1
    assert [result["item"] for result in platform.results] == ["bad"]
    assert "the model failed on every item; the first error: HTTP 400" in finished.stderr


@pytest.mark.parametrize(
    ("settings", "message"),
    [
        ({"AGENTOPS_JOB_TOKEN": ""}, "AGENTOPS_JOB_TOKEN is not set"),
        ({"AGENTOPS_MODEL": "gpt:nothing"}, "AGENTOPS_MODEL='gpt:nothing' is not a model this runner knows"),
        ({"AGENTOPS_URL": "ftp://example.com"}, "AGENTOPS_URL must be an http:// or https:// URL"),
        ({"AGENTOPS_MODEL_PARAMS": "[1]"}, "AGENTOPS_MODEL_PARAMS must be a JSON object"),
    ],
)
def test_bad_settings_exit_with_code_2_before_calling_the_platform(platform, settings, message):
    overrides = {"model": settings.pop("AGENTOPS_MODEL")} if "AGENTOPS_MODEL" in settings else {}
    if "AGENTOPS_JOB_TOKEN" in settings:
        overrides["token"] = settings.pop("AGENTOPS_JOB_TOKEN")
    finished = run_runner(platform, **overrides, **settings)

    assert finished.returncode == 2
    assert message in finished.stderr
    assert platform.requests == []


@pytest.mark.parametrize("how", ["copied file", "source in the command"])
def test_the_runner_is_one_standard_library_file(platform, tmp_path, how):
    # Run without site-packages (-S) or the project on the path (-I): copied anywhere,
    # or given whole as `python -c <source>`.
    copy = tmp_path / "runner.py"
    shutil.copy(PROJECT_ROOT / "jobs" / "runner.py", copy)
    program = [str(copy)] if how == "copied file" else ["-c", copy.read_text()]

    finished = run_runner(platform, command=[sys.executable, "-I", "-S", *program])

    assert finished.returncode == 0, finished.stderr
    assert len(platform.results) == len(ITEMS)


def test_a_local_job_runs_the_runner_and_its_progress_is_the_job_log(platform, tmp_path):
    from jobs.backends.base import JobSpec
    from jobs.backends.local import LocalBackend
    from jobs.services.polling import RUNNER_SOURCE

    backend = LocalBackend(config={"work_dir": str(tmp_path / "jobs")}, credentials={})
    external_id = backend.submit(
        JobSpec(
            job_id=JOB_ID,
            name="evaluation",
            image="",
            # As the platform starts it (jobs/services/polling.py): its source, to the host's
            # python3 (the job's user may not reach this Python). Not by path: the script's
            # folder first on sys.path would let jobs/selectors.py hide the standard library's.
            command=["python3", "-c", RUNNER_SOURCE],
            env={
                "AGENTOPS_URL": platform.url,
                "AGENTOPS_JOB_ID": str(JOB_ID),
                "AGENTOPS_JOB_TOKEN": TOKEN,
                "AGENTOPS_MODEL": "echo",
            },
            hardware="cpu-basic",
            time_limit_seconds=60,
        )
    )
    deadline = time.monotonic() + 20
    while (status := backend.status(external_id)).state == "running" and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = backend.logs(external_id, {}).lines

    assert (status.state, status.exit_code) == ("succeeded", 0), lines
    assert len(platform.results) == len(ITEMS)
    assert "item 23/23 numbers: " in lines[-2]
    assert lines[-1] == "done: 23 results delivered, 0 with an error"
