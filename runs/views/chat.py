"""The chat page of interactive sessions (docs/sessions.md, The chat page): the project's
sessions in a sidebar, a new session with an agent, and one session's conversation
rendered from its stored events, then followed live by ``agentops/chat.js`` on the
session's event stream (``runs.sse``).

Every action is a POST to a view here that calls the same service as the REST API
(``runs.services.sessions``): send a message, decide an approval (approve, edit then
approve, reject with a reason), approve-all and its revocation, interrupt, undo,
compact, close. A form posted by the browser gets a redirect back with a message; the
same form sent by the script (``Accept: application/json``) gets JSON: ``{"message"}``,
or the API's error body with the service's status (400, 402, 409, 429). Viewers read,
members act; another tenant's session is a 404.

Nothing is chosen by the agent's kind: any session renders, whoever its agent is.
"""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.http import Http404, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse

from agentops import jsonsafe
from agentops.api.errors import error_body
from agentops.errors import InvalidRequest, NotFound, ServiceError
from agentops.pages import Need, ProjectPage
from runs import selectors
from runs.models import Agent, Run, Session
from runs.services import sessions as services
from runs.views.chat_timeline import conversation, turn_at

READ = Need("work:read", "see this project's sessions")
ACT = Need("work:write", "act in this project's sessions")
SIDEBAR_LIMIT = 100
MAX_MESSAGE = 100_000  # as the API's message serializer


def chat_urls(org_slug: str, project_slug: str, session: Session) -> dict[str, str]:
    base = reverse("runs:chat_session", args=[org_slug, project_slug, session.pk])
    return {
        "page": base,
        "live": f"{base}live/",
        "events": reverse("api-agent-session-events", args=[org_slug, project_slug, session.pk]),
        **{
            name: f"{base}{path}/"
            for name, path in {
                "messages": "messages",
                "approvals": "approvals",
                "approve_all": "approve-all",
                "revoke_all": "approve-all/revoke",
                "interrupt": "interrupt",
                "undo": "undo",
                "compact": "compact",
                "close": "close",
            }.items()
        },
    }


def controls_context(session: Session) -> dict[str, Any]:
    """What the toolbar and the queue show: the session's state now (not folded from
    events: they are redrawn whole, never appended to)."""
    active = services.active_turn(session)
    has_turn = Run.objects.filter(agent_session=session, undone=False).exists()
    return {
        "active_turn": active,
        "can_undo": active is None and has_turn,
        "queue": list(selectors.agent_session_queue(session=session)),
        "closed": session.status == Session.Status.CLOSED,
    }


