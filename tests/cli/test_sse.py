"""The client's Server-Sent Events (cli/agentops_eval/sse.py): the parser, fed whole and
in every possible split; and the subscription against a local server on 127.0.0.1 that
drops the connection: it reconnects with Last-Event-ID and hands on no event twice."""

from __future__ import annotations

import json
import queue
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest
import requests

CLI_DIR = Path(__file__).resolve().parents[2] / "cli"
if str(CLI_DIR) not in sys.path:
    sys.path.insert(0, str(CLI_DIR))

from agentops_eval.sse import Parser, StreamRefused, Subscription  # noqa: E402

STREAM = (
    "\ufeffretry: 1500\n\n"
    ": keepalive\n\n"
    'id: 1\nevent: ready\ndata: {"session":7}\n\n'
    "id: 2\r\nevent: assistant_chunk\r\n"
    'data: {"text":"h\u00e9llo \u2603"}\r\n\r\n'
    "id: 3\revent: tool_call\rdata: line one\rdata: line two\r\r"
    "event: ignored-without-data\n\n"
    "data:no space after the colon\n\n"
    "id: 4\nevent: closed\ndata\n\n"
)
EXPECTED = [
    ("1", "ready", '{"session":7}'),
    ("2", "assistant_chunk", '{"text":"h\u00e9llo \u2603"}'),
    ("3", "tool_call", "line one\nline two"),
    ("3", "message", "no space after the colon"),
    ("4", "closed", ""),
]


def _events(parser, pieces):
    return [(e.id, e.type, e.data) for piece in pieces for e in parser.feed(piece)]


def test_the_parser_reads_every_line_ending_comments_multi_line_data_and_retry():
    parser = Parser()
    assert _events(parser, [STREAM.encode()]) == EXPECTED
    assert parser.retry_ms == 1500 and parser.last_id == "4"


def test_the_parser_gives_the_same_events_however_the_bytes_are_split():
    data = STREAM.encode()
    assert _events(Parser(), [data[i : i + 1] for i in range(len(data))]) == EXPECTED
    for cut in range(1, len(data)):
        assert _events(Parser(), [data[:cut], data[cut:]]) == EXPECTED, f"split at byte {cut}"


def test_an_event_is_dispatched_only_at_its_blank_line_and_decodes_as_json():
    parser = Parser()
    assert parser.feed(b'id: 9\nevent: turn_complete\ndata: {"output": "42"}\n') == []
    (event,) = parser.feed(b"\n")
    assert event.number == 9 and event.json() == {"output": "42"}


def test_a_garbled_retry_or_id_is_ignored_not_a_crash():
    parser = Parser()
    (event,) = parser.feed("retry: \u00b2\nid: \u00b2\ndata: x\n\n".encode())
    assert parser.retry_ms is None and event.number is None


class FlakyStream:
    """An event stream that drops the connection after its first events (mid-frame), and
    on reconnection resends from one before the Last-Event-ID it is given (an overlap a
    client must not hand on twice)."""

    def __init__(self):
        self.events = [(n, "assistant_chunk", {"text": f"piece {n}"}) for n in range(1, 7)]
        self.last_event_ids: list[str | None] = []
        self.status = 200
        self.connections = 0

    def frame(self, number):
        _, kind, data = self.events[number - 1]
        return f"id: {number}\nevent: {kind}\ndata: {json.dumps(data)}\n\n".encode()


@pytest.fixture
def flaky():
    state = FlakyStream()
    hold = threading.Event()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def do_GET(self):  # noqa: N802
            state.connections += 1
            state.last_event_ids.append(self.headers.get("Last-Event-ID"))
            if state.status != 200:
                body = json.dumps({"error": {"code": "x", "message": "key revoked"}}).encode()
                self.send_response(state.status)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)
                return
            self.send_response(200)
            self.send_header("Content-Type", "text/event-stream")
            self.send_header("Transfer-Encoding", "chunked")
            self.end_headers()

            def chunk(data: bytes):
                self.wfile.write(f"{len(data):x}\r\n".encode() + data + b"\r\n")
                self.wfile.flush()

            chunk(b"retry: 10\n\n")
            last = int(self.headers.get("Last-Event-ID") or 0)
            if state.connections == 1:
                chunk(state.frame(1) + state.frame(2) + state.frame(3)[:12])  # cut inside event 3
                self.close_connection = True
                return  # no terminating chunk: the connection just ends
            chunk(b"".join(state.frame(n) for n in range(max(last, 1), len(state.events) + 1)))
            hold.wait(30)  # then stays open, as a live stream does

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}/events/"
    yield state
    hold.set()
    server.shutdown()


def _collect(url, *, count, last_id=0):
    received: queue.Queue = queue.Queue()
    subscription = Subscription(
        requests.Session(), url, deliver=received.put, fail=received.put, last_id=last_id
    ).start()
    items = []
    try:
        while len(items) < count:
            items.append(received.get(timeout=30))
    finally:
        subscription.stop()
    return items, received


def test_a_dropped_stream_reconnects_with_last_event_id_and_nothing_comes_twice(flaky):
    items, rest = _collect(flaky.url, count=6)
    assert [event.number for event in items] == [1, 2, 3, 4, 5, 6]
    assert [event.json()["text"] for event in items] == [f"piece {n}" for n in range(1, 7)]
    assert flaky.last_event_ids[:2] == [None, "2"]
    assert rest.empty()


def test_a_subscription_starts_after_the_id_it_is_given(flaky):
    flaky.connections = 1  # no drop: the stream as a second connection serves it
    items, _rest = _collect(flaky.url, count=2, last_id=4)
    assert [event.number for event in items] == [5, 6] and flaky.last_event_ids == ["4"]


def test_a_refused_stream_is_reported_once_and_not_retried(flaky):
    flaky.status = 401
    items, rest = _collect(flaky.url, count=1)
    assert isinstance(items[0], StreamRefused)
    assert items[0].status == 401 and items[0].message == "key revoked"
    assert flaky.connections == 1 and rest.empty()
