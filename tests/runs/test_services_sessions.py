"""Interactive sessions (runs.services.sessions): turns, the queue, approvals, undo,
close, and the events each change appends (runs.services.events)."""

import pytest

from agentops.errors import Conflict, TooManyRequests
from agentops.scoping import organization_scope
from runs.execution import run_execute
from runs.models import Approval, Run, SessionMessage, StreamEvent
from runs.services.agents import agent_create
from runs.services.events import events_after
from runs.services.sessions import (
    session_approve_all,
    session_close,
    session_create,
    session_decide,
    session_interrupt,
    session_send,
    session_undo,
)
from tests.fake_mistral import completion
from tests.runs.execution_helpers import use_fake_mistral


def _session(tenant, **agent_fields):
    fields = {"name": "chat", "model": "offline", "tools": [], **agent_fields}
    agent = agent_create(project=tenant.project, actor=tenant.member, **fields)
    return session_create(project=tenant.project, agent=agent, actor=tenant.member)


def _turn(session, number):
    return Run.objects.get(agent_session=session, turn=number)


def _types(session):
    return [event.type for event in events_after(session=session)]


def test_turn_two_sees_the_conversation_of_turn_one(tenant, fake_mistral):
    fake_mistral.reply(completion(content="Nice to meet you, Ada."))
    fake_mistral.reply(completion(content="You are Ada."))
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        session = _session(tenant, model="mistral-small-latest", system_prompt="Be brief.")
        session_send(session=session, actor=tenant.member, content="I am Ada.")
        run_execute(run_id=_turn(session, 1).pk)
        session_send(session=session, actor=tenant.member, content="Who am I?")
        run_execute(run_id=_turn(session, 2).pk)
        second = _turn(session, 2)
    sent = [(m["role"], m["content"]) for m in fake_mistral.requests[1]["body"]["messages"]]
    assert sent == [
        ("system", "Be brief."),
        ("user", "I am Ada."),
        ("assistant", "Nice to meet you, Ada."),
        ("user", "Who am I?"),
    ]
    assert second.status == "succeeded" and second.output == "You are Ada."
    with organization_scope(tenant.organization):
        types = _types(session)
    assert types[0] == "ready" and types.count("turn_complete") == 2 and types[-1] == "ready"
    assert "assistant_chunk" in types and "processing" in types


def test_messages_sent_during_a_turn_wait_and_run_in_order(tenant):
    with organization_scope(tenant.organization):
        session = _session(tenant)
        for text in ("one", "two", "three"):
            session_send(session=session, actor=tenant.member, content=text)
        assert Run.objects.filter(agent_session=session).count() == 1, "one turn at a time"
        for number in (1, 2, 3):
            run_execute(run_id=_turn(session, number).pk)
        turns = list(Run.objects.filter(agent_session=session).order_by("turn").values_list("input", "status"))
        queued = SessionMessage.objects.filter(session=session, status="queued").count()
    assert turns == [("one", "succeeded"), ("two", "succeeded"), ("three", "succeeded")]
    assert queued == 0


def test_a_full_queue_refuses_the_next_message(tenant, settings):
    settings.SESSION_MAX_QUEUED = 2
    with organization_scope(tenant.organization):
        session = _session(tenant)
        for text in ("running", "q1", "q2"):
            session_send(session=session, actor=tenant.member, content=text)
        with pytest.raises(TooManyRequests):
            session_send(session=session, actor=tenant.member, content="q3")
        assert SessionMessage.objects.filter(session=session).count() == 3, "nothing half-written"


def _waiting(tenant):
    session = _session(tenant, tools=["calculator"], approval_tools=["calculator"])
    session_send(session=session, actor=tenant.member, content="6 * 7")
    run_execute(run_id=_turn(session, 1).pk)
    return session, _turn(session, 1)


def test_approve_with_edited_arguments_continues_the_turn(tenant):
    with organization_scope(tenant.organization):
        session, run = _waiting(tenant)
        assert run.status == "waiting" and "approval_required" in _types(session)
        session_decide(session=session, actor=tenant.member, approve=True, arguments={"expression": "2 * 21"})
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        decided = [e.data for e in events_after(session=session) if e.type == "approval_decided"]
        outputs = [e.data for e in events_after(session=session) if e.type == "tool_output"]
    assert run.status == "succeeded"
    assert decided[0]["decision"] == "approved" and decided[0]["arguments"] == {"expression": "2 * 21"}
    assert outputs[0]["result"]["result"] == 42


