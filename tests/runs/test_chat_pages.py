"""The chat page of interactive sessions (runs/views/chat.py, runs/views/chat_timeline.py):
the sidebar, the conversation rendered from stored events up to the last one, the live
fragment, every action as a form and as the script's JSON request, roles, tenants and
bad input."""

from __future__ import annotations

import html
import json
import re

import pytest

from agentops.scoping import organization_scope
from runs.execution import run_execute
from runs.models import Approval, Run, Session, SessionMessage
from runs.services.agents import agent_create
from runs.services.events import event_append
from runs.services.sessions import session_close, session_create, session_send

BASE = "/o/acme/p/agent/runs/chat"
JSON = {"HTTP_ACCEPT": "application/json"}


@pytest.fixture
def signed_in(client):
    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


def text(response) -> str:
    return html.unescape(response.content.decode())


def _session(tenant, title="Try", **agent_fields) -> Session:
    fields = {"name": "chat", "model": "offline", "tools": [], **agent_fields}
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, **fields)
        return session_create(project=tenant.project, agent=agent, actor=tenant.member, title=title)


def _send_and_run(tenant, session, content) -> Run:
    with organization_scope(tenant.organization):
        message = session_send(session=session, actor=tenant.member, content=content)
        run_execute(run_id=message.run_id)
        return Run.objects.get(pk=message.run_id)


def _waiting(tenant) -> tuple[Session, Run]:
    """A session whose first turn waits for the approval of a calculator call."""
    session = _session(tenant, tools=["calculator"], approval_tools=["calculator"])
    run = _send_and_run(tenant, session, "What is 6 * 7?")
    assert run.status == "waiting"
    return session, run


def _fresh(session) -> Session:
    return Session.dangerously_unscoped_objects.get(pk=session.pk)


def _pending(session) -> list[Approval]:
    return list(Approval.dangerously_unscoped_objects.filter(run__agent_session_id=session.pk, status="pending"))


# --- Reading ----------------------------------------------------------------------------------


def test_the_page_lists_the_projects_sessions_and_links_the_ingested_conversations(signed_in, tenant, other_tenant):
    mine = _session(tenant, title="Budget questions")
    _session(other_tenant, title="Their secret session")
    page = text(signed_in(tenant.viewer).get(f"{BASE}/"))
    assert "Budget questions" in page and "Their secret session" not in page
    assert f'href="{BASE}/{mine.pk}/"' in page
    assert 'href="/o/acme/p/agent/runs/sessions/"' in page, "ingested conversations stay on their page, linked"
    assert 'id="nav-chat"' in page, "the project navigation links the chat"


def test_a_session_renders_its_turns_from_stored_events_with_a_link_to_each_run(signed_in, tenant):
    session = _session(tenant, tools=["calculator"])
    run = _send_and_run(tenant, session, "What is 6 * 7?")
    page = text(signed_in(tenant.viewer).get(f"{BASE}/{session.pk}/"))
    assert "What is 6 * 7?" in page
    assert re.search(r'data-tool="calculator"', page) and '"expression"' in page, "the tool call, inline"
    assert '{"result": 42, "expression": "6 * 7"}' in page, "the tool's output, inline"
    assert "[offline model] Tool results" in page, "the answer, as streamed"
    assert f'href="/o/acme/p/agent/runs/{run.pk}/"' in page, "the turn links its run page"
    assert f'data-last-event="{_fresh(session).event_seq}"' in page, "the stream is followed from the last event shown"
    assert "/api/v1/projects/acme/agent/agent-sessions/" in page and "/events/" in page


def test_the_chat_page_links_the_session_s_trajectory(signed_in, tenant):
    session = _session(tenant)
    run = _send_and_run(tenant, session, "Hello there")
    client = signed_in(tenant.viewer)
    page = text(client.get(f"{BASE}/{session.pk}/"))
    link = re.search(r'<a href="([^"]+)" id="chat-trajectory" download', page)
    assert link, "the chat page offers the session's trajectory"
    response = client.get(link[1])
    assert response.status_code == 200 and response["Content-Type"] == "application/x-ndjson"
    lines = [json.loads(line) for line in b"".join(response.streaming_content).decode().splitlines()]
    assert [(line["turn"], line["run"]["id"]) for line in lines] == [(1, run.pk)]


