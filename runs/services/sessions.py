"""Interactive sessions: a conversation with an agent version whose turns are executed
runs (docs/sessions.md). The pages, the API and the terminal client all call these.

A user message starts a turn when the session is idle, or waits in the session's queue
(at most ``SESSION_MAX_QUEUED``); when a turn ends (``run_ended``), the next queued
message starts the next turn. Turn N starts from the conversation the latest turn not
undone ended with (compacted, when it was), plus the new message. Every change appends
an event to the session's stream (runs.services.events).

Locks: a service that locks both takes a run's row before its session's (the executor,
ending a turn, holds the run's lock when it appends to the session's stream); services
here lock the session and touch only runs that no worker holds (ended, or queued and
not yet handed over).
"""

from __future__ import annotations

import json

from django.conf import settings
from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest, NotFound, TooManyRequests
from agentops.models import ApiKey
from agentops.services.audit import acting_user, audit_record
from billing.budgets import check_work_allowed
from runs.execution import create_executed_run, run_cancel, version_spec
from runs.models import Agent, AgentVersion, Approval, Run, Session, SessionMessage
from runs.services.approvals import approval_decide
from runs.services.events import event_append

# A turn still going: every status that is not an end.
ACTIVE = tuple(status for status in Run.Status.values if status not in Run.ENDED)


def session_create(
    *, project, agent: Agent, actor, api_key=None, title: str = "", version_number: int | None = None, ip=None
) -> Session:
    """Open a session with ``agent`` (its latest version unless one is named)."""
    number = version_number or agent.latest_version
    version = AgentVersion.objects.filter(agent=agent, number=number).first()
    if version is None:
        raise InvalidRequest(f"agent {agent.name!r} has no version {number}")
    with transaction.atomic():
        session = Session.objects.create(
            organization_id=project.organization_id,
            project=project,
            agent=agent,
            agent_version=version,
            started_by=acting_user(actor) if api_key is None else None,
            api_key=api_key,
            title=(title or "").strip()[:200],
        )
        audit_record(
            organization=project.organization,
            actor=actor,
            action="session.create",
            target=session,
            data={"agent": agent.name, "version": version.number},
            ip=ip,
        )
        event_append(
            session=session,
            type="ready",
            data={"session": session.pk, "agent": agent.name, "version": version.number},
        )
    return session


def active_turn(session: Session) -> Run | None:
    """The session's turn that has not ended (at most one), or None when it is idle."""
    return Run.objects.filter(agent_session=session, status__in=ACTIVE).order_by("-turn").first()


def session_send(*, session: Session, actor, content: str, api_key=None) -> SessionMessage:
    """Send a user message: it starts a turn at once when the session is idle, or waits
    for the turns before it. 409 on a closed session, 429 when the queue is full."""
    if not isinstance(content, str) or not content.strip():
        raise InvalidRequest("give the message a content (the user's text)")
    with transaction.atomic():
        session = _locked(session)
        if session.status == Session.Status.CLOSED:
            raise Conflict("this session is closed: open a new one to go on")
        queued = SessionMessage.objects.filter(session=session, status=SessionMessage.Status.QUEUED)
        busy = active_turn(session) is not None or queued.exists()
        if busy and queued.count() >= settings.SESSION_MAX_QUEUED:
            raise TooManyRequests(
                f"{settings.SESSION_MAX_QUEUED} messages already wait for this session's turn to end; "
                "send this one once a turn has ended"
            )
        message = SessionMessage.objects.create(
            organization_id=session.organization_id, project_id=session.project_id, session=session, content=content
        )
        if busy:
            event_append(
                session=session,
                type="queued",
                data={"message": message.pk, "content": content, "position": queued.count()},
            )
        else:
            _start_turn(session, message, actor=actor, api_key=api_key)
    return message


def _locked(session: Session) -> Session:
    return (
        Session.objects.select_for_update()
        .select_related("project__organization", "agent", "agent_version")
        .get(pk=session.pk)
    )