class ChatPage(ProjectPage):
    """The sessions in a sidebar and, when one is chosen, its conversation up to the
    latest stored event, which the page's script then follows from."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, session_id=None):
        context: dict[str, Any] = {
            "sessions": list(selectors.agent_session_list(project=self.project)[:SIDEBAR_LIMIT]),
            "agents": list(
                Agent.objects.filter(project=self.project, latest_version__gt=0, platform="").order_by("name")
            ),
            "session": None,
        }
        if session_id is not None:
            session = services.session_get(project=self.project, session_id=session_id)
            # The last event id is read first: the turns are folded up to it and the
            # stream is followed from it, so nothing is shown twice or missed.
            upto = session.event_seq
            context.update(
                session=session,
                upto=upto,
                turns=conversation(session, upto),
                urls=chat_urls(org_slug, project_slug, session),
                **controls_context(session),
            )
        return self.render_page("runs/chat.html", context)


def _upto(request, session: Session) -> int:
    raw = request.GET.get("upto", "")
    if raw == "":
        return session.event_seq
    if not raw.isdecimal() or len(raw) > 18:
        raise InvalidRequest(f"upto must be an event id (a whole number from 0), not {raw[:40]!r}")
    return int(raw)


class ChatLiveFragment(ProjectPage):
    """What the script swaps in for a live event: the toolbar and the queue as they are
    now, and with ``run`` that turn folded up to the event ``upto``."""

    permissions = {"GET": READ}

    def get(self, request, org_slug, project_slug, session_id):
        session = services.session_get(project=self.project, session_id=session_id)
        upto = _upto(request, session)
        turn = None
        run_id = request.GET.get("run", "")
        if run_id:
            run = Run.objects.filter(agent_session=session, pk=run_id).first() if run_id.isdecimal() else None
            if run is None:
                raise Http404("turn not found")
            turn = turn_at(session, run, upto)
        return self.render_page(
            "runs/chat/_live.html",
            {
                "session": session,
                "turn": turn,
                "urls": chat_urls(org_slug, project_slug, session),
                **controls_context(session),
            },
        )


def wants_json(request) -> bool:
    return "application/json" in request.headers.get("Accept", "")


def refused(request, exc: ServiceError, back: str):
    """A service's refusal as the caller asked for it: the API's error body with its
    status (JSON), or a message on the page at ``back``."""
    if wants_json(request):
        return JsonResponse(error_body(exc.code, exc.message, exc.details), status=exc.status)
    messages.error(request, exc.message)
    return redirect(back)


class ChatSessionAction(ProjectPage):
    """A POST on one session: ``perform`` calls the service and says what was done."""

    permissions = {"POST": ACT}

    def post(self, request, org_slug, project_slug, session_id):
        session = services.session_get(project=self.project, session_id=session_id)
        back = reverse("runs:chat_session", args=[org_slug, project_slug, session.pk])
        try:
            done = self.perform(session, request.POST)
        except NotFound:
            raise
        except ServiceError as exc:
            return refused(request, exc, back)
        if wants_json(request):
            return JsonResponse({"message": done})
        messages.success(request, done)
        return redirect(back)

    def perform(self, session: Session, data) -> str:
        raise NotImplementedError


class ChatSendAction(ChatSessionAction):
    """Send a message: a turn starts, or the message waits for the running one."""

    def perform(self, session, data):
        content = data.get("content", "")
        if len(content) > MAX_MESSAGE:
            raise InvalidRequest(f"a message has at most {MAX_MESSAGE} characters")
        message = services.session_send(session=session, actor=self.request.user, content=content)
        return "Sent." if message.status == "started" else "Sent: it waits for the running turn."


class ChatDecideAction(ChatSessionAction):
    """Approve (as asked, or with the edited ``arguments``, a JSON object) or reject (with
    a ``reason`` told to the model) the pending approval named by ``approval``."""

    def perform(self, session, data):
        decision = data.get("decision")
        if decision not in ("approve", "reject"):
            raise InvalidRequest("choose to approve or reject the call; nothing was decided")
        approval_id = data.get("approval", "")
        if approval_id and not approval_id.isdecimal():
            raise InvalidRequest(f"approval must be an approval's id, not {approval_id[:40]!r}")
        arguments = None
        text = data.get("arguments", "").strip()
        if decision == "approve" and text:
            try:
                arguments = jsonsafe.loads(text)
            except ValueError as exc:
                raise InvalidRequest(f"the edited arguments are not valid JSON ({exc}); nothing was decided") from None
            if not isinstance(arguments, dict):
                raise InvalidRequest("the edited arguments must be a JSON object; nothing was decided")
        approval = services.session_decide(
            session=session,
            actor=self.request.user,
            approve=decision == "approve",
            approval_id=int(approval_id) if approval_id else None,
            arguments=arguments,
            reason=data.get("reason", "").strip()[:2000] if decision == "reject" else "",
            ip=self.ip,
        )
        if decision == "reject":
            return f"The call to {approval.tool_name} was rejected."
        return f"The call to {approval.tool_name} was approved" + (" with edited arguments." if arguments else ".")


class ChatApproveAllAction(ChatSessionAction):
    """Approve without asking, from now on, the calls of ``tools`` (``*``: every tool),
    added to those the session approves already."""

    def perform(self, session, data):
        tools = [tool.strip() for tool in data.getlist("tools") if tool.strip()]
        if not tools:
            raise InvalidRequest("name the tools to approve without asking, or * for every tool")
        chosen = sorted({*session.approve_all, *tools})
        if "*" in chosen:
            chosen = ["*"]
        services.session_approve_all(session=session, actor=self.request.user, tools=chosen, ip=self.ip)
        return (
            "Every tool call is approved without asking."
            if chosen == ["*"]
            else (f"Calls of {', '.join(chosen)} are approved without asking.")
        )


class ChatRevokeAllAction(ChatSessionAction):
    """Revoke approve-all: every call that needs approval asks again."""

    def perform(self, session, data):
        services.session_approve_all(session=session, actor=self.request.user, tools=[], ip=self.ip)
        return "Approve-all is revoked: calls that need approval ask again."


class ChatInterruptAction(ChatSessionAction):
    def perform(self, session, data):
        services.session_interrupt(session=session, actor=self.request.user, ip=self.ip)
        return "The turn is being interrupted."


class ChatUndoAction(ChatSessionAction):
    def perform(self, session, data):
        run = services.session_undo(session=session, actor=self.request.user, ip=self.ip)
        return f"Turn {run.turn} is undone: the next turns go on without it."


class ChatCompactAction(ChatSessionAction):
    def perform(self, session, data):
        services.session_compact(session=session, actor=self.request.user)
        return "The next turn compacts the conversation first."


class ChatCloseAction(ChatSessionAction):
    def perform(self, session, data):
        services.session_close(session=session, actor=self.request.user, ip=self.ip)
        return "The session is closed."


class ChatStartAction(ProjectPage):
    """Open a session with one of the project's agents (its latest version)."""

    permissions = {"POST": ACT}

    def post(self, request, org_slug, project_slug):
        agent_id = request.POST.get("agent", "")
        agent = (
            Agent.objects.filter(project=self.project, pk=agent_id, platform="").first()
            if agent_id.isdecimal()
            else None
        )
        try:
            if agent is None:
                raise InvalidRequest("choose one of the project's agents to talk to")
            session = services.session_create(
                project=self.project,
                agent=agent,
                actor=request.user,
                title=request.POST.get("title", "")[:200],
                ip=self.ip,
            )
        except NotFound:
            raise
        except ServiceError as exc:
            return refused(request, exc, reverse("runs:chat", args=[org_slug, project_slug]))
        url = reverse("runs:chat_session", args=[org_slug, project_slug, session.pk])
        if wants_json(request):
            return JsonResponse({"message": "Session opened.", "url": url}, status=201)
        return redirect(url)
