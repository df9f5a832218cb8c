"""Connections move off a busy web process (an ASGI middleware).

``serve`` starts one uvicorn process per core on one listening socket. A client's
keep-alive connection stays with the process that accepted it, so a few clients that
send steadily (OpenTelemetry exporters, CI uploads) can sit three on one process and one
on the other: the first process's Python is the bottleneck while the second waits on
PostgreSQL with its core half idle (bench/ingest_otlp.py saw 3 connections against 1,
15.7 s against 5.1 s of CPU in a 19 s run). When a response starts while another
request of the same process is still being computed, this middleware answers it with
``Connection: close``: the client's next request opens a new connection, which the
process that is free first accepts. A lone request, a streamed response (SSE: its
response has started) and websockets keep their connection.

On when ``WEB_PROCESSES`` (set by ``serve``) is above 1: with one process there is
nowhere better to go.
"""

from __future__ import annotations

CLOSE = (b"connection", b"close")


class CloseWhenBusy:
    def __init__(self, app):
        self.app = app
        #: This process's HTTP requests whose response has not started yet (one event
        #: loop per process: no lock needed).
        self.computing = 0

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        self.computing += 1
        counted = True

        async def start_response(message):
            nonlocal counted
            if counted and message["type"] == "http.response.start":
                counted = False
                self.computing -= 1
                if self.computing > 0:
                    message = {**message, "headers": [*message.get("headers", ()), CLOSE]}
            await send(message)

        try:
            await self.app(scope, receive, start_response)
        finally:
            if counted:
                self.computing -= 1
