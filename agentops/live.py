"""Live fan-out: the one way services and tasks push an event to open pages, over the
Channels layer, and the one place Channels group names are made.

Live updates are a convenience, never the source of truth: a page that reconnects
re-renders from PostgreSQL. Events carry HTML fragments with ``hx-swap-oob`` (htmx's
ws extension swaps them by id) and/or JSON data.

Who hears what. A page's socket names the **topics** it shows (``?topics=`` on the
socket URL, built by ``live_path``), and an event goes to one group:

- ``organization.<id>``: every open page of the organization (the top bar's name);
- ``project.<id>``: every open page of the project (the top bar's name);
- ``organization.<id>.<kind>`` / ``project.<id>.<kind>[.<object id>]``: the pages
  that show that topic (``TOPICS`` below), e.g. ``project.3.run.12`` for run 12's page;
- ``user.<id>``: never an event, only ``access.changed``, which makes each open
  socket of that user check its access again (``access_changed``).

The consumer (``agentops/consumers.py``) joins a topic's group only when the user holds
the topic's permission, and checks again when told and every
``LIVE_RECHECK_SECONDS``, so a removed member's socket closes and a downgraded one
leaves what it may no longer read.
"""

from __future__ import annotations

import logging
import re
import time
from collections.abc import Iterable
from dataclasses import dataclass

from asgiref.sync import async_to_sync
from channels.layers import get_channel_layer
from django.conf import settings
from redis.exceptions import ConnectionError as RedisConnectionError
from redis.exceptions import RedisError

from agentops.outages import log_degraded
from agentops.redis_clients import shared_redis

logger = logging.getLogger(__name__)


@dataclass(frozen=True)
class TopicKind:
    """What a page may subscribe to: at which level, with which permission, and whether
    the topic names one object (``run:12``) or a part of the level (``runs``)."""

    level: str  # "organization" or "project"
    permission: str
    takes_id: bool


# kind -> what it is. Each kind is one part of a page that live events update, so a
# page receives only fragments it has a place for (htmx logs oobErrorNoTarget for the rest).
TOPICS: dict[str, TopicKind] = {
    # The billing page's alerts. The same permission as the billing page
    # (billing/views.py BillingIndexPage): viewers and members never hear of budgets.
    "billing": TopicKind("organization", "billing:read", takes_id=False),
    # The runs list that takes new runs at its top (unfiltered, default order, first page).
    "runs": TopicKind("project", "work:read", takes_id=False),
    # The runs lists that cannot place new runs and offer a reload instead.
    "runs-notice": TopicKind("project", "work:read", takes_id=False),
    # One run's row, in a list that shows it.
    "run-row": TopicKind("project", "work:read", takes_id=True),
    # One run's page (its header, open tab and the model's answer as it streams).
    "run": TopicKind("project", "work:read", takes_id=True),
    # One experiment's page: its progress block.
    "experiment": TopicKind("project", "work:read", takes_id=True),
    # One result row of an experiment's page (a page shows one page of results).
    "experiment-result": TopicKind("project", "work:read", takes_id=True),
    # One job's page: its status block and log tail.
    "job": TopicKind("project", "work:read", takes_id=True),
    # One job's row, in the jobs list.
    "job-row": TopicKind("project", "work:read", takes_id=True),
}

# A page names at most this many topics (a runs list: its 50 rows and the list itself).
MAX_TOPICS = 250
_TOPIC = re.compile(r"^(?P<kind>[a-z-]+)(?::(?P<id>[1-9][0-9]{0,17}))?$")


def topic(kind: str, object_id: int | None = None) -> str:
    """The topic string of ``kind`` (and object ``object_id``): ``"runs"``, ``"run:12"``."""
    spec = TOPICS[kind]
    if spec.takes_id != (object_id is not None):
        raise ValueError(f"topic {kind} {'needs' if spec.takes_id else 'takes no'} object id")
    return kind if object_id is None else f"{kind}:{int(object_id)}"