def test_a_rejection_reason_is_told_to_the_model(tenant):
    with organization_scope(tenant.organization):
        session, run = _waiting(tenant)
        session_decide(session=session, actor=tenant.member, approve=False, reason="use mental arithmetic")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    tool_messages = [m for m in run.execution["conversation"] if m["role"] == "tool"]
    assert "use mental arithmetic" in tool_messages[0]["content"]


def test_a_decision_with_nothing_pending_is_a_conflict(tenant):
    with organization_scope(tenant.organization):
        session = _session(tenant)
        with pytest.raises(Conflict, match="no approval is pending"):
            session_decide(session=session, actor=tenant.member, approve=True)


def test_approve_all_approves_the_pending_call_and_the_next_ones_until_revoked(tenant):
    with organization_scope(tenant.organization):
        session, run = _waiting(tenant)
        session_approve_all(session=session, actor=tenant.member, tools=["calculator"])
        run_execute(run_id=run.pk)
        session_send(session=session, actor=tenant.member, content="1 + 1")
        second = _turn(session, 2)
        # The offline model calls each tool once per conversation: make turn 2 call it again.
        second.execution["start_conversation"] = [{"role": "user", "content": "1 + 1"}]
        Run.objects.filter(pk=second.pk).update(execution=second.execution)
        run_execute(run_id=second.pk)
        second.refresh_from_db()
        auto = Approval.objects.get(run=second)
        session_approve_all(session=session, actor=tenant.member, tools=[])
        session_send(session=session, actor=tenant.member, content="2 + 2")
        third = _turn(session, 3)
        third.execution["start_conversation"] = [{"role": "user", "content": "2 + 2"}]
        Run.objects.filter(pk=third.pk).update(execution=third.execution)
        run_execute(run_id=third.pk)
        third.refresh_from_db()
        first = Approval.objects.get(run=run).status
    assert first == "approved"
    assert second.status == "succeeded" and auto.status == "approved" and "approve-all" in auto.reason
    assert third.status == "waiting", "revoked: the call waits for a person again"


def test_interrupt_while_waiting_for_an_approval_ends_the_turn_at_once(tenant):
    with organization_scope(tenant.organization):
        session, run = _waiting(tenant)
        session_interrupt(session=session, actor=tenant.member)
        run.refresh_from_db()
        types = _types(session)
        with pytest.raises(Conflict, match="nothing to interrupt"):
            session_interrupt(session=session, actor=tenant.member)
        # The next turn goes on from a conversation the model accepts: the call never made has a result.
        session_send(session=session, actor=tenant.member, content="go on")
        conversation = _turn(session, 2).execution["start_conversation"]
    assert run.status == "cancelled" and types[-2:] == ["interrupted", "ready"]
    assert [m["role"] for m in conversation][-3:] == ["assistant", "tool", "user"]
    assert "interrupted" in conversation[-2]["content"]


def test_undo_takes_the_last_turn_out_of_the_conversation(tenant):
    with organization_scope(tenant.organization):
        session = _session(tenant)
        with pytest.raises(Conflict, match="no turn to undo"):
            session_undo(session=session, actor=tenant.member)
        for text in ("keep me", "forget me"):
            session_send(session=session, actor=tenant.member, content=text)
        run_execute(run_id=_turn(session, 1).pk)
        with pytest.raises(Conflict, match="interrupt it"):
            session_undo(session=session, actor=tenant.member)
        run_execute(run_id=_turn(session, 2).pk)
        undone = session_undo(session=session, actor=tenant.member)
        session_send(session=session, actor=tenant.member, content="next")
        conversation = _turn(session, 3).execution["start_conversation"]
        kept = Run.objects.get(pk=undone.pk)
    users = [m["content"] for m in conversation if m["role"] == "user"]
    assert users == ["keep me", "next"]
    assert kept.undone and kept.turn == 2 and kept.status == "succeeded", "the run is kept, marked undone"


