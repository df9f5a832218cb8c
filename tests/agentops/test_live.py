"""The live WebSocket: members join their project's group; anyone else is refused."""

import pytest
from channels.testing import WebsocketCommunicator
from django.contrib.auth.models import AnonymousUser

from agentops.asgi import application
from agentops.consumers import CLOSE_FORBIDDEN
from agentops.live import announce_async

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _close_worker_thread_connections():
    """Database calls of async code run in asgiref's worker thread; close its
    connection so the test database can be dropped at the end."""
    yield
    from asgiref.sync import sync_to_async
    from django.db import connections

    await sync_to_async(connections.close_all)()


async def _connect(path: str, user):
    # The session cookie path is covered by the browser tests; here the user is put in
    # the scope the way AuthMiddlewareStack would.
    communicator = WebsocketCommunicator(_router(), path)
    communicator.scope["user"] = user
    return communicator


def _router():
    from channels.routing import URLRouter

    from agentops.routing import websocket_urlpatterns

    return URLRouter(websocket_urlpatterns)


async def test_member_receives_events_announced_to_the_project(tenant):
    communicator = await _connect(f"/ws/o/acme/p/{tenant.project.slug}/", tenant.viewer)
    connected, _ = await communicator.connect()
    assert connected
    await announce_async(project=tenant.project, event="run.created", data={"id": 7})
    assert await communicator.receive_json_from(timeout=5) == {"event": "run.created", "data": {"id": 7}}
    await announce_async(project=tenant.project, event="run.step", html='<div id="x" hx-swap-oob="true">1</div>')
    assert await communicator.receive_from(timeout=5) == '<div id="x" hx-swap-oob="true">1</div>'
    await communicator.disconnect()


async def test_a_page_idle_longer_than_the_layer_s_blocking_wait_still_receives_events(tenant):
    """An idle page's consumer waits in the channel layer's blocking pop (``brpop_timeout``
    seconds at a time): its Redis socket must not time out first, which would end the
    consumer with a TimeoutError and the page would receive nothing more."""
    from channels.layers import get_channel_layer

    communicator = await _connect(f"/ws/o/acme/p/{tenant.project.slug}/", tenant.viewer)
    assert (await communicator.connect())[0]
    assert await communicator.receive_nothing(timeout=get_channel_layer().brpop_timeout + 1)
    await announce_async(project=tenant.project, event="run.created", data={"id": 7})
    assert await communicator.receive_json_from(timeout=5) == {"event": "run.created", "data": {"id": 7}}
    await communicator.disconnect()


async def test_user_of_another_organization_is_refused(tenant, other_tenant):
    communicator = await _connect(f"/ws/o/acme/p/{tenant.project.slug}/", other_tenant.owner)
    connected, code = await communicator.connect()
    assert not connected
    assert code == CLOSE_FORBIDDEN
    await communicator.disconnect()


async def test_refused_user_never_receives_the_projects_events(tenant, other_tenant):
    # Same project slug in both organizations: the outsider connects to their own.
    own = await _connect(f"/ws/o/globex/p/{other_tenant.project.slug}/", other_tenant.owner)
    assert (await own.connect())[0]
    await announce_async(project=tenant.project, event="secret", data={})
    assert await own.receive_nothing(timeout=0.5)
    await own.disconnect()


async def test_anonymous_and_unknown_project_are_refused(tenant):
    anonymous = await _connect("/ws/o/acme/", AnonymousUser())
    assert (await anonymous.connect()) == (False, CLOSE_FORBIDDEN)
    missing = await _connect("/ws/o/acme/p/nope/", tenant.owner)
    assert (await missing.connect()) == (False, CLOSE_FORBIDDEN)


def test_asgi_application_routes_websockets_through_auth_and_origin_checks():
    # "lifespan" starts the apps' ASGI services (the MCP server's session manager: agentops/asgi.py).
    assert set(application.application_mapping) == {"http", "websocket", "lifespan"}


