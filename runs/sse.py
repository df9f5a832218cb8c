"""Server-Sent Events streams of a session's or an executed run's events (docs/sessions.md):
``GET .../agent-sessions/{id}/events/`` and ``GET .../runs/{id}/events/``.

Async views served by the ASGI app: the web process holds no thread per client. Each
process keeps, per event loop, one Redis pub/sub connection (``Hub``) subscribed to the
streams its clients follow; a notification (runs.services.events publishes one per
committed event) wakes the stream's clients, and one of them reads the new rows from
PostgreSQL (``id > the highest read``) for all of them: one query per event whatever
the number of subscribers. A client resuming from further back (``Last-Event-ID``)
reads its own catch-up. Ids of a stream are committed 1, 2, 3... in order (see
runs.services.events), so ``id > last`` is exactly what a client missed. Every
``SSE_HEARTBEAT_SECONDS`` an idle stream sends a comment line and reads PostgreSQL
(a lost notification delays an event by a heartbeat at most).
"""

from __future__ import annotations

import asyncio
import json
import logging
import weakref
from dataclasses import dataclass

from asgiref.sync import sync_to_async
from django.conf import settings
from django.db import close_old_connections
from django.http import JsonResponse, StreamingHttpResponse

from agentops.access import resolve_organization, resolve_project
from agentops.api.errors import error_body
from agentops.errors import NotFound, ServiceError
from agentops.scoping import organization_scope
from agentops.services.api_keys import KeyRejected, api_key_authenticate
from runs.models import Run, Session, StreamEvent
from runs.services.events import channel

logger = logging.getLogger(__name__)

# Frames kept per stream for the clients that follow it live; one further behind reads PostgreSQL.
KEEP_FRAMES = 1000
READ_LIMIT = 500
MAX_EVENT_ID = 10**18


@dataclass(frozen=True)
class Target:
    kind: str  # "session" or "run"
    object_id: int
    organization_id: int


async def session_events(request, org_slug, project_slug, session_id):
    return await _respond(request, org_slug, project_slug, "session", session_id)


async def run_events(request, org_slug, project_slug, run_id):
    return await _respond(request, org_slug, project_slug, "run", run_id)


def _error(exc: ServiceError) -> JsonResponse:
    return JsonResponse(error_body(exc.code, exc.message, exc.details), status=exc.status)


def last_event_id(request) -> int:
    """The id of the last event the client has (``Last-Event-ID`` header, or the
    ``last_event_id`` query parameter for clients that cannot set headers); 0 for none."""
    raw = request.headers.get("Last-Event-ID")
    if raw is None:
        raw = request.GET.get("last_event_id")
    if raw is None or raw.strip() == "":
        return 0
    raw = raw.strip()
    if not raw.isdecimal() or int(raw) > MAX_EVENT_ID:
        raise ServiceError(f"Last-Event-ID must be an event id (a whole number from 0), not {raw[:40]!r}")
    return int(raw)


async def _respond(request, org_slug, project_slug, kind, object_id):
    if request.method != "GET":
        return JsonResponse(error_body("permission_denied", f"{request.method} is not allowed here"), status=405)
    try:
        last = last_event_id(request)
        target = await sync_to_async(_authorize, thread_sensitive=False)(
            request, org_slug, project_slug, kind, object_id
        )
    except ServiceError as exc:
        return _error(exc)
    response = StreamingHttpResponse(_frames(target, last), content_type="text/event-stream")
    response["Cache-Control"] = "no-cache"
    response["X-Accel-Buffering"] = "no"  # nginx: pass each frame on at once
    return response


def _authorize(request, org_slug, project_slug, kind, object_id) -> Target:
    """Who asks (an API key, ``Authorization: Bearer``, or the signed-in user of the
    session cookie) and whether they may read the stream: as every read of the API,
    another organization's or project's object is 404, and a read needs work:read."""
    try:
        header = request.headers.get("Authorization", "")
        if header[:7].lower() == "bearer ":
            try:
                key = api_key_authenticate(header[7:].strip())
            except KeyRejected as exc:
                error = ServiceError(str(exc))
                error.status, error.code = 401, "not_authenticated"
                raise error from None
            access = resolve_organization(org_slug=org_slug, api_key=key)
        else:
            user = request.user
            if not user.is_authenticated:
                error = ServiceError("sign in, or send an API key as 'Authorization: Bearer <key>'")
                error.status, error.code = 401, "not_authenticated"
                raise error
            access = resolve_organization(org_slug=org_slug, user=user)
        access = resolve_project(access, project_slug)
        access.require("work:read", "read events")
        with organization_scope(access.organization):
            model = Session if kind == "session" else Run
            if not model.objects.filter(project=access.project, pk=object_id).exists():
                raise NotFound(f"{kind} not found")
        return Target(kind, int(object_id), access.organization.pk)
    finally:
        close_old_connections()


def _read(target: Target, after: int, limit: int = READ_LIMIT) -> list[tuple[int, bytes]]:
    """The frames of the stream's events with an id above ``after``, in order."""
    try:
        with organization_scope(target.organization_id):
            rows = StreamEvent.objects.filter(**{target.kind: target.object_id}, seq__gt=after).order_by("seq")
            return [_frame(event) for event in rows[:limit]]
    finally:
        close_old_connections()


def _frame(event: StreamEvent) -> tuple[int, bytes]:
    data = json.dumps({**event.data, "at": event.created_at.isoformat()}, default=str, separators=(",", ":"))
    return event.seq, f"id: {event.seq}\nevent: {event.type}\ndata: {data}\n\n".encode()