def test_the_page_shows_the_answer_only_up_to_the_event_it_follows_from(signed_in, tenant):
    """The page renders the events up to N and follows the stream from N: a chunk stored
    after N arrives live, never also in the page (and the fragment folds up to its id)."""
    session = _session(tenant)
    with organization_scope(tenant.organization):
        message = session_send(session=session, actor=tenant.member, content="Say hello")
        run = Run.objects.get(pk=message.run_id)
        event_append(run=run, type="processing", data={"run": run.pk, "turn": 1})
        first = event_append(run=run, type="assistant_chunk", data={"run": run.pk, "step": 1, "text": "Hel"})
        second = event_append(run=run, type="assistant_chunk", data={"run": run.pk, "step": 1, "text": "lo there"})
    client = signed_in(tenant.member)
    page = text(client.get(f"{BASE}/{session.pk}/"))
    assert "Hello there" in page and f'data-last-event="{second.seq}"' in page
    earlier = text(client.get(f"{BASE}/{session.pk}/live/", {"run": run.pk, "upto": first.seq}))
    assert 'data-answer-step="1"' in earlier and "Hel<" in earlier.replace("Hel</div>", "Hel<")
    assert "lo there" not in earlier


def test_a_pending_approval_offers_its_decisions_to_members_and_not_to_viewers(signed_in, tenant, client):
    session, _run = _waiting(tenant)
    member_page = text(signed_in(tenant.member).get(f"{BASE}/{session.pk}/"))
    assert "Waiting for approval" in member_page
    for label in ("Approve", "Edit, then approve", "Reject", "Approve all calculator calls", "Interrupt"):
        assert label in member_page
    client.logout()
    viewer_page = text(signed_in(tenant.viewer).get(f"{BASE}/{session.pk}/"))
    assert "Waiting for approval" in viewer_page
    assert 'name="decision"' not in viewer_page and 'id="chat-composer"' not in viewer_page
    assert 'id="chat-interrupt"' not in viewer_page


def test_the_live_fragment_refuses_a_bad_upto_and_another_sessions_turn(signed_in, tenant):
    session = _session(tenant)
    other = _session(tenant, title="Other", name="other")
    run = _send_and_run(tenant, other, "hi")
    client = signed_in(tenant.viewer)
    bad = client.get(f"{BASE}/{session.pk}/live/", {"upto": "ten"})
    assert bad.status_code == 400 and "upto must be an event id" in text(bad).lower()
    superscript = client.get(f"{BASE}/{session.pk}/live/", {"upto": "²"})  # isdigit(), but no int
    assert superscript.status_code == 400 and "upto must be an event id" in text(superscript).lower()
    assert client.get(f"{BASE}/{session.pk}/live/", {"run": "²"}).status_code == 404
    assert client.get(f"{BASE}/{session.pk}/live/", {"run": run.pk}).status_code == 404
    assert client.get(f"{BASE}/{session.pk}/live/", {"run": "x"}).status_code == 404
    fragment = text(client.get(f"{BASE}/{other.pk}/live/", {"run": run.pk}))
    assert f'id="chat-turn-{run.pk}"' in fragment and 'id="chat-toolbar"' in fragment


def test_another_tenants_session_is_not_found(signed_in, tenant, other_tenant):
    session = _session(tenant)
    outsider = signed_in(other_tenant.owner)
    assert outsider.get(f"{BASE}/{session.pk}/").status_code == 404
    assert outsider.get(f"/o/globex/p/agent/runs/chat/{session.pk}/").status_code == 404, "nor in their project"
    assert outsider.get(f"/o/globex/p/agent/runs/chat/{session.pk}/live/").status_code == 404
    for action in ("messages", "close", "undo", "interrupt", "compact", "approvals", "approve-all"):
        response = outsider.post(f"/o/globex/p/agent/runs/chat/{session.pk}/{action}/", {"content": "hi"}, **JSON)
        assert response.status_code == 404, action
    assert _fresh(session).status == "open"
    assert SessionMessage.dangerously_unscoped_objects.count() == 0


# --- Acting -----------------------------------------------------------------------------------


