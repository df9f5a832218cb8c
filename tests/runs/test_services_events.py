"""The event streams of runs and sessions (runs/services/events.py)."""

from django.db import transaction

from agentops.scoping import organization_scope
from runs.models import Run, Session, StreamEvent
from runs.services.agents import agent_create
from runs.services.events import event_append, events_after
from runs.services.sessions import session_create, session_send
from tests.runs.factories import agent_run


def test_a_runs_events_are_numbered_in_order_one_statement_each(tenant, django_assert_num_queries):
    """Each event of a run's stream takes the next number and is stored with it in one
    statement, also inside a caller's transaction (no savepoint around it)."""
    run = agent_run(tenant.project, "events-run")
    with organization_scope(tenant.organization):
        with transaction.atomic():
            with django_assert_num_queries(1):
                first = event_append(run=run, type="processing", data={"run": run.pk})
            with django_assert_num_queries(1):
                second = event_append(run=run, type="turn_complete", data={"run": run.pk, "status": "succeeded"})
        stored = events_after(run=run)
        run.refresh_from_db()
    assert [(event.pk, event.seq, event.type, event.data) for event in stored] == [
        (first.pk, 1, "processing", {"run": run.pk}),
        (second.pk, 2, "turn_complete", {"run": run.pk, "status": "succeeded"}),
    ]
    assert run.event_seq == 2 and stored[0].created_at == first.created_at


def test_a_turns_events_go_to_its_sessions_stream(tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="chat", model="offline", tools=[])
        session = session_create(project=tenant.project, agent=agent, actor=tenant.member, title="t")
        message = session_send(session=session, actor=tenant.member, content="hi")
        run = Run.objects.get(pk=message.run_id)
        before = Session.objects.get(pk=session.pk).event_seq
        event = event_append(run=run, type="processing", data={"run": run.pk})
        stored = StreamEvent.objects.get(pk=event.pk)
        session.refresh_from_db()
    assert (stored.session_id, stored.run_id, stored.seq) == (session.pk, run.pk, before + 1)
    assert session.event_seq == before + 1
