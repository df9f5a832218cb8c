"""Two local HTTP servers for redirect tests: ``trap.url`` answers every request with a
redirect (``trap.status``, 307 unless a test sets another) to the same path on
``trap.elsewhere_url``, a server that stands for an address the platform never checked.
Both record what reached them (method, path, Authorization header, body). A client that
carries a credential must stop at the redirect: nothing may reach ``elsewhere``."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest


@dataclass
class RedirectTrap:
    url: str = ""
    elsewhere_url: str = ""
    status: int = 307
    redirected: list[dict] = field(default_factory=list)
    elsewhere: list[dict] = field(default_factory=list)


def _serve(handler) -> ThreadingHTTPServer:
    server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    return server


@pytest.fixture
def redirect_trap():
    trap = RedirectTrap()

    class Recorder(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"
        log: list[dict]

        def _record(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            self.log.append(
                {
                    "method": self.command,
                    "path": self.path,
                    "authorization": self.headers.get("Authorization"),
                    "body": self.rfile.read(length) if length else b"",
                }
            )

        def _send(self, status: int, body: bytes = b"{}", headers: dict | None = None) -> None:
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":  # a HEAD answer has no body (S3 clients check buckets with HEAD)
                self.wfile.write(body)

        def log_message(self, *args):
            pass

    class Redirector(Recorder):
        log = trap.redirected

        def _handle(self):
            self._record()
            self._send(trap.status, headers={"Location": trap.elsewhere_url + self.path})

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815

    class Elsewhere(Recorder):
        log = trap.elsewhere

        def _handle(self):
            self._record()
            self._send(200)

        do_GET = do_HEAD = do_POST = do_PUT = do_PATCH = do_DELETE = _handle  # noqa: N815

    servers = [_serve(Redirector), _serve(Elsewhere)]
    trap.url, trap.elsewhere_url = (f"http://127.0.0.1:{server.server_address[1]}" for server in servers)
    yield trap
    for server in servers:
        server.shutdown()
        server.server_close()
