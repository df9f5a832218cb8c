"""Built-in tools and webhook tools."""

import hashlib
import hmac
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentops.scoping import organization_scope
from runs.services.agents import webhook_tool_create
from runs.tools.base import ToolContext, ToolError
from runs.tools.builtins import BUILTIN_TOOLS
from runs.tools.registry import available_tools, tools_for


def call(name, **arguments):
    return BUILTIN_TOOLS[name].call(arguments, ToolContext())


@pytest.mark.parametrize(
    ("expression", "result"),
    [("1 + 2 * 3", 7), ("(3 + 4) * 2 / sqrt(16)", 3.5), ("-2 ** 2", -4), ("7 // 2 + 7 % 2", 4), ("round(pi, 2)", 3.14)],
)
def test_calculator_evaluates_arithmetic(expression, result):
    assert call("calculator", expression=expression)["result"] == result


@pytest.mark.parametrize(
    ("expression", "message"),
    [
        ("__import__('os').system('id')", "only numbers"),
        ("().__class__", "only numbers"),
        ("9 ** 9999", "exponents above"),
        ("1 / 0", "division by zero"),
        ("1 +", "not an arithmetic expression"),
        ("10 ** 300 * 10 ** 300", "too large"),
    ],
)
def test_calculator_refuses_anything_but_arithmetic(expression, message):
    with pytest.raises(ToolError, match=message):
        call("calculator", expression=expression)


def test_current_time_in_a_zone_and_a_bad_zone():
    assert call("current_time", timezone="Europe/Paris")["iso"][-6:] in {"+01:00", "+02:00"}
    with pytest.raises(ToolError, match="unknown time zone"):
        call("current_time", timezone="Mars/Olympus")


def test_memory_tools_share_the_runs_scratch_memory():
    context = ToolContext()
    BUILTIN_TOOLS["memory_set"].call({"key": "user", "value": {"name": "Ada"}}, context)
    assert BUILTIN_TOOLS["memory_get"].call({"key": "user"}, context)["value"] == {"name": "Ada"}
    assert BUILTIN_TOOLS["memory_get"].call({}, context) == {"keys": ["user"]}
    BUILTIN_TOOLS["memory_set"].call({"key": "user", "value": None}, context)
    assert context.memory == {}


class _Recorder(BaseHTTPRequestHandler):
    received: list = []
    reply = (200, b'{"temperature": 21}')
    trickle = 0.0  # seconds between the answer's bytes (0: all at once)

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((dict(self.headers), body))
        status, payload = type(self).reply
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        try:
            if not type(self).trickle:
                self.wfile.write(payload)
            for byte in payload if type(self).trickle else b"":
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(type(self).trickle)
        except (BrokenPipeError, ConnectionResetError):
            pass  # The platform gave up waiting.

    def do_GET(self):  # noqa: N802
        self.send_response(200)
        self.send_header("Content-Type", "text/plain")
        self.end_headers()
        self.wfile.write(b"x" * 300_000)

    def log_message(self, *args):
        pass


@pytest.fixture
def tool_server():
    _Recorder.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Recorder)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def test_webhook_tool_sends_a_signed_call_and_returns_the_answer(tenant, tool_server):
    project = tenant.project
    with organization_scope(project.organization):
        _tool, secret = webhook_tool_create(
            project=project,
            actor=tenant.admin,
            name="weather",
            url=f"{tool_server}/hook",
            parameters={"type": "object", "properties": {"city": {"type": "string"}}},
        )
        tool = available_tools(project=project)["weather"]
        result = tool.call({"city": "Paris"}, ToolContext(run_id=7, call_id="c1"))
    assert result == {"temperature": 21}
    headers, body = _Recorder.received[0]
    assert json.loads(body) == {"tool": "weather", "arguments": {"city": "Paris"}, "run_id": 7, "call_id": "c1"}
    expected = hmac.new(secret.encode(), headers["X-AgentOps-Timestamp"].encode() + b"." + body, hashlib.sha256)
    assert headers["X-AgentOps-Signature"] == f"sha256={expected.hexdigest()}"


