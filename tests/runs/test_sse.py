"""The Server-Sent Events streams (runs/sse.py) of sessions and executed runs: live
events, resuming with Last-Event-ID (no gap, no duplicate, also across a worker
restart), heartbeats, and who may read them."""

import asyncio
import json
import time

import pytest
from asgiref.sync import sync_to_async
from django.test import AsyncClient

from agentops.scoping import organization_scope
from runs.execution import run_execute
from runs.models import Run, StreamEvent
from runs.services.agents import agent_create
from runs.services.sessions import session_create, session_send
from tests.worker_thread import worker_thread

BASE = "/api/v1/projects/acme/agent"
pytestmark = pytest.mark.django_db(transaction=True)


def _session(tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="chat", model="offline", tools=[])
        return session_create(project=tenant.project, agent=agent, actor=tenant.member)


def _turn(tenant, session, text):
    """Send ``text`` and execute its turn here (the test's own worker)."""
    with organization_scope(tenant.organization):
        message = session_send(session=session, actor=tenant.member, content=text)
        message.refresh_from_db()
        run_execute(run_id=message.run_id)


def _stored(session) -> list[tuple[int, str]]:
    rows = StreamEvent.dangerously_unscoped_objects.filter(session=session).order_by("seq")
    return list(rows.values_list("seq", "type"))


def _parse(frame: str) -> dict | None:
    fields = {}
    for line in frame.splitlines():
        if line.startswith(":"):
            fields.setdefault("comments", []).append(line)
            continue
        name, _, value = line.partition(": ")
        fields[name] = value
    if "id" not in fields:
        return {"comment": True} if "comments" in fields else None
    return {"id": int(fields["id"]), "event": fields["event"], "data": json.loads(fields["data"])}


async def _read(url, *, until, user=None, headers=None, timeout=30.0, comments=False, during=None):
    """Open the stream and read frames until ``until(frames)``; ``during``: sync work
    to do in a thread once the stream is open."""
    client = AsyncClient()
    if user is not None:
        await client.aforce_login(user)
    response = await client.get(url, headers=headers or {})
    if response.status_code != 200:
        await sync_to_async(response.close)()
        return response, []
    frames: list[dict] = []

    async def consume():
        buffer = ""
        async for chunk in response.streaming_content:
            buffer += chunk.decode()
            while "\n\n" in buffer:
                text, buffer = buffer.split("\n\n", 1)
                frame = _parse(text)
                if frame is not None and (comments or "comment" not in frame):
                    frames.append(frame)
                if until(frames):
                    return

    reader = asyncio.ensure_future(consume())
    if during is not None:
        await asyncio.sleep(0.2)  # the stream is open and subscribed
        await asyncio.to_thread(during)
    try:
        await asyncio.wait_for(reader, timeout)
    finally:
        await response.streaming_content.aclose()
        await sync_to_async(response.close)()  # request_finished: its database connection closes
    return response, frames


def _through(last_id):
    return lambda frames: bool(frames) and frames[-1].get("id") == last_id


def test_a_subscriber_receives_every_event_live_in_order(tenant):
    session = _session(tenant)
    url = f"{BASE}/agent-sessions/{session.pk}/events/"

    def work():
        _turn(tenant, session, "hello")

    response, frames = asyncio.run(
        _read(
            url,
            user=tenant.viewer,
            during=work,
            until=lambda f: any(x["event"] == "turn_complete" for x in f) and f[-1]["event"] == "ready",
        )
    )
    assert response["Content-Type"] == "text/event-stream"
    assert [(f["id"], f["event"]) for f in frames] == _stored(session)
    chunks = "".join(f["data"]["text"] for f in frames if f["event"] == "assistant_chunk")
    assert chunks == "[offline model] You said: hello"


