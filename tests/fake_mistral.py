"""A local HTTP server that speaks Mistral's chat-completions API, for the real
``mistralai`` SDK to talk to in tests. Answers are scripted per test."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


def completion(content="", tool_calls=None, model="mistral-large-latest", prompt_tokens=100, completion_tokens=20):
    """A chat-completions response body (the SDK validates its shape)."""
    calls = [
        {
            "id": call_id,
            "type": "function",
            "index": index,
            "function": {"name": name, "arguments": json.dumps(arguments)},
        }
        for index, (call_id, name, arguments) in enumerate(tool_calls or [])
    ]
    return {
        "id": "cmpl-test",
        "object": "chat.completion",
        "created": int(time.time()),
        "model": model,
        "choices": [
            {
                "index": 0,
                "finish_reason": "tool_calls" if calls else "stop",
                "message": {"role": "assistant", "content": content, "prefix": False, "tool_calls": calls or None},
            }
        ],
        "usage": {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": completion_tokens,
            "total_tokens": prompt_tokens + completion_tokens,
        },
    }


class FakeMistral:
    def __init__(self):
        self.script: list[tuple[int, dict, dict, float]] = []  # (status, body, headers, delay in seconds)
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        # Answer to the executor's summarising calls (context compaction), outside the script.
        self.summary = "The user asked for several calculations; all were done."

    def reply(self, body: dict, status: int = 200, headers: dict | None = None, delay: float = 0.0) -> None:
        self.script.append((status, body, headers or {}, delay))

    def next(self):
        with self.lock:
            if not self.script:
                return 500, {"message": "the test scripted no more answers"}, {}, 0.0
            return self.script.pop(0)


@pytest.fixture
def fake_mistral():
    state = FakeMistral()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self):  # noqa: N802
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length", 0))) or b"{}")
            state.requests.append({"path": self.path, "body": body, "auth": self.headers.get("Authorization")})
            first = (body.get("messages") or [{}])[0].get("content") or ""
            if isinstance(first, str) and first.startswith("Summarise this part"):
                status, payload, headers, delay = 200, completion(content=state.summary), {}, 0.0
            else:
                status, payload, headers, delay = state.next()
            time.sleep(delay)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            for key, value in headers.items():
                self.send_header(key, value)
            self.end_headers()
            self.wfile.write(data)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
