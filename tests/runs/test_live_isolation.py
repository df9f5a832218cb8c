"""The live runs feed reaches the project's members only, and each open page only the
fragments it has a place for."""

import re

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connections

from agentops.live import live_path, topic
from agentops.routing import websocket_urlpatterns
from agentops.scoping import organization_scope
from runs.events import StepEvent
from runs.ingest import ingest
from runs.models import Run

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


def _ingest(project, trace_id, span_id="root"):
    """Store a step of run ``trace_id`` (new, or changing it); its id."""
    with organization_scope(project.organization):
        ingest(project=project, steps=[StepEvent(trace_id=trace_id, span_id=span_id, name=f"run {trace_id}")])
        return Run.objects.get(trace_id=trace_id).pk


def _page(*topics) -> str:
    return live_path(org_slug="acme", project_slug="agent", topics=topics)


async def _ids_received(socket) -> set[str]:
    """The ids of every element the page was sent until it went quiet."""
    ids = set()
    while not await socket.receive_nothing(timeout=0.5):
        ids |= set(re.findall(r'\bid="([^"]+)"', await socket.receive_from(timeout=5)))
    return ids


async def test_new_run_reaches_its_project_and_not_another_tenants(tenant, other_tenant):
    mine = await _listen(_page(topic("runs")), tenant.viewer)
    theirs = await _listen(f"/ws/o/globex/p/{other_tenant.project.slug}/", other_tenant.owner)
    await sync_to_async(_ingest)(tenant.project, "secret-trace")
    received = await mine.receive_from(timeout=5)
    assert "run secret-trace" in received
    assert await theirs.receive_nothing(timeout=0.5)
    await mine.disconnect()
    await theirs.disconnect()


async def test_each_page_gets_only_the_runs_it_shows(tenant):
    shown = await sync_to_async(_ingest)(tenant.project, "shown")
    await sync_to_async(_ingest)(tenant.project, "hidden")  # a run no page below shows
    # A filtered list showing one run, that run's page, and a page showing no run.
    filtered_list = await _listen(_page(topic("runs-notice"), topic("run-row", shown)), tenant.viewer)
    run_page = await _listen(_page(topic("run", shown)), tenant.viewer)
    other_page = await _listen(_page(), tenant.viewer)
    for trace_id in ("shown", "hidden"):
        await sync_to_async(_ingest)(tenant.project, trace_id, span_id="second")
    await sync_to_async(_ingest)(tenant.project, "brand-new")

    assert await _ids_received(filtered_list) == {f"run-{shown}", "runs-new-notice"}
    assert await _ids_received(run_page) == {f"run-refresh-{shown}"}
    assert await _ids_received(other_page) == set()
    for socket in (filtered_list, run_page, other_page):
        await socket.disconnect()


async def test_the_top_of_the_list_follows_the_rows_it_was_sent(tenant):
    top_of_list = await _listen(_page(topic("runs")), tenant.viewer)
    fresh = await sync_to_async(_ingest)(tenant.project, "fresh")
    assert f"run-{fresh}" in await _ids_received(top_of_list)
    await sync_to_async(_ingest)(tenant.project, "fresh", span_id="second")
    assert await _ids_received(top_of_list) == {f"run-{fresh}"}, "the row it now shows is kept up to date"
    await top_of_list.disconnect()