def _start_turn(session: Session, message: SessionMessage, *, actor, api_key=None) -> Run:
    """Start the turn of ``message`` (inside a transaction holding the session's lock)."""
    version, project = session.agent_version, session.project
    check_work_allowed(project=project, api_key=api_key or session.api_key, work="run")
    last = (
        Run.objects.filter(agent_session=session, undone=False)
        .exclude(status__in=ACTIVE)
        .order_by("-turn")
        .only("execution")
        .first()
    )
    conversation = carried_conversation(last.execution.get("conversation")) if last else None
    if conversation is None:
        conversation = [{"role": "system", "content": version.system_prompt}] if version.system_prompt else []
    state = {"start_conversation": [*conversation, {"role": "user", "content": message.content}]}
    if session.compact_requested:
        state["compact_now"] = True
        session.compact_requested = False
        session.save(update_fields=["compact_requested"])
    number = (Run.objects.filter(agent_session=session).aggregate(n=Max("turn"))["n"] or 0) + 1
    run = create_executed_run(
        project=project,
        actor=actor,
        api_key=api_key or session.api_key,
        name=session.agent.name,
        agent_name=session.agent.name,
        version=version,
        input=message.content,
        spec=version_spec(version),
        parameters=dict(version.parameters),
        audit=None,
        state=state,
        fields={"metadata": {"session": session.pk, "turn": number}},
    )
    Run.objects.filter(pk=run.pk).update(agent_session=session, turn=number)
    run.agent_session, run.turn = session, number
    message.status, message.run = SessionMessage.Status.STARTED, run
    message.save(update_fields=["status", "run"])
    return run


def carried_conversation(conversation: list | None) -> list | None:
    """The conversation a turn ended with, fit to go on from: a tool call the turn never
    made (it was interrupted) gets a result saying so, as the model's API requires."""
    if not conversation:
        return None
    carried = [dict(message) for message in conversation]
    answered = {m.get("tool_call_id") for m in carried if m.get("role") == "tool"}
    for message in [m for m in carried if m.get("role") == "assistant" and m.get("tool_calls")]:
        for call in message["tool_calls"]:
            if call["id"] not in answered:
                index = carried.index(message) + 1
                while index < len(carried) and carried[index].get("role") == "tool":
                    index += 1
                carried.insert(
                    index,
                    {
                        "role": "tool",
                        "tool_call_id": call["id"],
                        "name": call["function"]["name"],
                        "content": json.dumps({"error": "the turn was interrupted before this call ran"}),
                    },
                )
    return carried


def turn_ended(*, run: Run) -> None:
    """A turn ended (``run_ended``, inside the transaction storing its end, which holds
    the run's lock): the next queued message starts the next turn, or the session is
    ready for one."""
    with transaction.atomic():
        session = Session.objects.select_for_update().filter(pk=run.agent_session_id).first()
        if session is None or session.status == Session.Status.CLOSED:  # deleted, or closed
            return
        message = (
            SessionMessage.objects.filter(session=session, status=SessionMessage.Status.QUEUED).order_by("id").first()
        )
        if message is not None:
            _start_turn(session, message, actor=run.api_key if run.api_key_id else session.started_by)
        else:
            event_append(session=session, type="ready", data={"session": session.pk})


def session_interrupt(*, session: Session, actor, ip=None) -> Run:
    """Stop the running turn at once, whether the model is streaming (within a second),
    a tool is running (when it returns) or it waits for an approval (at once), keeping
    everything stored so far. 409 when no turn is running."""
    run = active_turn(session)
    if run is None:
        raise Conflict("no turn is running: there is nothing to interrupt")
    try:
        return run_cancel(run=run, actor=actor, ip=ip, action="session.interrupt")
    except Conflict:
        raise Conflict("the turn already ended: there is nothing to interrupt") from None


def session_decide(
    *, session: Session, actor, approve: bool, approval_id: int | None = None, arguments=None, reason="", ip=None
) -> Approval:
    """Approve (with edited ``arguments``) or reject (``reason`` is told to the model) the
    pending approval of the running turn (the one named, or the only one). 409 when none
    is pending."""
    pending = Approval.objects.filter(run__agent_session=session, status=Approval.Status.PENDING)
    if approval_id is not None:
        pending = pending.filter(pk=approval_id)
    approval = pending.select_related("run__project__organization").order_by("id").first()
    if approval is None:
        raise Conflict("no approval is pending in this session" + (f" with id {approval_id}" if approval_id else ""))
    return approval_decide(approval=approval, actor=actor, approve=approve, arguments=arguments, reason=reason, ip=ip)


