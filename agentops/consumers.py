"""The WebSocket a project's or organization's pages keep open for live updates."""

from __future__ import annotations

from channels.db import database_sync_to_async
from channels.generic.websocket import AsyncJsonWebsocketConsumer

from agentops.access import resolve_organization, resolve_project
from agentops.errors import NotFound
from agentops.live import organization_group, project_group

# Close code for "you may not watch this" (4000-4999 are for applications).
CLOSE_FORBIDDEN = 4403


class LiveConsumer(AsyncJsonWebsocketConsumer):
    """Joins the organization's group (and the project's, on a project page) only after
    checking that the signed-in user is a member; anyone else is refused before any
    group_add. Events sent to these groups must be fit for every member to see."""

    async def connect(self):
        user = self.scope.get("user")
        kwargs = self.scope["url_route"]["kwargs"]
        groups = await self._groups_for(user, kwargs["org_slug"], kwargs.get("project_slug"))
        if not groups:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.groups_joined = groups
        for group in groups:
            await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    @database_sync_to_async
    def _groups_for(self, user, org_slug: str, project_slug: str | None) -> list[str]:
        """The groups the user may watch here: the organization's, and the project's on
        a project page. Empty when the user is not a member (or the project is not theirs)."""
        if user is None or not user.is_authenticated:
            return []
        try:
            access = resolve_organization(org_slug=org_slug, user=user)
            groups = [organization_group(access.organization.pk)]
            if project_slug is not None:
                groups.append(project_group(resolve_project(access, project_slug).project.pk))
        except NotFound:
            return []
        return groups

    async def disconnect(self, code):
        for group in getattr(self, "groups_joined", []):
            await self.channel_layer.group_discard(group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        # Pages only listen; anything a page sends is ignored.
        return

    async def live_event(self, message):
        if message.get("html"):
            await self.send(text_data=message["html"])
        else:
            await self.send_json({"event": message["event"], "data": message["data"]})