def test_a_member_starts_a_session_with_an_agent(signed_in, tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="helper", model="offline")
    client = signed_in(tenant.member)
    response = client.post(f"{BASE}/new/", {"agent": agent.pk, "title": "Planning"})
    session = Session.dangerously_unscoped_objects.get()
    assert response.status_code == 302 and response["Location"] == f"{BASE}/{session.pk}/"
    assert session.title == "Planning" and session.started_by == tenant.member and session.agent_id == agent.pk
    assert "Planning" in text(client.get(response["Location"]))


def test_starting_a_session_with_no_or_another_projects_agent_is_refused(signed_in, tenant, other_tenant):
    with organization_scope(other_tenant.organization):
        foreign = agent_create(project=other_tenant.project, actor=other_tenant.member, name="x", model="offline")
    client = signed_in(tenant.member)
    for agent in ("", "abc", foreign.pk):
        response = client.post(f"{BASE}/new/", {"agent": agent}, **JSON)
        assert response.status_code == 400
        assert "choose one of the project's agents" in response.json()["error"]["message"]
    response = client.post(f"{BASE}/new/", {"agent": foreign.pk}, follow=True)
    assert "choose one of the project" in text(response)
    assert Session.dangerously_unscoped_objects.count() == 0


def test_sending_a_message_starts_a_turn_and_says_so(signed_in, tenant):
    session = _session(tenant)
    client = signed_in(tenant.member)
    response = client.post(f"{BASE}/{session.pk}/messages/", {"content": "hello"}, **JSON)
    assert response.status_code == 200 and response.json() == {"message": "Sent."}
    queued = client.post(f"{BASE}/{session.pk}/messages/", {"content": "and then"})
    assert queued.status_code == 302 and queued["Location"] == f"{BASE}/{session.pk}/"
    page = text(client.get(queued["Location"]))
    assert "it waits for the running turn" in page and "and then" in page and 'id="chat-queue"' in page
    with organization_scope(tenant.organization):
        assert list(Run.objects.filter(agent_session=session).values_list("input", flat=True)) == ["hello"]


def test_an_empty_or_oversized_message_is_a_400_and_nothing_is_stored(signed_in, tenant):
    session = _session(tenant)
    client = signed_in(tenant.member)
    empty = client.post(f"{BASE}/{session.pk}/messages/", {"content": "  "}, **JSON)
    assert empty.status_code == 400 and "content" in empty.json()["error"]["message"]
    huge = client.post(f"{BASE}/{session.pk}/messages/", {"content": "x" * 100_001}, **JSON)
    assert huge.status_code == 400 and "at most" in huge.json()["error"]["message"]
    assert SessionMessage.dangerously_unscoped_objects.count() == 0


def test_a_message_to_a_closed_session_is_a_conflict_shown_to_the_user(signed_in, tenant):
    session = _session(tenant)
    with organization_scope(tenant.organization):
        session_close(session=session, actor=tenant.member)
    client = signed_in(tenant.member)
    response = client.post(f"{BASE}/{session.pk}/messages/", {"content": "hi"}, **JSON)
    assert response.status_code == 409 and "closed" in response.json()["error"]["message"]
    page = client.post(f"{BASE}/{session.pk}/messages/", {"content": "hi"}, follow=True)
    assert page.status_code == 200 and "this session is closed" in text(page)
    assert "Closed" in text(page) and 'id="chat-message"' in text(page) and "disabled" in text(page)
    assert SessionMessage.dangerously_unscoped_objects.count() == 0


def test_a_full_queue_is_a_429_shown_to_the_user(signed_in, tenant, settings):
    settings.SESSION_MAX_QUEUED = 1
    session = _session(tenant)
    client = signed_in(tenant.member)
    statuses = [client.post(f"{BASE}/{session.pk}/messages/", {"content": t}, **JSON).status_code for t in "abc"]
    assert statuses == [200, 200, 429]
    page = client.post(f"{BASE}/{session.pk}/messages/", {"content": "d"}, follow=True)
    assert "messages already wait" in text(page)


def test_approve_as_asked(signed_in, tenant):
    session, run = _waiting(tenant)
    (approval,) = _pending(session)
    response = signed_in(tenant.member).post(
        f"{BASE}/{session.pk}/approvals/", {"approval": approval.pk, "decision": "approve"}, **JSON
    )
    assert response.status_code == 200 and "approved" in response.json()["message"]
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.approved_arguments == approval.arguments
    assert approval.decided_by == tenant.member