def session_approve_all(*, session: Session, actor, tools: list[str], ip=None) -> Session:
    """Set the tools this session approves without asking (``["*"]``: every tool; ``[]``
    revokes). The running turn's pending approvals of those tools are approved now."""
    if not isinstance(tools, list) or not all(isinstance(t, str) and 0 < len(t) <= 64 for t in tools):
        raise InvalidRequest("tools must be a list of tool names, or ['*'] for every tool")
    tools = sorted(set(tools))
    with transaction.atomic():
        session = _locked(session)
        if session.status == Session.Status.CLOSED and tools:
            raise Conflict("this session is closed")
        session.approve_all = tools
        session.save(update_fields=["approve_all"])
        audit_record(
            organization=session.project.organization,
            actor=actor,
            action="session.approve_all",
            target=session,
            data={"tools": tools},
            ip=ip,
        )
        event_append(session=session, type="approve_all", data={"tools": tools})
    if tools:
        covered = Approval.objects.filter(run__agent_session=session, status=Approval.Status.PENDING)
        if "*" not in tools:
            covered = covered.filter(tool_name__in=tools)
        for approval in covered.select_related("run__project__organization"):
            try:
                person = None if isinstance(actor, ApiKey) else actor  # decided_by is a user
                approval_decide(approval=approval, actor=person, approve=True, reason="approve-all", ip=ip)
            except Conflict:
                pass  # decided or expired meanwhile
    return session


def session_undo(*, session: Session, actor, ip=None) -> Run:
    """The last turn leaves the conversation of the turns to come; its run is kept and
    marked undone. 409 while a turn runs, or when no turn is left to undo."""
    with transaction.atomic():
        session = _locked(session)
        if active_turn(session) is not None:
            raise Conflict("a turn is running: interrupt it before undoing")
        last = Run.objects.filter(agent_session=session, undone=False).order_by("-turn").first()
        if last is None:
            raise Conflict("there is no turn to undo")
        Run.objects.filter(pk=last.pk).update(undone=True)
        last.undone = True
        audit_record(organization=session.project.organization, actor=actor, action="session.undo", target=last, ip=ip)
        event_append(session=session, type="undone", data={"run": last.pk, "turn": last.turn})
    return last


def session_compact(*, session: Session, actor) -> Session:
    """Compact now: the next turn shrinks the conversation (a summary the model writes)
    before its first model call, and says so with a ``compacted`` event."""
    with transaction.atomic():
        session = _locked(session)
        if session.status == Session.Status.CLOSED:
            raise Conflict("this session is closed")
        session.compact_requested = True
        session.save(update_fields=["compact_requested"])
    return session


def session_close(*, session: Session, actor, ip=None) -> Session:
    """Close the session: queued messages are dropped, the running turn is interrupted,
    and no message is taken any more. 409 when already closed."""
    with transaction.atomic():
        session = _locked(session)
        if session.status == Session.Status.CLOSED:
            raise Conflict("this session is already closed")
        session.status = Session.Status.CLOSED
        session.updated_at = timezone.now()
        session.save(update_fields=["status", "updated_at"])
        dropped = SessionMessage.objects.filter(session=session, status=SessionMessage.Status.QUEUED).update(
            status=SessionMessage.Status.DROPPED
        )
        audit_record(
            organization=session.project.organization, actor=actor, action="session.close", target=session, ip=ip
        )
        event_append(session=session, type="closed", data={"session": session.pk, "dropped_messages": dropped})
    # After the session's lock is let go: the run's lock comes first (module docstring).
    run = active_turn(session)
    if run is not None:
        try:
            run_cancel(run=run, actor=actor, ip=ip, action="session.interrupt")
        except Conflict:
            pass  # it ended meanwhile
    return session


def session_delete(*, session: Session, actor, ip=None) -> None:
    """Delete the session and its events; its turns stay as runs (stopped if running)."""
    run = active_turn(session)
    if run is not None:
        try:
            run_cancel(run=run, actor=actor, ip=ip, action="session.interrupt")
        except Conflict:
            pass
    with transaction.atomic():
        session = _locked(session)
        audit_record(
            organization=session.project.organization,
            actor=actor,
            action="session.delete",
            target=session,
            data={"title": session.title},
            ip=ip,
        )
        session.delete()


def session_get(*, project, session_id: int) -> Session:
    session = (
        Session.objects.filter(project=project, pk=session_id)
        .select_related("agent", "agent_version", "started_by", "project__organization")
        .first()
    )
    if session is None:
        raise NotFound("session not found")
    return session