def test_resuming_with_last_event_id_receives_exactly_the_missed_events(tenant):
    session = _session(tenant)
    _turn(tenant, session, "one")
    _turn(tenant, session, "two")
    stored = _stored(session)
    last, middle = stored[-1][0], stored[len(stored) // 2][0]
    url = f"{BASE}/agent-sessions/{session.pk}/events/"
    _, by_header = asyncio.run(
        _read(url, user=tenant.member, headers={"Last-Event-ID": str(middle)}, until=_through(last))
    )
    _, by_query = asyncio.run(_read(f"{url}?last_event_id={middle}", user=tenant.member, until=_through(last)))
    missed = [event for event in stored if event[0] > middle]
    assert [(f["id"], f["event"]) for f in by_header] == missed
    assert [(f["id"], f["event"]) for f in by_query] == missed


def test_resuming_across_a_worker_restart_misses_nothing(tenant, fake_mistral):
    session = _session(tenant)
    url = f"{BASE}/agent-sessions/{session.pk}/events/"

    def send_and_wait(text, turn):
        with organization_scope(tenant.organization):
            session_send(session=session, actor=tenant.member, content=text)
        deadline = time.monotonic() + 60
        while not Run.dangerously_unscoped_objects.filter(agent_session=session, turn=turn, status="succeeded"):
            assert time.monotonic() < deadline, "the worker never finished the turn"
            time.sleep(0.1)
        while _stored(session)[-1][1] != "ready":  # the session is ready again (same commit as the turn's end)
            time.sleep(0.05)

    with worker_thread():
        send_and_wait("before", 1)
    seen_until = _stored(session)[-1][0]
    _, first = asyncio.run(_read(url, user=tenant.member, until=_through(seen_until)))
    # The worker is gone; another one executes the next turn while the client is away.
    with worker_thread():
        send_and_wait("after", 2)
    stored = _stored(session)
    _, resumed = asyncio.run(
        _read(url, user=tenant.member, headers={"Last-Event-ID": str(first[-1]["id"])}, until=_through(stored[-1][0]))
    )
    ids = [f["id"] for f in first] + [f["id"] for f in resumed]
    assert ids == [seq for seq, _ in stored] == list(range(1, len(stored) + 1))


def test_a_run_outside_a_session_streams_its_own_events(tenant, make_api_key):
    from tests.runs.execution_helpers import start_run

    with organization_scope(tenant.organization):
        run = start_run(tenant)
        run_execute(run_id=run.pk)
    stored = list(StreamEvent.dangerously_unscoped_objects.filter(run=run).order_by("seq").values_list("seq", "type"))
    _, raw = make_api_key(tenant.project, scopes=("read",))
    _, frames = asyncio.run(
        _read(
            f"{BASE}/runs/{run.pk}/events/", headers={"Authorization": f"Bearer {raw}"}, until=_through(stored[-1][0])
        )
    )
    assert [(f["id"], f["event"]) for f in frames] == stored
    assert frames[-1]["event"] == "turn_complete" and frames[-1]["data"]["status"] == "succeeded"


def test_an_idle_stream_sends_heartbeats(tenant, settings):
    settings.SSE_HEARTBEAT_SECONDS = 0.2
    session = _session(tenant)
    _, frames = asyncio.run(
        _read(
            f"{BASE}/agent-sessions/{session.pk}/events/",
            user=tenant.member,
            comments=True,
            until=lambda f: sum("comment" in x for x in f) >= 2,
        )
    )
    assert [f["event"] for f in frames if "event" in f] == ["ready"]


def test_a_malformed_last_event_id_is_400(tenant):
    session = _session(tenant)
    url = f"{BASE}/agent-sessions/{session.pk}/events/"
    for bad in ("abc", "-1", "1.5", "9" * 30, "²"):
        response, _ = asyncio.run(_read(url, user=tenant.member, headers={"Last-Event-ID": bad}, until=bool))
        assert response.status_code == 400 and "Last-Event-ID" in json.loads(response.content)["error"]["message"]


def test_another_tenant_and_strangers_cannot_read_the_stream(tenant, other_tenant, make_api_key):
    session = _session(tenant)
    url = f"{BASE}/agent-sessions/{session.pk}/events/"
    response, _ = asyncio.run(_read(url, user=other_tenant.owner, until=bool))
    assert response.status_code == 404
    _, other_key = make_api_key(other_tenant.project, scopes=("read",))
    response, _ = asyncio.run(_read(url, headers={"Authorization": f"Bearer {other_key}"}, until=bool))
    assert response.status_code == 404
    _, ingest_only = make_api_key(tenant.project, scopes=("ingest",))
    response, _ = asyncio.run(_read(url, headers={"Authorization": f"Bearer {ingest_only}"}, until=bool))
    assert response.status_code == 403
    response, _ = asyncio.run(_read(url, until=bool))
    assert response.status_code == 401
    response, _ = asyncio.run(_read(url, headers={"Authorization": "Bearer nope"}, until=bool))
    assert response.status_code == 401
