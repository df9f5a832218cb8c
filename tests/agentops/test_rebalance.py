"""A busy web process closes keep-alive connections so that they move to another
process (agentops.rebalance): checked on the ASGI interface with requests that overlap."""

import asyncio
import subprocess
import sys

import pytest

from agentops.rebalance import CloseWhenBusy
from tests.worker_process import ROOT, worker_environment


def _app(gates: dict):
    """An ASGI app whose request to /slow/<name> waits for gates[name] before answering;
    /stream starts its response at once, then waits."""

    async def app(scope, receive, send):
        path = scope["path"]
        if path.startswith("/slow/"):
            await gates[path.removeprefix("/slow/")].wait()
        await send({"type": "http.response.start", "status": 200, "headers": [(b"content-type", b"text/plain")]})
        if path == "/stream":
            await gates["stream"].wait()
        await send({"type": "http.response.body", "body": b"ok"})

    return app


async def _request(app, path: str) -> dict:
    started = {}

    async def receive():
        return {"type": "http.request", "body": b"", "more_body": False}

    async def send(message):
        if message["type"] == "http.response.start":
            started.update(message)

    await app({"type": "http", "path": path, "headers": []}, receive, send)
    return started


def _closes(start: dict) -> bool:
    return (b"connection", b"close") in start["headers"]


def test_a_response_keeps_its_connection_unless_another_request_is_being_computed():
    async def scenario():
        gates = {name: asyncio.Event() for name in ("a", "b", "stream")}
        app = CloseWhenBusy(_app(gates))

        alone = await _request(app, "/quick")
        assert not _closes(alone), "a lone request keeps its connection"

        first = asyncio.create_task(_request(app, "/slow/a"))
        second = asyncio.create_task(_request(app, "/slow/b"))
        await asyncio.sleep(0)
        assert app.computing == 2
        gates["a"].set()
        # /slow/a answers while /slow/b is still being computed: its client moves.
        assert _closes(await first)
        gates["b"].set()
        assert not _closes(await second), "the last one computing keeps its connection"
        assert app.computing == 0

        # A streamed response that has started is not work waiting: it keeps the
        # process's other connections where they are.
        stream = asyncio.create_task(_request(app, "/stream"))
        await asyncio.sleep(0)
        assert not _closes(await _request(app, "/quick"))
        gates["stream"].set()
        assert not _closes(await stream)

    asyncio.run(scenario())


def test_a_request_that_fails_before_answering_is_no_longer_counted():
    async def failing(scope, receive, send):
        raise RuntimeError("the view failed")

    async def scenario():
        app = CloseWhenBusy(failing)
        try:
            await _request(app, "/boom")
        except RuntimeError:
            pass
        assert app.computing == 0

    asyncio.run(scenario())


def test_lifespan_and_websockets_pass_through_uncounted():
    seen = []

    async def inner(scope, receive, send):
        seen.append(scope["type"])

    async def scenario():
        app = CloseWhenBusy(inner)
        await app({"type": "lifespan"}, None, None)
        await app({"type": "websocket", "path": "/ws"}, None, None)
        assert app.computing == 0

    asyncio.run(scenario())
    assert seen == ["lifespan", "websocket"]


@pytest.mark.django_db
@pytest.mark.parametrize(("processes", "wrapped"), [("1", False), ("2", True)])
def test_the_web_application_rebalances_only_when_serve_runs_several_processes(processes, wrapped):
    # What uvicorn imports in each web process, with what serve puts in its environment.
    code = "import agentops.asgi as a; from agentops.rebalance import CloseWhenBusy as C; "
    code += "print(isinstance(a.application.application_mapping['http'], C))"
    result = subprocess.run(
        [sys.executable, "-c", code],
        cwd=ROOT,
        env=worker_environment(WEB_PROCESSES=processes),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split()[-1] == str(wrapped)