async def _session_cookie(user) -> bytes:
    from asgiref.sync import sync_to_async
    from django.test import Client

    client = Client()
    await sync_to_async(client.force_login)(user)
    return f"sessionid={client.cookies['sessionid'].value}".encode()


async def test_full_asgi_stack_accepts_member_session_and_refuses_outsider(tenant, other_tenant):
    path = f"/ws/o/acme/p/{tenant.project.slug}/"
    member = WebsocketCommunicator(
        application, path, headers=[(b"cookie", await _session_cookie(tenant.member)), (b"origin", b"http://localhost")]
    )
    assert (await member.connect())[0]
    await member.disconnect()
    outsider = WebsocketCommunicator(
        application,
        path,
        headers=[(b"cookie", await _session_cookie(other_tenant.member)), (b"origin", b"http://localhost")],
    )
    assert (await outsider.connect()) == (False, CLOSE_FORBIDDEN)
    foreign_origin = WebsocketCommunicator(
        application,
        path,
        headers=[(b"cookie", await _session_cookie(tenant.member)), (b"origin", b"http://evil.example")],
    )
    assert not (await foreign_origin.connect())[0]


def _listen(group: str):
    """Subscribe a fresh channel to ``group`` on the real channel layer."""
    from asgiref.sync import async_to_sync
    from channels.layers import get_channel_layer

    layer = get_channel_layer()
    channel = async_to_sync(layer.new_channel)()
    async_to_sync(layer.group_add)(group, channel)
    return lambda: async_to_sync(layer.receive)(channel)


def test_project_rename_is_announced_to_its_open_pages_after_commit(tenant, client_for):
    from agentops.live import project_group

    receive = _listen(project_group(tenant.project.pk))
    response = client_for(tenant.admin).patch(
        f"/api/v1/projects/acme/{tenant.project.slug}/", {"name": "Renamed bot"}, format="json"
    )
    assert response.status_code == 200
    message = receive()
    assert message["event"] == "project.renamed" and message["data"] == {"name": "Renamed bot"}
    assert 'id="project-name" hx-swap-oob="true">Renamed bot</span>' in message["html"]


def test_organization_rename_is_announced_to_the_organization(tenant, client_for):
    from agentops.live import organization_group

    receive = _listen(organization_group(tenant.organization.pk))
    client_for(tenant.owner).patch("/api/v1/organizations/acme/", {"name": "Acme <Corp>"}, format="json")
    message = receive()
    assert message["event"] == "organization.renamed"
    assert "Acme &lt;Corp&gt;" in message["html"]  # escaped like any template output


def test_announce_failure_does_not_break_the_change(tenant, client_for, settings, caplog, monkeypatch):
    from agentops import outages

    monkeypatch.setattr(outages, "_last_traceback", {})  # a new outage: its first line is logged
    settings.CHANNEL_LAYERS = {
        "default": {"BACKEND": "channels_redis.core.RedisChannelLayer", "CONFIG": {"hosts": ["redis://127.0.0.1:1/0"]}}
    }
    response = client_for(tenant.admin).patch(
        f"/api/v1/projects/acme/{tenant.project.slug}/", {"name": "Still saved"}, format="json"
    )
    assert response.status_code == 200
    tenant.project.refresh_from_db()
    assert tenant.project.name == "Still saved"
    assert "live updates are not sent: Redis unavailable" in caplog.text


async def test_has_listeners_follows_open_pages(tenant):
    from asgiref.sync import sync_to_async

    from agentops.live import has_listeners

    check = sync_to_async(has_listeners, thread_sensitive=False)
    assert await check(project=tenant.project) is False
    communicator = await _connect(f"/ws/o/acme/p/{tenant.project.slug}/", tenant.viewer)
    assert (await communicator.connect())[0]
    assert await check(project=tenant.project) is True
    assert await check(organization=tenant.organization) is True
    await communicator.disconnect()
    assert await check(project=tenant.project) is False


