"""Live fan-out: one helper that services and tasks call to push an event to the
open pages of a project or organization, over the Channels layer.

Live updates are a convenience, never the source of truth: a page that reconnects
re-renders from PostgreSQL. Events carry HTML fragments with ``hx-swap-oob`` (htmx's
ws extension swaps them by id) and/or JSON data.
"""

from __future__ import annotations

import logging
import time

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from agentops.outages import log_degraded

logger = logging.getLogger(__name__)


def project_group(project_id: int) -> str:
    return f"project.{project_id}"


def organization_group(organization_id: int) -> str:
    return f"organization.{organization_id}"


def _message(event: str, html: str, data: dict | None) -> dict:
    return {"type": "live.event", "event": event, "html": html, "data": data or {}}


def announce(*, project=None, organization=None, event: str, html: str = "", data: dict | None = None) -> None:
    """Send ``event`` to every open page of ``project`` (or of ``organization``).

    Callable from sync code (services, Celery tasks). Use ``announce_async`` from a
    running event loop. A failure to deliver is logged, never raised: the change it
    announces is already stored, and pages re-render from the database.
    """
    group = project_group(project.pk) if project is not None else organization_group(organization.pk)
    try:
        async_to_sync(get_channel_layer().group_send)(group, _message(event, html, data))
    except RedisError as exc:  # Redis is down: every announce would say so
        log_degraded(logger, "live updates are not sent", exc)
    except Exception:  # noqa: BLE001 - live updates are best effort by design
        logger.warning("could not announce %s to %s", event, group, exc_info=True)


_redis_client = None


def _redis():
    """A synchronous client of the channel layer's Redis, kept for the process: asking
    through the async layer would cost an event loop and a new connection per call."""
    global _redis_client
    if _redis_client is None:
        import redis

        _redis_client = redis.Redis.from_url(settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0])
    return _redis_client


def has_listeners(*, project=None, organization=None) -> bool:
    """Whether any page of ``project`` (or ``organization``) is open right now, so a
    caller can skip rendering an update nobody would see (ingestion at full speed).

    Reads the channels_redis group directly (a sorted set of channel names scored by
    the time they joined); this leans on channels_redis 4.3 internals, which the pinned
    version and tests/agentops/test_live.py hold in place. Answers True when unsure, and
    False while that Redis refuses connections."""
    group = project_group(project.pk) if project is not None else organization_group(organization.pk)
    known = _listeners_seen.get(group)
    if known is not None and time.monotonic() - known[0] < settings.LIVE_LISTENERS_CACHE_SECONDS:
        return known[1]
    layer = get_channel_layer()
    if not hasattr(layer, "_group_key") or len(getattr(layer, "hosts", [None])) != 1:
        return True
    try:
        listening = _redis().zcount(layer._group_key(group), time.time() - layer.group_expiry, "+inf") > 0
    except RedisConnectionError as exc:
        # No page can receive anything while the layer's Redis is down: skip the rendering.
        log_degraded(logger, "live updates are not sent", exc)
        return False
    except Exception:  # noqa: BLE001 - unsure means announce
        logger.warning("could not count the listeners of %s", group, exc_info=True)
        return True
    _listeners_seen[group] = (time.monotonic(), listening)
    return listening


# has_listeners' answers per group, kept settings.LIVE_LISTENERS_CACHE_SECONDS.
_listeners_seen: dict[str, tuple[float, bool]] = {}


async def announce_async(*, project=None, organization=None, event: str, html: str = "", data: dict | None = None):
    group = project_group(project.pk) if project is not None else organization_group(organization.pk)
    await get_channel_layer().group_send(group, _message(event, html, data))
