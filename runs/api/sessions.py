"""Interactive sessions (docs/sessions.md): list and open them, send messages, decide
approvals, approve-all, interrupt, undo, compact, close, delete. Their event streams
(Server-Sent Events) are served by runs.sse. Viewers read, members act."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from agentops.api.base import ProjectEndpoint
from agentops.api.idempotency import idempotent
from agentops.api.serializers import InputSerializer, refuse_unknown_fields
from agentops.errors import NotFound
from runs.api.approvals import ApprovalSerializer
from runs.models import Agent, Approval, Run, Session, SessionMessage
from runs.services import sessions as services


class TurnSerializer(serializers.ModelSerializer):
    run = serializers.IntegerField(source="pk")

    class Meta:
        model = Run
        fields = ["run", "turn", "status", "undone", "input", "output", "error", "total_cost", "started_at", "ended_at"]


class QueuedMessageSerializer(serializers.ModelSerializer):
    class Meta:
        model = SessionMessage
        fields = ["id", "content", "status", "run", "created_at"]


class AgentSessionSerializer(serializers.ModelSerializer):
    agent = serializers.CharField(source="agent.name")
    agent_id = serializers.IntegerField()
    version = serializers.IntegerField(source="agent_version.number")
    started_by = serializers.EmailField(source="started_by.email", default=None)
    last_event_id = serializers.IntegerField(source="event_seq")

    class Meta:
        model = Session
        fields = [
            "id",
            "title",
            "status",
            "agent",
            "agent_id",
            "version",
            "approve_all",
            "compact_requested",
            "started_by",
            "last_event_id",
            "created_at",
            "updated_at",
        ]


class AgentSessionDetailSerializer(AgentSessionSerializer):
    turns = serializers.SerializerMethodField()
    queued = serializers.SerializerMethodField()
    pending_approvals = serializers.SerializerMethodField()

    class Meta(AgentSessionSerializer.Meta):
        fields = [*AgentSessionSerializer.Meta.fields, "turns", "queued", "pending_approvals"]

    def get_turns(self, session) -> list[dict]:
        return TurnSerializer(Run.objects.filter(agent_session=session).order_by("turn"), many=True).data

    def get_queued(self, session) -> list[dict]:
        queued = SessionMessage.objects.filter(session=session, status=SessionMessage.Status.QUEUED)
        return QueuedMessageSerializer(queued, many=True).data

    def get_pending_approvals(self, session) -> list[dict]:
        pending = Approval.objects.filter(run__agent_session=session, status=Approval.Status.PENDING)
        return ApprovalSerializer(pending.select_related("decided_by"), many=True).data


class SessionCreateSerializer(InputSerializer):
    agent = serializers.IntegerField(help_text="The agent's id.")
    version = serializers.IntegerField(required=False, min_value=1, help_text="Its latest version unless given.")
    title = serializers.CharField(required=False, allow_blank=True, max_length=200, default="")


class MessageSerializer(InputSerializer):
    content = serializers.CharField(max_length=100_000, help_text="The user's message.")


class DecisionSerializer(InputSerializer):
    approval = serializers.IntegerField(
        required=False, help_text="The approval's id (the only pending one if left out)."
    )
    decision = serializers.ChoiceField(choices=["approve", "reject"])
    arguments = serializers.JSONField(required=False, help_text="Edited arguments to approve instead.")
    reason = serializers.CharField(required=False, allow_blank=True, default="", max_length=2000)


class ApproveAllSerializer(InputSerializer):
    tools = serializers.ListField(
        child=serializers.CharField(max_length=64), help_text='Tool names, or ["*"] for every tool.'
    )


class SessionEndpoint(ProjectEndpoint):
    """One session of the project (another project's or organization's is 404)."""

    queryset = Session.objects.all()
    permissions = {"POST": "work:write"}

    def session(self, session_id: int) -> Session:
        return services.session_get(project=self.project, session_id=session_id)

    @property
    def actor(self):
        return self.request.user if self.request.user.pk else self.request.auth

    def detail(self, session: Session, code=status.HTTP_200_OK) -> Response:
        return Response(AgentSessionDetailSerializer(self.session(session.pk)).data, status=code)


class AgentSessionListView(SessionEndpoint):
    """The project's interactive sessions, newest first; POST opens one."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = AgentSessionSerializer

    def get(self, request, org_slug, project_slug):
        sessions = (
            self.get_queryset().select_related("agent", "agent_version", "started_by").order_by("-updated_at", "-id")
        )
        page = self.paginate_queryset(sessions)
        return self.get_paginated_response(AgentSessionSerializer(page, many=True).data)

    @extend_schema(request=SessionCreateSerializer, responses={201: AgentSessionDetailSerializer})
    @idempotent
    def post(self, request, org_slug, project_slug):
        data = SessionCreateSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        agent = Agent.objects.filter(project=self.project, pk=data.validated_data["agent"], platform="").first()
        if agent is None:
            raise NotFound("agent not found")
        session = services.session_create(
            project=self.project,
            agent=agent,
            actor=self.actor,
            api_key=self.access.api_key,
            title=data.validated_data["title"],
            version_number=data.validated_data.get("version"),
            ip=self.client_ip,
        )
        return self.detail(session, status.HTTP_201_CREATED)