read_async = sync_to_async(_read, thread_sensitive=False)


class Stream:
    """What one process knows of one stream, shared by its clients: the frames of its
    latest events (all of them above ``floor``, up to ``high``), and the highest id a
    notification announced."""

    def __init__(self, target: Target, name: str):
        self.target, self.name = target, name
        self.waiters: set[asyncio.Event] = set()
        self.frames: list[tuple[int, bytes]] = []
        self.floor: int | None = None  # frames hold every event with floor < id <= high
        self.high = 0
        self.notified = 0
        self.lock = asyncio.Lock()
        self.fetcher: asyncio.Future | None = None

    def notify(self, seq: int) -> None:
        """New events are stored: read them once for every client of the process, then
        wake the clients."""
        self.notified = max(self.notified, seq)
        if self.fetcher is None or self.fetcher.done():
            self.fetcher = asyncio.ensure_future(self._fetch())

    async def _fetch(self) -> None:
        try:
            if self.floor is not None:
                await self.since(self.high)
        except Exception:  # noqa: BLE001 - each client reads for itself then
            logger.warning("could not read the new events of %s", self.name, exc_info=True)
        for waiter in self.waiters:
            waiter.set()

    def _known(self, last: int) -> bool:
        return self.floor is not None and self.floor <= last <= self.high and self.high >= self.notified

    async def since(self, last: int, *, poll: bool = False) -> list[tuple[int, bytes]]:
        """The frames above ``last``: from the shared frames when they reach back that far
        (read once for every client), or PostgreSQL."""
        if not poll and self._known(last):
            return [frame for frame in self.frames if frame[0] > last]
        async with self.lock:
            if self.floor is None:
                frames = await read_async(self.target, last)
                if len(frames) < READ_LIMIT:
                    self.frames, self.floor = frames, last
                    self.high = frames[-1][0] if frames else last
                return frames
            if poll or self.high < self.notified:
                while True:
                    fresh = await read_async(self.target, self.high)
                    if not fresh:
                        break
                    self.frames.extend(fresh)
                    self.high = fresh[-1][0]
                    if len(fresh) < READ_LIMIT:
                        break
                if len(self.frames) > KEEP_FRAMES:
                    dropped = self.frames[: len(self.frames) - KEEP_FRAMES]
                    self.frames = self.frames[len(dropped) :]
                    self.floor = dropped[-1][0]
            if self.floor <= last <= self.high:
                return [frame for frame in self.frames if frame[0] > last]
        return await read_async(self.target, last)  # further back than the shared frames


class Hub:
    """One Redis pub/sub connection of a process (per event loop), subscribed to the
    channels of the streams its clients follow."""

    def __init__(self):
        import redis.asyncio

        self.redis = redis.asyncio.Redis.from_url(settings.REDIS_URL)
        self.pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
        self.streams: dict[str, Stream] = {}
        self.reader: asyncio.Task | None = None

    async def join(self, target: Target) -> tuple[Stream, asyncio.Event]:
        name = channel(target.kind, target.object_id)
        stream = self.streams.get(name)
        if stream is None:
            stream = self.streams[name] = Stream(target, name)
            await self.pubsub.subscribe(name)
        waiter = asyncio.Event()
        stream.waiters.add(waiter)
        if self.reader is None or self.reader.done():
            self.reader = asyncio.create_task(self._read())
        return stream, waiter

    async def leave(self, stream: Stream, waiter: asyncio.Event) -> None:
        stream.waiters.discard(waiter)
        if not stream.waiters and self.streams.get(stream.name) is stream:
            del self.streams[stream.name]
            try:
                await self.pubsub.unsubscribe(stream.name)
            except Exception:  # noqa: BLE001 - the connection is gone: nothing to leave
                logger.debug("could not unsubscribe %s", stream.name, exc_info=True)

    async def _read(self) -> None:
        while self.streams:
            if not self.pubsub.subscribed:  # between the first join and its subscription
                await asyncio.sleep(0.05)
                continue
            try:
                message = await self.pubsub.get_message(timeout=1.0)
            except asyncio.CancelledError:
                raise
            except Exception:  # noqa: BLE001 - Redis is away: the heartbeats' reads go on
                logger.warning("event notifications are not received", exc_info=True)
                await asyncio.sleep(1.0)
                continue
            if message is None or message.get("type") != "message":
                continue
            name = message["channel"].decode()
            stream = self.streams.get(name)
            if stream is not None:
                stream.notify(int(message["data"]))


_hubs: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def hub() -> Hub:
    loop = asyncio.get_running_loop()
    found = _hubs.get(loop)
    if found is None:
        found = _hubs[loop] = Hub()
    return found


async def _frames(target: Target, last: int):
    """The stream's events above ``last`` as they are stored, with heartbeats, until the
    client goes away."""
    events_hub = hub()
    stream, waiter = await events_hub.join(target)
    try:
        yield b"retry: 3000\n\n"
        poll = True
        while True:
            waiter.clear()
            frames = await stream.since(last, poll=poll)
            if frames:
                yield b"".join(frame for _, frame in frames)
                last = frames[-1][0]
                if len(frames) >= READ_LIMIT:
                    poll = True
                    continue
            try:
                await asyncio.wait_for(waiter.wait(), timeout=settings.SSE_HEARTBEAT_SECONDS)
                poll = False
            except TimeoutError:
                yield b": keepalive\n\n"
                poll = True
    finally:
        await events_hub.leave(stream, waiter)