def test_edit_then_approve_runs_the_edited_call(signed_in, tenant):
    session, run = _waiting(tenant)
    (approval,) = _pending(session)
    client = signed_in(tenant.member)
    response = client.post(
        f"{BASE}/{session.pk}/approvals/",
        {"approval": approval.pk, "decision": "approve", "arguments": '{"expression": "2 * 21"}'},
    )
    assert response.status_code == 302
    approval.refresh_from_db()
    assert approval.status == "approved" and approval.approved_arguments == {"expression": "2 * 21"}
    with organization_scope(tenant.organization):
        run_execute(run_id=run.pk)
    page = text(client.get(f"{BASE}/{session.pk}/"))
    assert "Approved with edited arguments" in page and "2 * 21" in page


@pytest.mark.parametrize(
    ("arguments", "said"),
    [("{not json", "not valid JSON"), ("[1, 2]", "must be a JSON object")],
)
def test_edited_arguments_that_are_not_a_json_object_are_a_400(signed_in, tenant, arguments, said):
    session, _run = _waiting(tenant)
    (approval,) = _pending(session)
    response = signed_in(tenant.member).post(
        f"{BASE}/{session.pk}/approvals/",
        {"approval": approval.pk, "decision": "approve", "arguments": arguments},
        **JSON,
    )
    assert response.status_code == 400 and said in response.json()["error"]["message"]
    assert _pending(session) == [approval], "nothing was decided"


def test_reject_with_a_reason_told_to_the_model(signed_in, tenant):
    session, run = _waiting(tenant)
    (approval,) = _pending(session)
    client = signed_in(tenant.member)
    response = client.post(
        f"{BASE}/{session.pk}/approvals/",
        {"approval": approval.pk, "decision": "reject", "reason": "use mental arithmetic"},
        **JSON,
    )
    assert response.status_code == 200 and "rejected" in response.json()["message"]
    approval.refresh_from_db()
    assert approval.status == "rejected" and approval.reason == "use mental arithmetic"
    page = text(client.get(f"{BASE}/{session.pk}/"))
    assert "Rejected" in page and "“use mental arithmetic”" in page


def test_a_decision_with_nothing_pending_or_no_decision_is_refused(signed_in, tenant):
    session = _session(tenant)
    client = signed_in(tenant.member)
    none = client.post(f"{BASE}/{session.pk}/approvals/", {"decision": "approve"}, **JSON)
    assert none.status_code == 409 and "no approval is pending" in none.json()["error"]["message"]
    bad = client.post(f"{BASE}/{session.pk}/approvals/", {"decision": "maybe"}, **JSON)
    assert bad.status_code == 400 and "approve or reject" in bad.json()["error"]["message"]
    bad_id = client.post(f"{BASE}/{session.pk}/approvals/", {"decision": "approve", "approval": "x"}, **JSON)
    assert bad_id.status_code == 400


def test_approve_all_for_a_tool_approves_the_pending_call_and_can_be_revoked(signed_in, tenant):
    session, _run = _waiting(tenant)
    client = signed_in(tenant.member)
    response = client.post(f"{BASE}/{session.pk}/approve-all/", {"tools": "calculator"}, **JSON)
    assert response.status_code == 200 and "calculator" in response.json()["message"]
    assert _fresh(session).approve_all == ["calculator"] and _pending(session) == []
    client.post(f"{BASE}/{session.pk}/approve-all/", {"tools": "*"}, **JSON)
    assert _fresh(session).approve_all == ["*"]
    assert "every tool" in text(client.get(f"{BASE}/{session.pk}/"))
    revoked = client.post(f"{BASE}/{session.pk}/approve-all/revoke/", **JSON)
    assert revoked.status_code == 200 and _fresh(session).approve_all == []
    assert client.post(f"{BASE}/{session.pk}/approve-all/", {"tools": ""}, **JSON).status_code == 400


def test_interrupt_stops_the_running_turn_and_is_a_409_when_idle(signed_in, tenant):
    session, run = _waiting(tenant)
    client = signed_in(tenant.member)
    response = client.post(f"{BASE}/{session.pk}/interrupt/", **JSON)
    assert response.status_code == 200
    run.refresh_from_db()
    assert run.status == "cancelled"
    again = client.post(f"{BASE}/{session.pk}/interrupt/", **JSON)
    assert again.status_code == 409 and "nothing to interrupt" in again.json()["error"]["message"]


