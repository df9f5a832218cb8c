"""The durable event streams of sessions and executed runs (docs/sessions.md).

Every change of a session or an executed run (a turn starting, a piece of the answer,
a tool call, an approval, a turn's end...) is appended here as a ``StreamEvent`` with
an id that is the next number of its stream: a session's turns number their events in
the session's stream (the rows name the run too, so a run's stream is the same rows);
a run outside a session numbers its own. The number is taken with an ``UPDATE ...
RETURNING`` of the stream's row (the session, or the run), which holds that row's lock
until the transaction commits: the next event of the stream can only be numbered once
this one is committed (or rolled back, and its number taken again). Committed ids are
therefore 1, 2, 3... in commit order, and a reader that asks for ``id > last`` never
skips an event still being written, nor sees one twice, whichever process wrote it.

Once the transaction commits, a notification (the stream's key and the id) is published
on Redis for the Server-Sent Events streams to read the new rows (``runs.sse``).
Locks are taken run first, then session, everywhere (see runs.services.sessions).
"""

from __future__ import annotations

import logging
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agentops.outages import log_degraded
from agentops.redis_clients import shared_redis
from runs.models import StreamEvent

logger = logging.getLogger(__name__)

# The event types (docs/sessions.md lists their data).
TYPES = frozenset(
    {
        "ready",
        "queued",
        "processing",
        "assistant_chunk",
        "tool_call",
        "tool_output",
        "approval_required",
        "approval_decided",
        "approve_all",
        "repeated_action",
        "turn_complete",
        "error",
        "interrupted",
        "compacted",
        "undone",
        "closed",
    }
)


def channel(kind: str, object_id: int) -> str:
    """The Redis pub/sub channel announcing new events of a session's or a run's stream."""
    return f"{settings.REDIS_KEY_PREFIX}:events:{kind}:{int(object_id)}"


# The stream's next number and the event with it, in one statement (the UPDATE locks the
# stream's row until commit).
_APPEND_TO_SESSION = (
    "WITH numbered AS (UPDATE runs_session SET event_seq = event_seq + 1, updated_at = %s WHERE id = %s "
    "RETURNING event_seq) "
    "INSERT INTO runs_streamevent (organization_id, project_id, session_id, run_id, seq, type, data, created_at) "
    "SELECT %s, %s, %s, %s, event_seq, %s, %s, %s FROM numbered RETURNING id, seq"
)
_APPEND_TO_RUN = (
    "WITH numbered AS (UPDATE runs_run SET event_seq = event_seq + 1 WHERE id = %s RETURNING event_seq) "
    "INSERT INTO runs_streamevent (organization_id, project_id, session_id, run_id, seq, type, data, created_at) "
    "SELECT %s, %s, %s, %s, event_seq, %s, %s, %s FROM numbered RETURNING id, seq"
)


def event_append(*, type: str, data: dict[str, Any] | None = None, run=None, session=None) -> StreamEvent:
    """Append an event to the stream of ``session``, or of ``run`` (its session's when it
    is a turn). Call it last in a transaction that takes other row locks (it locks the
    stream's row until commit)."""
    if type not in TYPES:
        raise ValueError(f"unknown event type {type!r}")
    session_id = session.pk if session is not None else getattr(run, "agent_session_id", None)
    owner = session if session is not None else run
    # No savepoint inside a caller's transaction (two more statements per event): an error
    # here fails the caller's whole transaction, and no caller carries on after one. The
    # number is taken and the event inserted in one statement.
    if session_id is not None:
        statement, numbering_params = _APPEND_TO_SESSION, [timezone.now(), session_id]
    else:
        statement, numbering_params = _APPEND_TO_RUN, [run.pk]
    event = StreamEvent(
        organization_id=owner.organization_id,
        project_id=owner.project_id,
        session_id=session_id,
        run=run,
        type=type,
        data=data or {},
        created_at=timezone.now(),
    )
    data_field = StreamEvent._meta.get_field("data")
    with transaction.atomic(savepoint=False), connection.cursor() as cursor:
        cursor.execute(
            statement,
            [
                *numbering_params,
                event.organization_id,
                event.project_id,
                session_id,
                run.pk if run is not None else None,
                type,
                data_field.get_db_prep_save(event.data, connection),
                event.created_at,
            ],
        )
        row = cursor.fetchone()
        if row is None:
            raise StreamEvent.DoesNotExist(f"no stream to append to: {'session' if session_id else 'run'} is gone")
        event.pk, event.seq = row
        event._state.adding = False
        seq = event.seq
        channels = [channel("session", session_id)] if session_id is not None else []
        if run is not None:
            channels.append(channel("run", run.pk))
        transaction.on_commit(lambda: _notify(channels, seq))
    return event


def _notify(channels: list[str], seq: int) -> None:
    """Tell the event streams that new events are stored (best effort: a stream also
    reads PostgreSQL at every heartbeat)."""
    try:
        pipeline = _redis().pipeline(transaction=False)
        for name in channels:
            pipeline.publish(name, str(seq))
        pipeline.execute()
    except Exception as exc:  # noqa: BLE001 - the events are stored; readers poll too
        log_degraded(logger, "new events are not announced", exc)


def _redis():
    return shared_redis(settings.REDIS_URL)


def events_after(*, session=None, run=None, after: int = 0, limit: int = 500) -> list[StreamEvent]:
    """The events of the stream of ``session`` (or of ``run``) with an id above ``after``,
    in order. Call inside the organization's scope."""
    queryset = (
        StreamEvent.objects.filter(session=session) if session is not None else StreamEvent.objects.filter(run=run)
    )
    return list(queryset.filter(seq__gt=after).order_by("seq")[:limit])


class ChunkBuffer:
    """The streamed text of one model call, stored as ``assistant_chunk`` events at most
    one per ``interval`` seconds (not one per token); ``flush`` stores the rest."""

    def __init__(self, run, step: int, interval: float | None = None):
        self.run, self.step = run, step
        self.interval = settings.EVENT_CHUNK_SECONDS if interval is None else interval
        self.pieces: list[str] = []
        self.last = 0.0

    def write(self, piece: str, now: float) -> None:
        if piece:
            self.pieces.append(piece)
        if self.pieces and now - self.last >= self.interval:
            self.flush(now)

    def flush(self, now: float = 0.0) -> None:
        if not self.pieces:
            return
        text, self.pieces, self.last = "".join(self.pieces), [], now
        event_append(run=self.run, type="assistant_chunk", data={"run": self.run.pk, "step": self.step, "text": text})