def parse_topics(raw: str, *, level: str) -> list[str]:
    """The topics of a socket URL's ``topics`` parameter (``runs,run-row:1.2.3``), checked
    against ``TOPICS`` for a socket at ``level``. Raises ValueError naming what is wrong."""
    topics: list[str] = []
    for part in filter(None, raw.split(",")):
        kind, _, ids = part.partition(":")
        spec = TOPICS.get(kind)
        if spec is None:
            raise ValueError(f"unknown topic '{kind}'")
        if spec.level == "project" and level != "project":
            raise ValueError(f"topic '{kind}' belongs to a project's socket")
        if spec.takes_id != bool(ids):
            raise ValueError(f"topic '{kind}' {'needs' if spec.takes_id else 'takes no'} object ids")
        for object_id in ids.split(".") if ids else [None]:
            name = kind if object_id is None else f"{kind}:{object_id}"
            if not _TOPIC.match(name):
                raise ValueError(f"malformed topic '{name}'")
            if name not in topics:
                topics.append(name)
    if len(topics) > MAX_TOPICS:
        raise ValueError(f"at most {MAX_TOPICS} topics per socket")
    return topics


def live_path(*, org_slug: str, project_slug: str | None = None, topics: Iterable[str] = ()) -> str:
    """The socket URL of a page that shows ``topics`` (ids of one kind joined by dots,
    so a list of fifty rows stays a short URL)."""
    path = f"/ws/o/{org_slug}/" if project_slug is None else f"/ws/o/{org_slug}/p/{project_slug}/"
    by_kind: dict[str, list[str]] = {}
    for name in topics:
        kind, _, object_id = name.partition(":")
        ids = by_kind.setdefault(kind, [])
        if object_id and object_id not in ids:
            ids.append(object_id)
    if not by_kind:
        return path
    return path + "?topics=" + ",".join(f"{kind}:{'.'.join(ids)}" if ids else kind for kind, ids in by_kind.items())


def group_name(
    *,
    organization_id: int | None = None,
    project_id: int | None = None,
    topic: str | None = None,
    user_id: int | None = None,
) -> str:
    """The Channels group of an organization, a project, one of their topics, or a user.
    The only place group names are made (Channels allows letters, digits, ``-_.``)."""
    if user_id is not None:
        return f"user.{int(user_id)}"
    base = f"project.{int(project_id)}" if project_id is not None else f"organization.{int(organization_id)}"
    if topic is None:
        return base
    spec = TOPICS[topic.partition(":")[0]]
    if (spec.level == "project") != (project_id is not None):
        raise ValueError(f"topic {topic} belongs to a {spec.level}")
    return f"{base}.{topic.replace(':', '.')}"


def project_group(project_id: int) -> str:
    return group_name(project_id=project_id)


def organization_group(organization_id: int) -> str:
    return group_name(organization_id=organization_id)


def _group(*, project=None, organization=None, topic: str | None = None) -> str:
    if project is not None:
        return group_name(project_id=project.pk, topic=topic)
    return group_name(organization_id=organization.pk, topic=topic)


def _message(group: str, event: str, html: str, data: dict | None, follow: Iterable[str]) -> dict:
    # ``group`` lets the consumer drop an event of a group it has just left; ``follow``
    # names topics the page shows once it has this fragment (new rows of a list).
    return {
        "type": "live.event",
        "group": group,
        "event": event,
        "html": html,
        "data": data or {},
        "follow": list(follow),
    }


def announce(
    *,
    project=None,
    organization=None,
    topic: str | None = None,
    event: str,
    html: str = "",
    data: dict | None = None,
    follow: Iterable[str] = (),
) -> None:
    """Send ``event`` to the open pages of ``project`` (or of ``organization``) that show
    ``topic``, or to all of them without one (then it must be fit for every member).

    Callable from sync code (services, Celery tasks). Use ``announce_async`` from a
    running event loop. A failure to deliver is logged, never raised: the change it
    announces is already stored, and pages re-render from the database.
    """
    group = _group(project=project, organization=organization, topic=topic)
    try:
        async_to_sync(get_channel_layer().group_send)(group, _message(group, event, html, data, follow))
    except RedisError as exc:  # Redis is down: every announce would say so
        log_degraded(logger, "live updates are not sent", exc)
    except Exception:  # noqa: BLE001 - live updates are best effort by design
        logger.warning("could not announce %s to %s", event, group, exc_info=True)