class AgentSessionDetailView(SessionEndpoint):
    """One session: its turns, queued messages and pending approvals; DELETE deletes it
    (its turns stay as runs)."""

    permissions = {"GET": "work:read", "DELETE": "work:write"}
    serializer_class = AgentSessionDetailSerializer

    def get(self, request, org_slug, project_slug, session_id):
        return self.detail(self.session(session_id))

    def delete(self, request, org_slug, project_slug, session_id):
        services.session_delete(session=self.session(session_id), actor=self.actor, ip=self.client_ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


class SessionMessageView(SessionEndpoint):
    """Send a user message: a turn starts, or the message waits for the running one."""

    @extend_schema(request=MessageSerializer, responses={202: QueuedMessageSerializer})
    @idempotent
    def post(self, request, org_slug, project_slug, session_id):
        data = MessageSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        message = services.session_send(
            session=self.session(session_id),
            actor=self.actor,
            content=data.validated_data["content"],
            api_key=self.access.api_key,
        )
        return Response(QueuedMessageSerializer(message).data, status=status.HTTP_202_ACCEPTED)


class SessionApprovalView(SessionEndpoint):
    """Approve (optionally with edited arguments) or reject the pending tool call."""

    @extend_schema(request=DecisionSerializer, responses={200: ApprovalSerializer})
    def post(self, request, org_slug, project_slug, session_id):
        data = DecisionSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        values = data.validated_data
        approval = services.session_decide(
            session=self.session(session_id),
            actor=self.request.user if self.request.user.pk else None,
            approve=values["decision"] == "approve",
            approval_id=values.get("approval"),
            arguments=values.get("arguments"),
            reason=values["reason"],
            ip=self.client_ip,
        )
        return Response(ApprovalSerializer(approval).data)


class SessionApproveAllView(SessionEndpoint):
    """PUT sets the tools the session approves without asking; DELETE revokes them all."""

    permissions = {"PUT": "work:write", "DELETE": "work:write"}
    serializer_class = AgentSessionDetailSerializer

    @extend_schema(request=ApproveAllSerializer, responses={200: AgentSessionDetailSerializer})
    def put(self, request, org_slug, project_slug, session_id):
        data = ApproveAllSerializer(data=request.data)
        data.is_valid(raise_exception=True)
        session = services.session_approve_all(
            session=self.session(session_id), actor=self.actor, tools=data.validated_data["tools"], ip=self.client_ip
        )
        return self.detail(session)

    @extend_schema(request=None, responses={200: AgentSessionDetailSerializer})
    def delete(self, request, org_slug, project_slug, session_id):
        session = services.session_approve_all(
            session=self.session(session_id), actor=self.actor, tools=[], ip=self.client_ip
        )
        return self.detail(session)


class SessionInterruptView(SessionEndpoint):
    """Stop the running turn, keeping what it stored."""

    @extend_schema(request=None, responses={202: AgentSessionDetailSerializer})
    def post(self, request, org_slug, project_slug, session_id):
        refuse_unknown_fields(request.data, [])
        session = self.session(session_id)
        services.session_interrupt(session=session, actor=self.actor, ip=self.client_ip)
        return self.detail(session, status.HTTP_202_ACCEPTED)


class SessionUndoView(SessionEndpoint):
    """The last turn leaves the conversation (its run is kept, marked undone)."""

    @extend_schema(request=None, responses={200: AgentSessionDetailSerializer})
    def post(self, request, org_slug, project_slug, session_id):
        refuse_unknown_fields(request.data, [])
        session = self.session(session_id)
        services.session_undo(session=session, actor=self.actor, ip=self.client_ip)
        return self.detail(session)


class SessionCompactView(SessionEndpoint):
    """Compact now: the next turn compacts the conversation first."""

    @extend_schema(request=None, responses={202: AgentSessionDetailSerializer})
    def post(self, request, org_slug, project_slug, session_id):
        refuse_unknown_fields(request.data, [])
        session = services.session_compact(session=self.session(session_id), actor=self.actor)
        return self.detail(session, status.HTTP_202_ACCEPTED)


class SessionCloseView(SessionEndpoint):
    """Close the session: no more messages; the running turn is interrupted."""

    @extend_schema(request=None, responses={200: AgentSessionDetailSerializer})
    def post(self, request, org_slug, project_slug, session_id):
        refuse_unknown_fields(request.data, [])
        session = services.session_close(session=self.session(session_id), actor=self.actor, ip=self.client_ip)
        return self.detail(session)
