"""Server-Sent Events over ``requests`` (only the standard library and ``requests``).

``Parser`` turns the bytes of a ``text/event-stream`` into events, as the HTML standard
says (https://html.spec.whatwg.org/multipage/server-sent-events.html#event-stream-interpretation):
lines end with CRLF, LF or CR; ``:`` starts a comment; ``data`` lines join with LF; an
empty line dispatches; ``id`` is remembered for ``Last-Event-ID``; ``retry`` sets the
reconnection delay. ``Subscription`` follows one stream for as long as asked: it
reconnects after a dropped connection with the last id it has as ``Last-Event-ID`` and
never hands on an event twice (the platform numbers a stream's events 1, 2, 3...).
"""

from __future__ import annotations

import codecs
import json
import threading
from dataclasses import dataclass
from typing import Any

import requests

#: (connect, read) timeout. The platform sends a heartbeat every 15 s on an idle stream,
#: so a read that waits longer than this is a connection that died without a word.
STREAM_TIMEOUT = (10.0, 45.0)
#: Reconnection delay when the server gave none (milliseconds), and the longest one.
DEFAULT_RETRY_MS = 3000
MAX_RETRY_MS = 30_000


@dataclass
class Event:
    """One dispatched event. ``data`` is the text; ``json()`` decodes it."""

    type: str = "message"
    data: str = ""
    id: str | None = None

    def json(self) -> Any:
        try:
            return json.loads(self.data) if self.data else {}
        except ValueError:
            return {"text": self.data}

    @property
    def number(self) -> int | None:
        """The id as a number (the platform's ids are), None when it is not one."""
        return int(self.id) if self.id is not None and self.id.isascii() and self.id.isdigit() else None


class Parser:
    """Incremental: ``feed`` any piece of the stream, get the events it completed."""

    def __init__(self):
        self.last_id: str | None = None
        self.retry_ms: int | None = None
        self._decoder = codecs.getincrementaldecoder("utf-8")("replace")
        self._buffer = ""
        self._pending_cr = False
        self._type = ""
        self._data: list[str] = []
        self._has_data = False
        self._first = True

    def feed(self, chunk: bytes | str) -> list[Event]:
        text = self._decoder.decode(chunk) if isinstance(chunk, bytes) else chunk
        if self._first and text:
            self._first = False
            text = text.removeprefix("\ufeff")
        if self._pending_cr and text.startswith("\n"):
            text = text[1:]  # the LF of a CRLF split between two pieces
        self._pending_cr = False
        self._buffer += text
        events: list[Event] = []
        while True:
            ends = [i for i in (self._buffer.find("\r"), self._buffer.find("\n")) if i >= 0]
            if not ends:
                break
            end = min(ends)
            line = self._buffer[:end]
            if self._buffer[end] == "\r":
                if end + 1 == len(self._buffer):
                    self._pending_cr = True  # may be the first half of a CRLF
                    self._buffer = ""
                elif self._buffer[end + 1] == "\n":
                    self._buffer = self._buffer[end + 2 :]
                else:
                    self._buffer = self._buffer[end + 1 :]
            else:
                self._buffer = self._buffer[end + 1 :]
            event = self._line(line)
            if event is not None:
                events.append(event)
        return events

    def _line(self, line: str) -> Event | None:
        if line == "":
            return self._dispatch()
        if line.startswith(":"):
            return None  # a comment: the heartbeats
        name, colon, value = line.partition(":")
        if colon and value.startswith(" "):
            value = value[1:]
        if name == "event":
            self._type = value
        elif name == "data":
            self._data.append(value)
            self._has_data = True
        elif name == "id":
            if "\0" not in value:
                self.last_id = value
        elif name == "retry":
            # ASCII digits only, as the specification says: str.isdigit() alone also
            # takes "²", which int() refuses (a garbled stream stopped the client).
            if value.isascii() and value.isdigit():
                self.retry_ms = int(value)
        return None

    def _dispatch(self) -> Event | None:
        event = None
        if self._has_data:
            event = Event(type=self._type or "message", data="\n".join(self._data), id=self.last_id)
        self._type, self._data, self._has_data = "", [], False
        return event


class StreamRefused(Exception):
    """The server refused the stream for good (401, 403, 404, 400): its message."""

    def __init__(self, status: int, message: str):
        super().__init__(message)
        self.status = status
        self.message = message


class Subscription:
    """Follow one event stream (``url``) with ``session`` (its auth and headers), calling
    ``deliver(event)`` for each new event and ``fail(StreamRefused)`` once if the server
    refuses it. ``last_id``: start after this event. Runs in a daemon thread (``start``);
    ``stop`` ends it."""

    def __init__(self, session: requests.Session, url: str, *, deliver, fail, last_id: int = 0, log=None):
        self.session = session
        self.url = url
        self.deliver = deliver
        self.fail = fail
        self.last_id = last_id
        self.log = log or (lambda message: None)
        self.retry_ms = DEFAULT_RETRY_MS
        self.connections = 0
        self._stopped = threading.Event()
        self._thread = threading.Thread(target=self._follow, name="agentops-events", daemon=True)

    def start(self) -> Subscription:
        self._thread.start()
        return self

    def stop(self) -> None:
        """Hand on nothing more. The thread ends at the connection's next bytes (a heartbeat
        at the latest); closing the response from here would wait for its reading thread."""
        self._stopped.set()

    def _follow(self) -> None:
        failures = 0
        while not self._stopped.is_set():
            try:
                received = self._connect_once()
            except StreamRefused as refused:
                if not self._stopped.is_set():
                    self.fail(refused)
                return
            except (requests.RequestException, OSError) as exc:  # dropped, reset, timed out
                received = False
                if not self._stopped.is_set():
                    self.log(f"the event stream was cut ({type(exc).__name__}); reconnecting")
            failures = 0 if received else failures + 1
            delay = min(self.retry_ms * (2 ** max(failures - 1, 0)), MAX_RETRY_MS) / 1000
            self._stopped.wait(delay)

    def _connect_once(self) -> bool:
        """One connection: hand on the events after ``last_id`` until it ends. True when it
        delivered anything (the next reconnection then waits only the server's delay)."""
        headers = {"Accept": "text/event-stream", "Cache-Control": "no-cache"}
        if self.last_id:
            headers["Last-Event-ID"] = str(self.last_id)
        response = self.session.get(
            self.url, headers=headers, stream=True, timeout=STREAM_TIMEOUT, allow_redirects=False
        )
        self.connections += 1
        delivered = False
        try:
            if response.status_code != 200:
                message = _error_message(response)
                if response.status_code in (400, 401, 403, 404, 405) or 300 <= response.status_code < 400:
                    raise StreamRefused(response.status_code, message)
                self.log(f"the event stream answered {response.status_code} ({message}); reconnecting")
                return False
            parser = Parser()
            for chunk in response.iter_content(chunk_size=None):
                if self._stopped.is_set():
                    return delivered
                for event in parser.feed(chunk):
                    number = event.number
                    if number is not None and number <= self.last_id:
                        continue  # already handed on before a reconnection
                    if number is not None:
                        self.last_id = number
                    delivered = True
                    self.deliver(event)
                if parser.retry_ms is not None:
                    self.retry_ms = min(parser.retry_ms, MAX_RETRY_MS)
            return delivered
        finally:
            response.close()


def _error_message(response: requests.Response) -> str:
    try:
        body = response.json()
        message = body["error"]["message"]
        if isinstance(message, str) and message:
            return message
    except (ValueError, KeyError, TypeError):
        pass
    return " ".join((response.text or response.reason or "").split())[:200] or f"HTTP {response.status_code}"
