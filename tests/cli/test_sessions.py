"""The client's sessions API (cli/agentops_eval/sessions.py) against a scripted server on
127.0.0.1: a 429 reaches the person at once, a message keeps its Idempotency-Key across
retries, an agent is found by name."""

from __future__ import annotations

import json
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"
if str(CLI_DIR) not in sys.path:
    sys.path.insert(0, str(CLI_DIR))

from agentops_eval import client as client_module  # noqa: E402
from agentops_eval.client import ApiError, Client  # noqa: E402
from agentops_eval.sessions import SessionsApi  # noqa: E402


@pytest.fixture
def server(monkeypatch):
    """Answers each request with the next (status, body) of ``script``; records them."""
    monkeypatch.setattr(client_module, "DEFAULT_BACKOFF", 0.001)
    state = type("State", (), {"script": [], "requests": []})()

    class Handler(BaseHTTPRequestHandler):
        def _answer(self):
            length = int(self.headers.get("Content-Length") or 0)
            body = json.loads(self.rfile.read(length) or b"null")
            state.requests.append((self.command, self.path, dict(self.headers), body))
            status, payload = state.script.pop(0)
            data = json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            if status == 429:
                self.send_header("Retry-After", "0")
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PUT = do_DELETE = _answer  # noqa: N815

        def log_message(self, *args):
            pass

    http = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=http.serve_forever, daemon=True).start()
    state.api = SessionsApi(Client(f"http://127.0.0.1:{http.server_address[1]}", "acme/agent", "ao_test"))
    yield state
    http.shutdown()


def test_too_many_queued_messages_is_told_at_once_not_waited_out(server):
    message = "5 messages already wait for the running turn: try again when one has started"
    server.script = [(429, {"error": {"code": "throttled", "message": message}}), (202, {"id": 1})]
    with pytest.raises(ApiError) as refused:
        server.api.send(7, "hello")
    assert refused.value.status == 429 and refused.value.message == message
    assert len(server.requests) == 1


def test_a_message_keeps_its_idempotency_key_across_retries(server):
    server.script = [(503, {"error": {"code": "unavailable", "message": "restarting"}}), (202, {"id": 1})]
    assert server.api.send(7, "hello") == {"id": 1}
    keys = [headers.get("Idempotency-Key") for _method, _path, headers, _body in server.requests]
    assert len(keys) == 2 and keys[0] and keys[0] == keys[1]
    assert server.requests[0][:2] == ("POST", "/api/v1/projects/acme/agent/agent-sessions/7/messages/")
    assert server.requests[0][3] == {"content": "hello"}


def test_an_agent_is_found_by_name_and_an_unknown_name_lists_the_agents(server):
    agents = [{"id": 3, "name": "helper"}, {"id": 4, "name": "support"}]
    server.script = [(200, agents), (200, agents)]
    assert server.api.agent_by_name("support")["id"] == 4
    with pytest.raises(ApiError) as unknown:
        server.api.agent_by_name("nobody")
    assert unknown.value.status == 404
    assert unknown.value.message == "this project has no agent named 'nobody' (its agents: helper, support)"
