"""The sessions API (runs/api/sessions.py): open, message, decide, approve-all,
interrupt, undo, compact, close, delete; roles, tenants and the 4xx answers."""

from agentops.scoping import organization_scope
from runs.execution import run_execute
from runs.models import Run, Session, SessionMessage
from runs.services.agents import agent_create

BASE = "/api/v1/projects/acme/agent/agent-sessions/"


def _agent(tenant, **fields):
    with organization_scope(tenant.organization):
        fields = {"name": "chat", "model": "offline", "tools": [], **fields}
        return agent_create(project=tenant.project, actor=tenant.member, **fields)


def _open(tenant, client_for, **fields):
    agent = _agent(tenant, **fields)
    response = client_for(tenant.member).post(BASE, {"agent": agent.pk, "title": "Try"}, format="json")
    assert response.status_code == 201, response.content
    return response.json()


def _run_turn(tenant, session_id, turn):
    with organization_scope(tenant.organization):
        run_execute(run_id=Run.objects.get(agent_session_id=session_id, turn=turn).pk)


def test_open_a_session_send_messages_and_read_its_turns(tenant, client_for):
    session = _open(tenant, client_for)
    member = client_for(tenant.member)
    sent = member.post(f"{BASE}{session['id']}/messages/", {"content": "hello"}, format="json")
    queued = member.post(f"{BASE}{session['id']}/messages/", {"content": "again"}, format="json")
    assert sent.status_code == 202 and sent.json()["status"] == "started"
    assert queued.json()["status"] == "queued"
    _run_turn(tenant, session["id"], 1)
    _run_turn(tenant, session["id"], 2)
    detail = client_for(tenant.viewer).get(f"{BASE}{session['id']}/").json()
    assert [(t["turn"], t["input"], t["status"]) for t in detail["turns"]] == [
        (1, "hello", "succeeded"),
        (2, "again", "succeeded"),
    ]
    assert detail["queued"] == [] and detail["status"] == "open" and detail["last_event_id"] > 0
    listed = client_for(tenant.viewer).get(BASE).json()["results"]
    assert [s["id"] for s in listed] == [session["id"]]


def test_opening_with_the_same_idempotency_key_opens_one_session(tenant, client_for):
    agent = _agent(tenant)
    member = client_for(tenant.member)
    first = member.post(BASE, {"agent": agent.pk}, format="json", headers={"Idempotency-Key": "k1"})
    again = member.post(BASE, {"agent": agent.pk}, format="json", headers={"Idempotency-Key": "k1"})
    assert first.json()["id"] == again.json()["id"] and again.headers["Idempotent-Replayed"] == "true"
    assert Session.dangerously_unscoped_objects.count() == 1
    url = f"{BASE}{first.json()['id']}/messages/"
    sent = [member.post(url, {"content": "hi"}, format="json", headers={"Idempotency-Key": "m1"}) for _ in range(2)]
    assert sent[0].json()["id"] == sent[1].json()["id"]
    assert SessionMessage.dangerously_unscoped_objects.count() == 1, "a retried message is sent once"


def test_a_message_to_a_closed_session_is_a_conflict(tenant, client_for):
    session = _open(tenant, client_for)
    member = client_for(tenant.member)
    assert member.post(f"{BASE}{session['id']}/close/").json()["status"] == "closed"
    response = member.post(f"{BASE}{session['id']}/messages/", {"content": "hi"}, format="json")
    assert response.status_code == 409 and "closed" in response.json()["error"]["message"]
    assert member.post(f"{BASE}{session['id']}/close/").status_code == 409
    assert SessionMessage.dangerously_unscoped_objects.count() == 0


def test_too_many_queued_messages_is_429(tenant, client_for, settings):
    settings.SESSION_MAX_QUEUED = 1
    session = _open(tenant, client_for)
    member = client_for(tenant.member)
    url = f"{BASE}{session['id']}/messages/"
    assert [member.post(url, {"content": t}, format="json").status_code for t in ("a", "b", "c")] == [202, 202, 429]


