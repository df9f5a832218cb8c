"""Sending Celery work once the current transaction commits, for work a periodic sweeper
finds again in the database (a queued run, experiment, job or export).

The record is the request's: it is committed before the message is sent, so a broker
that is down (Redis stopped) must not turn the accepted request into a 500 after the
fact. The message is then skipped with one log line (``outages.log_degraded``), and the
sweeper of the beat schedule sends it once Redis is back; the client got its 2xx and
its record.
"""

from __future__ import annotations

import logging

from django.db import transaction
from kombu.exceptions import OperationalError as BrokerError
from redis.exceptions import RedisError

from agentops.outages import log_degraded

logger = logging.getLogger(__name__)

BROKER_ERRORS = (BrokerError, RedisError)


def send_after_commit(task, *args, countdown: float | None = None) -> None:
    """Send ``task(*args)`` after commit; while the broker is unreachable, log and leave
    it to the task's sweeper (only for work one picks up)."""
    transaction.on_commit(lambda: send_or_leave_to_sweeper(task, *args, countdown=countdown))


def send_or_leave_to_sweeper(task, *args, countdown: float | None = None) -> None:
    """Send ``task(*args)`` now; while the broker is unreachable, log and leave it to the
    task's sweeper."""
    try:
        task.apply_async(args, countdown=countdown)
    except BROKER_ERRORS as exc:
        log_degraded(logger, f"queueing {task.name} (a sweeper sends it once Redis is back)", exc)