def test_undo_marks_the_last_turn_undone_and_is_a_409_with_nothing_to_undo(signed_in, tenant):
    session = _session(tenant)
    client = signed_in(tenant.member)
    nothing = client.post(f"{BASE}/{session.pk}/undo/", **JSON)
    assert nothing.status_code == 409 and "no turn to undo" in nothing.json()["error"]["message"]
    run = _send_and_run(tenant, session, "hello")
    response = client.post(f"{BASE}/{session.pk}/undo/", follow=True)
    run.refresh_from_db()
    assert run.undone and "Turn 1 is undone" in text(response)
    assert "Undone: left out of the conversation" in text(response)


def test_compact_and_close(signed_in, tenant):
    session = _session(tenant)
    client = signed_in(tenant.member)
    assert client.post(f"{BASE}/{session.pk}/compact/", **JSON).status_code == 200
    assert _fresh(session).compact_requested
    assert "Compacting before the next turn" in text(client.get(f"{BASE}/{session.pk}/live/"))
    assert client.post(f"{BASE}/{session.pk}/close/", **JSON).status_code == 200
    assert _fresh(session).status == "closed"
    assert client.post(f"{BASE}/{session.pk}/close/", **JSON).status_code == 409
    assert client.post(f"{BASE}/{session.pk}/compact/", **JSON).status_code == 409


@pytest.mark.parametrize(
    "action", ["messages", "approvals", "approve-all", "approve-all/revoke", "interrupt", "undo", "compact", "close"]
)
def test_viewers_read_but_cannot_act(signed_in, tenant, action):
    session, _run = _waiting(tenant)
    before = _fresh(session).event_seq
    response = signed_in(tenant.viewer).post(
        f"{BASE}/{session.pk}/{action}/", {"content": "hi", "decision": "approve", "tools": "*"}
    )
    assert response.status_code == 403
    assert _fresh(session).event_seq == before and _fresh(session).status == "open"


def test_viewers_cannot_start_a_session(signed_in, tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="helper", model="offline")
    assert signed_in(tenant.viewer).post(f"{BASE}/new/", {"agent": agent.pk}).status_code == 403
    assert Session.dangerously_unscoped_objects.count() == 0


def test_a_turn_links_back_to_the_chat_from_its_run_page(signed_in, tenant):
    session = _session(tenant)
    run = _send_and_run(tenant, session, "hello")
    page = text(signed_in(tenant.viewer).get(f"/o/acme/p/agent/runs/{run.pk}/"))
    assert f'href="{BASE}/{session.pk}/#chat-turn-{run.pk}"' in page


def test_json_body_of_an_action_is_the_apis_error_shape(signed_in, tenant):
    session = _session(tenant)
    body = signed_in(tenant.member).post(f"{BASE}/{session.pk}/undo/", **JSON).json()
    assert set(body["error"]) == {"code", "message", "details"} and body["error"]["code"] == "conflict"
    assert json.dumps(body)


def test_the_demo_session_opens_on_the_chat_page(signed_in, tenant):
    from django.core.management import call_command

    from runs.services.demo import DEMO_SESSION, DEMO_SESSION_MESSAGES

    call_command("seed_demo_runs", "acme/agent")
    with organization_scope(tenant.organization):
        session = Session.objects.get(title=DEMO_SESSION)
    page = text(signed_in(tenant.viewer).get(f"{BASE}/{session.pk}/"))
    assert DEMO_SESSION in page
    assert all(message in page for message in DEMO_SESSION_MESSAGES)
    assert page.count('data-state="succeeded"') == 3


def test_the_page_costs_the_same_queries_whatever_the_number_of_turns(signed_in, tenant):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    session = _session(tenant, tools=["calculator"])
    client = signed_in(tenant.viewer)

    def queries() -> int:
        with CaptureQueriesContext(connection) as captured:
            assert client.get(f"{BASE}/{session.pk}/").status_code == 200
        return len(captured)

    _send_and_run(tenant, session, "What is 6 * 7?")
    one = queries()
    for question in ("And 2 * 3?", "And 5 * 5?"):
        _send_and_run(tenant, session, question)
    assert queries() == one