def test_decision_undo_and_interrupt_with_nothing_to_act_on_are_conflicts(tenant, client_for):
    session = _open(tenant, client_for)
    member = client_for(tenant.member)
    decision = member.post(f"{BASE}{session['id']}/approvals/", {"decision": "approve"}, format="json")
    assert decision.status_code == 409 and "no approval is pending" in decision.json()["error"]["message"]
    assert member.post(f"{BASE}{session['id']}/undo/").status_code == 409
    assert member.post(f"{BASE}{session['id']}/interrupt/").status_code == 409


def test_approve_edit_reject_and_approve_all_through_the_api(tenant, client_for):
    session = _open(tenant, client_for, tools=["calculator"], approval_tools=["calculator"])
    member = client_for(tenant.member)
    member.post(f"{BASE}{session['id']}/messages/", {"content": "6 * 7"}, format="json")
    _run_turn(tenant, session["id"], 1)
    pending = member.get(f"{BASE}{session['id']}/").json()["pending_approvals"]
    assert [p["tool_name"] for p in pending] == ["calculator"]
    decided = member.post(
        f"{BASE}{session['id']}/approvals/",
        {"decision": "approve", "arguments": {"expression": "2 * 21"}},
        format="json",
    )
    assert decided.status_code == 200 and decided.json()["approved_arguments"] == {"expression": "2 * 21"}
    all_tools = member.put(f"{BASE}{session['id']}/approve-all/", {"tools": ["*"]}, format="json")
    assert all_tools.json()["approve_all"] == ["*"]
    assert member.delete(f"{BASE}{session['id']}/approve-all/").json()["approve_all"] == []


def test_interrupt_undo_compact_and_delete(tenant, client_for):
    session = _open(tenant, client_for, tools=["calculator"], approval_tools=["calculator"])
    member = client_for(tenant.member)
    member.post(f"{BASE}{session['id']}/messages/", {"content": "6 * 7"}, format="json")
    _run_turn(tenant, session["id"], 1)
    assert member.post(f"{BASE}{session['id']}/interrupt/").status_code == 202
    undone = member.post(f"{BASE}{session['id']}/undo/").json()
    assert undone["turns"][0]["undone"] and undone["turns"][0]["status"] == "cancelled"
    assert member.post(f"{BASE}{session['id']}/compact/").json()["compact_requested"] is True
    assert member.delete(f"{BASE}{session['id']}/").status_code == 204
    assert member.get(f"{BASE}{session['id']}/").status_code == 404
    assert Run.dangerously_unscoped_objects.filter(turn=1).count() == 1, "its turns stay as runs"


def test_unknown_fields_are_refused(tenant, client_for):
    agent = _agent(tenant)
    member = client_for(tenant.member)
    response = member.post(BASE, {"agent": agent.pk, "model": "x"}, format="json")
    assert response.status_code == 400 and "model" in response.json()["error"]["message"]
    session = member.post(BASE, {"agent": agent.pk}, format="json").json()
    assert member.post(f"{BASE}{session['id']}/undo/", {"force": True}, format="json").status_code == 400
    assert member.post(f"{BASE}{session['id']}/messages/", {"text": "hi"}, format="json").status_code == 400


def test_viewers_read_but_cannot_act(tenant, client_for):
    session = _open(tenant, client_for)
    viewer = client_for(tenant.viewer)
    assert viewer.get(f"{BASE}{session['id']}/").status_code == 200
    for path, body in [("messages/", {"content": "hi"}), ("close/", None), ("interrupt/", None), ("undo/", None)]:
        assert viewer.post(f"{BASE}{session['id']}/{path}", body, format="json").status_code == 403
    assert viewer.post(BASE, {"agent": session["agent_id"]}, format="json").status_code == 403
    assert viewer.delete(f"{BASE}{session['id']}/").status_code == 403


def test_another_tenants_session_is_not_found(tenant, other_tenant, client_for):
    session = _open(tenant, client_for)
    outsider = client_for(other_tenant.owner)
    for path in ("", "messages/", "close/"):
        url = f"{BASE}{session['id']}/{path}"
        assert (outsider.get(url) if not path else outsider.post(url, {}, format="json")).status_code == 404
    own = f"/api/v1/projects/globex/agent/agent-sessions/{session['id']}/"
    assert outsider.get(own).status_code == 404, "not in their project either"
