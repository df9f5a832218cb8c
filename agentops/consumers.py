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
    """Joins one project's (or organization's) group, only after checking that the
    signed-in user is a member; anyone else is refused before any group_add."""

    async def connect(self):
        user = self.scope.get("user")
        kwargs = self.scope["url_route"]["kwargs"]
        group = await self._group_for(user, kwargs["org_slug"], kwargs.get("project_slug"))
        if group is None:
            await self.close(code=CLOSE_FORBIDDEN)
            return
        self.group = group
        await self.channel_layer.group_add(group, self.channel_name)
        await self.accept()

    @database_sync_to_async
    def _group_for(self, user, org_slug: str, project_slug: str | None) -> str | None:
        if user is None or not user.is_authenticated:
            return None
        try:
            access = resolve_organization(org_slug=org_slug, user=user)
            if project_slug is None:
                return organization_group(access.organization.pk)
            return project_group(resolve_project(access, project_slug).project.pk)
        except NotFound:
            return None

    async def disconnect(self, code):
        if getattr(self, "group", None):
            await self.channel_layer.group_discard(self.group, self.channel_name)

    async def receive_json(self, content, **kwargs):
        # Pages only listen; anything a page sends is ignored.
        return

    async def live_event(self, message):
        if message.get("html"):
            await self.send(text_data=message["html"])
        else:
            await self.send_json({"event": message["event"], "data": message["data"]})
