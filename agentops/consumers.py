"""The WebSocket a project's or organization's pages keep open for live updates."""

from __future__ import annotations

import asyncio
import logging
from urllib.parse import parse_qs

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer
from django.conf import settings
from django.contrib.auth import get_user_model

from agentops import live
from agentops.access import resolve_organization, resolve_project
from agentops.errors import NotFound

logger = logging.getLogger(__name__)

# Close codes (4000-4999 are for applications): "you may not watch this", and a socket
# URL naming topics that do not exist.
CLOSE_FORBIDDEN = 4403
CLOSE_BAD_REQUEST = 4400


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Relays the live events of the topics a page shows to its signed-in member.

    On connect it checks that the user is a member (and the project theirs), then joins
    the organization's group, the project's on a project page, the user's own group, and
    the group of each topic in ``?topics=`` whose permission the user's role holds
    (agentops/live.py ``TOPICS``); anyone else is refused before any group_add. The same
    check runs again when the user's group says their access changed (membership
    services) and every ``LIVE_RECHECK_SECONDS`` (changes made around the services: the
    Django admin, a deactivated user): a socket whose user lost the organization or
    project is closed with 4403, one whose role lost a topic's permission leaves that
    topic's group (and joins it again if the role gets it back)."""

    async def connect(self):
        self.joined: set[str] = set()
        self.recheck_task: asyncio.Task | None = None
        kwargs = self.scope["url_route"]["kwargs"]
        self.org_slug, self.project_slug = kwargs["org_slug"], kwargs.get("project_slug")
        query = parse_qs(self.scope.get("query_string", b"").decode("latin-1"))
        try:
            self.topics = live.parse_topics(
                ",".join(query.get("topics", [])), level="project" if self.project_slug else "organization"
            )
        except ValueError:
            await self.close(code=CLOSE_BAD_REQUEST)
            return
        user = self.scope.get("user")
        self.user_id = user.pk if user is not None and user.is_authenticated else None
        groups = await self._allowed_groups()
        if groups is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self._join(groups)
        await self.accept()
        self.recheck_task = asyncio.create_task(self._recheck_periodically())

    async def _allowed_groups(self) -> set[str] | None:
        """The groups the user may watch now, or None when they may not watch this
        organization or project at all (not signed in, not a member, deactivated)."""
        self.checked = await self._check_access()
        return None if self.checked is None else self._groups(self.checked)

    @database_sync_to_async
    def _check_access(self) -> tuple[int, int | None, frozenset[str]] | None:
        """(organization id, project id, the topics' permissions the user holds), read
        from the database now; None when the user may not watch here."""
        if self.user_id is None:
            return None
        user = get_user_model().objects.filter(pk=self.user_id, is_active=True).first()
        if user is None:
            return None
        try:
            access = resolve_organization(org_slug=self.org_slug, user=user)
            if self.project_slug is not None:
                resolve_project(access, self.project_slug)
        except NotFound:
            return None
        held = frozenset(spec.permission for spec in live.TOPICS.values() if access.allows(spec.permission))
        return access.organization.pk, (access.project.pk if access.project is not None else None), held

    def _groups(self, access: tuple[int, int | None, frozenset[str]]) -> set[str]:
        organization_id, project_id, held = access
        groups = {live.group_name(organization_id=organization_id), live.group_name(user_id=self.user_id)}
        if project_id is not None:
            groups.add(live.group_name(project_id=project_id))
        for name in self.topics:
            spec = live.TOPICS[name.partition(":")[0]]
            if spec.permission in held:
                level = {"project_id": project_id} if spec.level == "project" else {"organization_id": organization_id}
                groups.add(live.group_name(**level, topic=name))
        return groups

    async def _join(self, groups: set[str]) -> None:
        for group in groups - self.joined:
            await self.channel_layer.group_add(group, self.channel_name)
        self.joined |= groups

    async def _leave(self, groups: set[str]) -> None:
        for group in groups & self.joined:
            await self.channel_layer.group_discard(group, self.channel_name)
        self.joined -= groups

    async def _recheck_periodically(self):
        # Through the consumer's own channel, so a re-check never runs beside another.
        while True:
            await asyncio.sleep(settings.LIVE_RECHECK_SECONDS)
            try:
                await self.channel_layer.send(self.channel_name, {"type": "access.changed"})
            except Exception:  # noqa: BLE001 - the layer is down: no event arrives either; try again later
                logger.warning("could not schedule the access re-check of %s", self.channel_name, exc_info=True)

    async def access_changed(self, message):
        """Check the access again: close, or leave and join topics to match the role."""
        if not self.joined:
            return  # already closed
        groups = await self._allowed_groups()
        if groups is None:
            self._stop_rechecks()
            await self._leave(set(self.joined))
            await self.close(code=CLOSE_FORBIDDEN)
            return
        await self._leave(self.joined - groups)
        await self._join(groups)

    def _stop_rechecks(self) -> None:
        if getattr(self, "recheck_task", None) is not None:
            self.recheck_task.cancel()
            self.recheck_task = None

    async def disconnect(self, code):
        self._stop_rechecks()
        await self._leave(set(getattr(self, "joined", set())))

    async def receive_json(self, content, **kwargs):
        # Pages only listen; anything a page sends is ignored.
        return

    async def live_event(self, message):
        # An event already queued for a group this socket has just left is not relayed.
        if message.get("group", None) not in self.joined:
            return
        follow = [name for name in message.get("follow", ()) if name not in self.topics]
        if follow and len(self.topics) + len(follow) <= live.MAX_TOPICS:
            # The page now shows these (rows just inserted): same project, same check.
            self.topics += follow
            await self._join(self._groups(self.checked))
        if message.get("html"):
            await self.send(text_data=message["html"])
        else:
            await self.send_json({"event": message["event"], "data": message["data"]})