def test_webhook_tool_errors_become_tool_errors(tenant, tool_server):
    _Recorder.reply = (500, b"boom")
    try:
        with organization_scope(tenant.organization):
            webhook_tool_create(project=tenant.project, actor=None, name="flaky", url=f"{tool_server}/x")
            with pytest.raises(ToolError, match="HTTP 500: boom"):
                tools_for(project=tenant.project, names=["flaky"])["flaky"].call({}, ToolContext())
    finally:
        _Recorder.reply = (200, b'{"temperature": 21}')


def test_webhook_tool_trickling_its_answer_times_out_on_the_whole_answer(tenant, tool_server):
    # Each byte comes well inside the tool's timeout; the whole answer (40 bytes, 10 s) does not.
    _Recorder.reply, _Recorder.trickle = (200, b'{"temperature": 21' + b" " * 21 + b"}"), 0.25
    try:
        with organization_scope(tenant.organization):
            webhook_tool_create(
                project=tenant.project, actor=None, name="slow", url=f"{tool_server}/x", timeout_seconds=1
            )
            with pytest.raises(ToolError, match="the tool did not answer within 1 s"):
                tools_for(project=tenant.project, names=["slow"])["slow"].call({}, ToolContext())
    finally:
        _Recorder.reply, _Recorder.trickle = (200, b'{"temperature": 21}'), 0.0


@pytest.mark.parametrize("status", [302, 307])
def test_webhook_tool_does_not_follow_a_redirect(tenant, redirect_trap, status):
    redirect_trap.status = status
    with organization_scope(tenant.organization):
        webhook_tool_create(project=tenant.project, actor=None, name="moved", url=f"{redirect_trap.url}/x")
        with pytest.raises(ToolError, match=f"HTTP {status}"):
            tools_for(project=tenant.project, names=["moved"])["moved"].call({}, ToolContext())
    assert len(redirect_trap.redirected) == 1 and redirect_trap.elsewhere == []


def test_webhook_url_is_checked_against_private_addresses_at_save_and_call(tenant, tool_server, settings):
    from agentops.errors import InvalidRequest

    with organization_scope(tenant.organization):
        webhook_tool_create(project=tenant.project, actor=None, name="inside", url=f"{tool_server}/x")
        settings.ALLOW_PRIVATE_PROVIDER_URLS = False
        with pytest.raises(InvalidRequest, match="private or reserved"):
            webhook_tool_create(
                project=tenant.project, actor=None, name="metadata", url="http://169.254.169.254/latest/meta-data"
            )
        with pytest.raises(ToolError, match="private or reserved"):
            available_tools(project=tenant.project)["inside"].call({}, ToolContext())
    assert _Recorder.received == []


def test_webhook_tool_does_not_call_a_host_that_rebinds_to_a_private_address(tenant, rebinding, settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = True  # saved while the name still answers a public address
    with organization_scope(tenant.organization):
        webhook_tool_create(project=tenant.project, actor=None, name="rebinds", url=f"{rebinding.url}/hook")
        settings.ALLOW_PRIVATE_PROVIDER_URLS = False
        with pytest.raises(ToolError, match="private or reserved"):
            tools_for(project=tenant.project, names=["rebinds"])["rebinds"].call({}, ToolContext())
    assert rebinding.received == []


def test_http_fetch_does_not_call_a_host_that_rebinds_to_a_private_address(rebinding, settings):
    settings.HTTP_FETCH_ALLOWED_HOSTS = [rebinding.host]
    with pytest.raises(ToolError, match="private or reserved"):
        call("http_fetch", url=f"{rebinding.url}/page")
    assert rebinding.received == []


def test_http_fetch_only_reaches_allowed_hosts_and_cuts_the_body(tool_server, settings):
    settings.HTTP_FETCH_ALLOWED_HOSTS = ["127.0.0.1"]
    result = call("http_fetch", url=f"{tool_server}/page")
    assert result["status"] == 200 and result["truncated"] is True and len(result["body"]) == 200_000
    with pytest.raises(ToolError, match="not in the allowed hosts"):
        call("http_fetch", url="http://example.com/")
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    with pytest.raises(ToolError, match="private or reserved"):
        call("http_fetch", url=f"{tool_server}/page")


def test_webhook_tool_may_not_shadow_a_builtin(tenant):
    from agentops.errors import InvalidRequest

    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="built-in"):
        webhook_tool_create(project=tenant.project, actor=None, name="calculator", url="http://127.0.0.1:9/")