async def announce_async(
    *,
    project=None,
    organization=None,
    topic: str | None = None,
    event: str,
    html: str = "",
    data: dict | None = None,
    follow: Iterable[str] = (),
):
    group = _group(project=project, organization=organization, topic=topic)
    await get_channel_layer().group_send(group, _message(group, event, html, data, follow))


def access_changed(user_ids: Iterable[int]) -> None:
    """Tell every open socket of these users to check their access again now (a role
    changed, a membership or project went away). Call after the change is committed;
    best effort like every live message, with the consumers' periodic check behind it."""
    layer = get_channel_layer()
    for user_id in set(user_ids):
        group = group_name(user_id=user_id)
        try:
            async_to_sync(layer.group_send)(group, {"type": "access.changed"})
        except Exception:  # noqa: BLE001 - the periodic re-check still catches it
            logger.warning("could not tell %s its access changed", group, exc_info=True)


def _redis():
    """A synchronous client of the channel layer's Redis, the process's
    (``agentops.redis_clients``): asking through the async layer would cost an event
    loop and a new connection per call."""
    return shared_redis(settings.CHANNEL_LAYERS["default"]["CONFIG"]["hosts"][0])


def has_listeners(*, project=None, organization=None, topic: str | None = None) -> bool:
    """Whether any page of ``project`` (or ``organization``) showing ``topic`` (any page,
    without one) is open right now, so a caller can skip rendering an update nobody
    would see (ingestion at full speed)."""
    return bool(listening([_group(project=project, organization=organization, topic=topic)]))


def listening_topics(*, project=None, organization=None, topics: Iterable[str]) -> set[str]:
    """Which of ``topics`` (of ``project`` or ``organization``) some open page shows,
    asked in one round trip to Redis."""
    by_group = {_group(project=project, organization=organization, topic=name): name for name in topics}
    return {by_group[group] for group in listening(list(by_group))}


def listening(groups: list[str]) -> set[str]:
    """The groups of ``groups`` with a live member.

    Reads the channels_redis groups directly (sorted sets of channel names scored by
    the time they joined); this leans on channels_redis 4.3 internals, which the pinned
    version and tests/agentops/test_live.py hold in place. Counts a group as listening
    when unsure, and none while that Redis refuses connections. Answers are kept
    settings.LIVE_LISTENERS_CACHE_SECONDS per group."""
    now = time.monotonic()
    answer: set[str] = set()
    unknown: list[str] = []
    for group in groups:
        known = _listeners_seen.get(group)
        if known is not None and now - known[0] < settings.LIVE_LISTENERS_CACHE_SECONDS:
            if known[1]:
                answer.add(group)
        else:
            unknown.append(group)
    if not unknown:
        return answer
    layer = get_channel_layer()
    if not hasattr(layer, "_group_key") or len(getattr(layer, "hosts", [None])) != 1:
        return answer | set(unknown)
    try:
        pipeline = _redis().pipeline(transaction=False)
        for group in unknown:
            pipeline.zcount(layer._group_key(group), time.time() - layer.group_expiry, "+inf")
        counts = pipeline.execute()
    except RedisConnectionError as exc:
        # No page can receive anything while the layer's Redis is down: skip the rendering.
        log_degraded(logger, "live updates are not sent", exc)
        return set()
    except Exception:  # noqa: BLE001 - unsure means announce
        logger.warning("could not count the listeners of %d groups", len(unknown), exc_info=True)
        return answer | set(unknown)
    if len(_listeners_seen) > MAX_GROUPS_REMEMBERED:
        _listeners_seen.clear()  # per-run groups come and go: keep the memory bounded
    for group, count in zip(unknown, counts, strict=True):
        _listeners_seen[group] = (now, count > 0)
        if count > 0:
            answer.add(group)
    return answer


# listening()'s answers per group, kept settings.LIVE_LISTENERS_CACHE_SECONDS.
MAX_GROUPS_REMEMBERED = 10_000
_listeners_seen: dict[str, tuple[float, bool]] = {}
