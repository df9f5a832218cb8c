"""A local HTTP server that speaks Mistral's chat-completions API, for the real
``mistralai`` SDK to talk to in tests. Answers are scripted per test."""

from __future__ import annotations

import json
import re
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


def stream_chunks(body: dict) -> list[dict]:
    """A chat-completions answer as the chunks of a streamed answer: the text a few
    words at a time, then the tool calls, then the finish reason with the usage."""
    choice = body["choices"][0]
    message = choice["message"]
    base = {"id": body["id"], "object": "chat.completion.chunk", "created": body["created"], "model": body["model"]}
    words = re.findall(r"\s*\S+\s*", message.get("content") or "")
    pieces = ["".join(words[start : start + 3]) for start in range(0, len(words), 3)]
    chunks = [{**base, "choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}, "finish_reason": None}]}]
    chunks += [
        {**base, "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]} for piece in pieces
    ]
    if message.get("tool_calls"):
        chunks.append(
            {**base, "choices": [{"index": 0, "delta": {"tool_calls": message["tool_calls"]}, "finish_reason": None}]}
        )
    chunks.append(
        {
            **base,
            "choices": [{"index": 0, "delta": {"content": ""}, "finish_reason": choice["finish_reason"]}],
            "usage": body["usage"],
        }
    )
    return chunks


API_KEY = "sk-test-key-123456"


class FakeMistral:
    def __init__(self):
        # (status, body, headers, delay in seconds before answering, delay between streamed chunks)
        self.script: list[tuple[int, dict, dict, float, float]] = []
        self.requests: list[dict] = []
        self.lock = threading.Lock()
        # Answer to the executor's summarising calls (context compaction), outside the script.
        self.summary = "The user asked for several calculations; all were done."

    def reply(
        self, body: dict, status: int = 200, headers: dict | None = None, delay: float = 0.0, chunk_delay: float = 0.0
    ) -> None:
        """Script the next answer. A request with ``"stream": true`` gets a successful
        answer as server-sent events (see ``stream_chunks``), ``chunk_delay`` apart."""
        self.script.append((status, body, headers or {}, delay, chunk_delay))

    def serve(self, organization) -> None:
        """Make this server the organization's Mistral: its key (``API_KEY``) with this
        server as the base URL."""
        from agentops.scoping import organization_scope
        from agentops.services.secrets import provider_secret_set

        with organization_scope(organization):
            provider_secret_set(
                organization=organization, actor=None, provider="mistral", api_key=API_KEY, base_url=self.url
            )

    def next(self):
        with self.lock:
            if not self.script:
                return 500, {"message": "the test scripted no more answers"}, {}, 0.0, 0.0
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
                status, payload, headers, delay, chunk_delay = 200, completion(content=state.summary), {}, 0.0, 0.0
            else:
                status, payload, headers, delay, chunk_delay = state.next()
            time.sleep(delay)
            if body.get("stream") and status == 200:
                self.send_response(200)
                self.send_header("Content-Type", "text/event-stream")
                self.send_header("Cache-Control", "no-cache")
                self.end_headers()
                self.close_connection = True
                try:
                    for chunk in stream_chunks(payload):
                        self.wfile.write(f"data: {json.dumps(chunk)}\n\n".encode())
                        self.wfile.flush()
                        time.sleep(chunk_delay)
                    self.wfile.write(b"data: [DONE]\n\n")
                    self.wfile.flush()
                except (BrokenPipeError, ConnectionResetError):
                    pass  # The client stopped reading (a call that timed out).
                return
            data = json.dumps(payload).encode()
            try:
                self.send_response(status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(data)))
                for key, value in headers.items():
                    self.send_header(key, value)
                self.end_headers()
                self.wfile.write(data)
            except (BrokenPipeError, ConnectionResetError):
                pass  # The client is gone (a call that timed out, a worker that was killed).

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
