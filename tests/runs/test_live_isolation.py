"""The live runs feed reaches the project's members only."""

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connections

from agentops.routing import websocket_urlpatterns
from agentops.scoping import organization_scope
from runs.services.ingest import StepEvent, ingest

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _close_worker_thread_connections():
    yield
    await sync_to_async(connections.close_all)()


async def _listen(path: str, user) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    return communicator


def _ingest(project, trace_id):
    with organization_scope(project.organization):
        ingest(project=project, steps=[StepEvent(trace_id=trace_id, span_id="root", name=f"run {trace_id}")])


async def test_new_run_reaches_its_project_and_not_another_tenants(tenant, other_tenant):
    mine = await _listen(f"/ws/o/acme/p/{tenant.project.slug}/", tenant.viewer)
    theirs = await _listen(f"/ws/o/globex/p/{other_tenant.project.slug}/", other_tenant.owner)
    await sync_to_async(_ingest)(tenant.project, "secret-trace")
    received = await mine.receive_from(timeout=5)
    assert "run secret-trace" in received
    assert await theirs.receive_nothing(timeout=0.5)
    await mine.disconnect()
    await theirs.disconnect()
