"""Logging while PostgreSQL or Redis is unreachable: one line per refused request, with
the reason, and the traceback only on the first failure of an outage (then at most once
every TRACEBACK_EVERY_SECONDS per process and per server), so an outage under load does
not bury the log in identical tracebacks (20 requests a second used to write 400 of
them in 10 seconds).

Three ways in, sharing one clock:
- ``log_refusal`` for the handlers that answer 503 themselves (the API's exception
  handler, batch and OTLP ingestion); they mark their response as logged, so Django's
  "Service Unavailable: /path" line does not double it;
- ``log_degraded`` for what goes on without the server (rate limits while Redis is
  down): one line when it starts, then at most one a minute;
- ``OutageLogFilter`` on the console handler (settings.LOGGING) for every other record
  that carries such an error, a page's 500 logged by Django included.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import InterfaceError, OperationalError
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import RedisError

# Celery's broker (Redis) raises kombu's OperationalError when it cannot publish.
UNAVAILABLE_ERRORS = (OperationalError, InterfaceError, RedisError, BrokerError)
TRACEBACK_EVERY_SECONDS = 60.0

_lock = threading.Lock()
_last_traceback: dict[str, float] = {}  # server -> when its last traceback was logged


def _unavailable(exc: BaseException | None) -> BaseException | None:
    """``exc`` or the error it was raised from, when it says a server is unreachable."""
    seen = 0
    while exc is not None and seen < 5:
        if isinstance(exc, UNAVAILABLE_ERRORS):
            return exc
        exc, seen = exc.__cause__ or exc.__context__, seen + 1
    return None


def _server(exc: BaseException) -> str:
    return "Redis" if isinstance(exc, (RedisError, BrokerError)) else "PostgreSQL"


def reason(exc: BaseException) -> str:
    """One line: which server, and what its client said."""
    message = " ".join(str(exc).split()) or type(exc).__name__
    return f"{_server(exc)} unavailable ({type(exc).__name__}: {message[:300]})"


def _first_of_outage(exc: BaseException, topic: str = "") -> bool:
    """Whether this failure gets the traceback (the first one in a while for its server)."""
    now = time.monotonic()
    key = f"{topic}:{_server(exc)}"
    with _lock:
        last = _last_traceback.get(key)
        if last is not None and now - last < TRACEBACK_EVERY_SECONDS:
            return False
        _last_traceback[key] = now
        return True


def log_refusal(logger: logging.Logger, what: str, exc: BaseException) -> None:
    """Log that ``what`` was refused because of ``exc``: one line with the reason."""
    traceback = exc if _first_of_outage(exc) else None
    # Marked, so OutageLogFilter leaves this record as it is.
    logger.warning("%s: %s", what, reason(exc), exc_info=traceback, extra={"_outage_reason": True})


def log_degraded(logger: logging.Logger, what: str, exc: BaseException) -> None:
    """Log that ``what`` is skipped while a server is unreachable, and the request goes
    on without it (rate limits, live updates): one line when it starts, then at most one
    every TRACEBACK_EVERY_SECONDS, since every request would say the same."""
    if _first_of_outage(exc, topic=what):
        logger.warning("%s: %s", what, reason(exc), extra={"_outage_reason": True})


class OutageLogFilter(logging.Filter):
    """Turns a record whose traceback is an unreachable server's into one line with the
    reason, keeping the traceback for the first of an outage."""

    def filter(self, record: logging.LogRecord) -> bool:
        if not record.exc_info or record.exc_info[1] is None:
            return True
        exc = _unavailable(record.exc_info[1])
        if exc is None:
            return True
        if getattr(record, "_outage_reason", None) is None:
            record.msg, record.args = f"{record.getMessage()}: {reason(exc)}", None
            record._outage_reason = True
            if not _first_of_outage(exc):
                record.exc_info, record.exc_text = None, None
        return True