def test_a_closed_session_takes_no_message_and_drops_its_queue(tenant):
    with organization_scope(tenant.organization):
        session = _session(tenant)
        session_send(session=session, actor=tenant.member, content="running")
        session_send(session=session, actor=tenant.member, content="queued")
        session_close(session=session, actor=tenant.member)
        run = _turn(session, 1)
        with pytest.raises(Conflict, match="closed"):
            session_send(session=session, actor=tenant.member, content="more")
        dropped = SessionMessage.objects.get(session=session, content="queued").status
        types = _types(session)
    assert run.status == "cancelled" and dropped == "dropped"
    assert "closed" in types and types[-1] == "interrupted"


def test_events_are_numbered_one_by_one_per_session(tenant):
    with organization_scope(tenant.organization):
        session = _session(tenant)
        session_send(session=session, actor=tenant.member, content="hi")
        run_execute(run_id=_turn(session, 1).pk)
        ids = list(StreamEvent.objects.filter(session=session).order_by("seq").values_list("seq", flat=True))
        run_ids = [e.seq for e in events_after(run=_turn(session, 1))]
    assert ids == list(range(1, len(ids) + 1))
    assert run_ids and set(run_ids) < set(ids), "a turn's stream is its part of the session's"


def test_an_executed_run_outside_a_session_has_its_own_events(tenant):
    from tests.runs.execution_helpers import start_run

    with organization_scope(tenant.organization):
        run = start_run(tenant)
        run_execute(run_id=run.pk)
        events = events_after(run=run)
    assert [e.seq for e in events] == list(range(1, len(events) + 1))
    assert [e.type for e in events][0] == "processing" and events[-1].type == "turn_complete"
    assert {"tool_call", "tool_output"} <= {e.type for e in events}


@pytest.mark.django_db(transaction=True)
def test_interrupt_while_the_model_streams_keeps_what_was_stored_and_goes_on(tenant, fake_mistral, celery_worker):
    import time

    # About 40 s of answer, three words every 0.2 s: the turn must end long before that.
    fake_mistral.reply(completion(content="word " * 600), chunk_delay=0.2)
    fake_mistral.reply(completion(content="Here again."))
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        session = _session(tenant, model="mistral-small-latest")
        session_send(session=session, actor=tenant.member, content="Write a lot.")
        session_send(session=session, actor=tenant.member, content="Are you there?")
    deadline = time.monotonic() + 30
    while not StreamEvent.dangerously_unscoped_objects.filter(session=session, type="assistant_chunk").exists():
        assert time.monotonic() < deadline, "the turn never streamed"
        time.sleep(0.05)
    with organization_scope(tenant.organization):
        session_interrupt(session=session, actor=tenant.member)
    deadline = time.monotonic() + 30
    while not Run.dangerously_unscoped_objects.filter(agent_session=session, turn=2, status="succeeded").exists():
        assert time.monotonic() < deadline, "the queued message never ran after the interrupt"
        time.sleep(0.1)
    with organization_scope(tenant.organization):
        first = _turn(session, 1)
        types = _types(session)
    assert first.status == "cancelled"
    assert types.index("interrupted") < types.index("turn_complete"), "the next queued message ran after it"
    assert "assistant_chunk" in types[: types.index("interrupted")], "the streamed pieces stay stored"


def test_compact_now_compacts_the_next_turns_conversation_and_says_so(tenant):
    from runs.models import Step
    from runs.services.sessions import session_compact

    with organization_scope(tenant.organization):
        session = _session(tenant)
        for number, text in enumerate(["one", "two", "three", "four"], start=1):
            session_send(session=session, actor=tenant.member, content=text)
            run_execute(run_id=_turn(session, number).pk)
        session_compact(session=session, actor=tenant.member)
        session_send(session=session, actor=tenant.member, content="five")
        fifth = _turn(session, 5)
        run_execute(run_id=fifth.pk)
        fifth.refresh_from_db()
        compacted = [e.data for e in events_after(session=session) if e.type == "compacted"]
        step = Step.objects.get(run=fifth, name="context compaction")
        session.refresh_from_db()
    assert compacted and compacted[0]["run"] == fifth.pk
    assert compacted[0]["messages_after"] < compacted[0]["messages_before"]
    assert step.attributes["messages_before"] == 9 and not session.compact_requested
    assert fifth.execution["conversation"][1]["content"].startswith("Summary of the earlier conversation")