async def test_has_listeners_keeps_its_answer_for_the_configured_time(tenant, settings):
    from asgiref.sync import sync_to_async

    from agentops.live import has_listeners

    settings.LIVE_LISTENERS_CACHE_SECONDS = 60
    check = sync_to_async(has_listeners, thread_sensitive=False)
    assert await check(project=tenant.project) is False
    communicator = await _connect(f"/ws/o/acme/p/{tenant.project.slug}/", tenant.viewer)
    assert (await communicator.connect())[0]
    assert await check(project=tenant.project) is False, "the kept answer, not a new count"
    settings.LIVE_LISTENERS_CACHE_SECONDS = 0
    assert await check(project=tenant.project) is True
    await communicator.disconnect()


# --- Sockets follow membership and role (issue 13) -------------------------------------------


def _membership(tenant, user):
    from agentops.models import Membership
    from agentops.scoping import organization_scope

    with organization_scope(tenant.organization):
        return Membership.objects.get(user=user)


async def _api(client_for, user, method: str, url: str, body=None):
    from asgiref.sync import sync_to_async

    def call():
        return getattr(client_for(user), method)(url, body, format="json")

    return await sync_to_async(call)()


async def _closed_with(communicator) -> int:
    """The close code the server sends next (frames before it are skipped)."""
    while True:
        output = await communicator.receive_output(timeout=5)
        if output["type"] == "websocket.close":
            return output["code"]


async def test_a_removed_members_open_socket_is_closed_at_once(tenant, client_for):
    from asgiref.sync import sync_to_async

    socket = await _connect(f"/ws/o/acme/p/{tenant.project.slug}/", tenant.member)
    assert (await socket.connect())[0]
    membership = await sync_to_async(_membership)(tenant, tenant.member)
    response = await _api(client_for, tenant.admin, "delete", f"/api/v1/organizations/acme/members/{membership.pk}/")
    assert response.status_code == 204
    assert await _closed_with(socket) == CLOSE_FORBIDDEN
    # And nothing the project announces afterwards reaches it.
    await announce_async(project=tenant.project, event="run.created", data={"id": 8})
    assert await socket.receive_nothing(timeout=0.5)
    await socket.disconnect()


async def test_a_member_removed_around_the_services_is_closed_by_the_periodic_check(tenant, settings):
    """A membership deleted in the Django admin or a shell sends no message: the
    consumer's own re-check (every LIVE_RECHECK_SECONDS) catches it."""
    from asgiref.sync import sync_to_async

    settings.LIVE_RECHECK_SECONDS = 0.2
    socket = await _connect("/ws/o/acme/", tenant.member)
    assert (await socket.connect())[0]
    membership = await sync_to_async(_membership)(tenant, tenant.member)
    await sync_to_async(membership.delete)()
    assert await _closed_with(socket) == CLOSE_FORBIDDEN
    await socket.disconnect()


async def test_a_deactivated_users_socket_is_closed(tenant, settings):
    from asgiref.sync import sync_to_async

    settings.LIVE_RECHECK_SECONDS = 0.2
    socket = await _connect(f"/ws/o/acme/p/{tenant.project.slug}/", tenant.viewer)
    assert (await socket.connect())[0]
    tenant.viewer.is_active = False
    await sync_to_async(tenant.viewer.save)(update_fields=["is_active"])
    assert await _closed_with(socket) == CLOSE_FORBIDDEN
    await socket.disconnect()


async def test_a_deleted_projects_open_pages_are_closed(tenant, client_for):
    socket = await _connect(f"/ws/o/acme/p/{tenant.project.slug}/", tenant.viewer)
    organization_page = await _connect("/ws/o/acme/", tenant.viewer)
    assert (await socket.connect())[0] and (await organization_page.connect())[0]
    response = await _api(client_for, tenant.owner, "delete", f"/api/v1/projects/acme/{tenant.project.slug}/")
    assert response.status_code == 204
    assert await _closed_with(socket) == CLOSE_FORBIDDEN
    await announce_async(organization=tenant.organization, event="organization.renamed", data={"name": "x"})
    assert (await organization_page.receive_json_from(timeout=5))["event"] == "organization.renamed"
    await organization_page.disconnect()
    await socket.disconnect()


