"""A host name that rebinds: ``rebinding.url`` names ``rebinding.host``, whose first
lookup (the first ``public_lookups``) answers a public address (what an outbound URL
check sees) and every later one 127.0.0.1, where a local server records what reaches it. It stands for a name whose
owner switches it to a private address between the check and the connection (DNS
rebinding). With private addresses refused (the fixture sets
``ALLOW_PRIVATE_PROVIDER_URLS`` off), nothing may reach ``rebinding.received``."""

from __future__ import annotations

import socket
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

PUBLIC_ADDRESS = "93.184.215.14"


@dataclass
class Rebinding:
    host: str = "rebinding.attacker.example"
    url: str = ""
    lookups: int = 0
    public_lookups: int = 1
    received: list[dict] = field(default_factory=list)


@pytest.fixture
def rebinding(monkeypatch, settings):
    state = Rebinding()

    class Recorder(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def _handle(self):
            length = int(self.headers.get("Content-Length") or 0)
            state.received.append({"method": self.command, "path": self.path, "body": self.rfile.read(length)})
            body = b'{"score": 1, "secret": "from inside"}'
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(body)

        do_GET = do_HEAD = do_POST = do_PUT = _handle  # noqa: N815

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    port = server.server_address[1]
    state.url = f"http://{state.host}:{port}"

    real_getaddrinfo = socket.getaddrinfo

    def getaddrinfo(host, *args, **kwargs):
        if host != state.host:
            return real_getaddrinfo(host, *args, **kwargs)
        state.lookups += 1
        address = PUBLIC_ADDRESS if state.lookups <= state.public_lookups else "127.0.0.1"
        return [(socket.AF_INET, socket.SOCK_STREAM, socket.IPPROTO_TCP, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    yield state
    server.shutdown()
    server.server_close()