async def test_a_downgraded_admin_stops_hearing_budget_alerts_but_stays_connected(tenant, client_for):
    from agentops.live import topic

    billing = await _connect("/ws/o/acme/?topics=billing", tenant.admin)
    assert (await billing.connect())[0]
    await announce_async(organization=tenant.organization, topic=topic("billing"), event="billing.alert", data={"n": 1})
    assert (await billing.receive_json_from(timeout=5))["data"] == {"n": 1}

    membership = await _api(client_for, tenant.owner, "get", "/api/v1/organizations/acme/members/?page_size=10")
    admin_id = next(row["id"] for row in membership.json()["results"] if row["role"] == "admin")
    response = await _api(
        client_for, tenant.owner, "patch", f"/api/v1/organizations/acme/members/{admin_id}/", {"role": "viewer"}
    )
    assert response.status_code == 200
    # Still a member: the organization's events still arrive (this one also proves the
    # socket has handled its re-check, queued before it).
    await announce_async(organization=tenant.organization, event="organization.renamed", data={"name": "y"})
    assert (await billing.receive_json_from(timeout=5))["event"] == "organization.renamed"
    await announce_async(organization=tenant.organization, topic=topic("billing"), event="billing.alert", data={"n": 2})
    assert await billing.receive_nothing(timeout=0.5)

    # Made admin again, the same socket hears alerts again.
    await _api(client_for, tenant.owner, "patch", f"/api/v1/organizations/acme/members/{admin_id}/", {"role": "admin"})
    await announce_async(organization=tenant.organization, event="organization.renamed", data={"name": "z"})
    assert (await billing.receive_json_from(timeout=5))["event"] == "organization.renamed"
    await announce_async(organization=tenant.organization, topic=topic("billing"), event="billing.alert", data={"n": 3})
    assert (await billing.receive_json_from(timeout=5))["data"] == {"n": 3}
    await billing.disconnect()


async def test_a_viewer_asking_for_billing_hears_the_organization_but_no_alert(tenant):
    from agentops.live import topic

    viewer = await _connect("/ws/o/acme/?topics=billing", tenant.viewer)
    assert (await viewer.connect())[0]
    await announce_async(organization=tenant.organization, topic=topic("billing"), event="billing.alert", data={})
    assert await viewer.receive_nothing(timeout=0.5)
    await viewer.disconnect()


@pytest.mark.parametrize(
    "path",
    [
        "/ws/o/acme/p/agent/?topics=secrets",  # no such topic
        "/ws/o/acme/?topics=runs",  # a project's topic on an organization's socket
        "/ws/o/acme/p/agent/?topics=run",  # a run needs its id
        "/ws/o/acme/p/agent/?topics=run:abc",
        "/ws/o/acme/p/agent/?topics=runs:3",
    ],
)
async def test_sockets_naming_unknown_or_malformed_topics_are_refused(tenant, path):
    from agentops.consumers import CLOSE_BAD_REQUEST

    socket = await _connect(path, tenant.owner)
    assert (await socket.connect()) == (False, CLOSE_BAD_REQUEST)
    await socket.disconnect()


def test_live_paths_name_their_topics_compactly():
    from agentops.live import live_path, parse_topics, topic

    topics = [topic("runs"), topic("run-row", 3), topic("run-row", 12), topic("run", 5)]
    path = live_path(org_slug="acme", project_slug="agent", topics=topics)
    assert path == "/ws/o/acme/p/agent/?topics=runs,run-row:3.12,run:5"
    assert parse_topics(path.partition("=")[2], level="project") == topics
