"""Agents, their versions, tools, and starting or cancelling executed runs."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from agentops.api.base import ProjectEndpoint
from agentops.api.serializers import InputSerializer
from agentops.errors import NotFound
from runs import selectors
from runs.api.serializers import RunDetailSerializer
from runs.execution import run_cancel, run_start
from runs.models import Agent, AgentVersion, WebhookTool
from runs.services.agents import agent_create, agent_version_create, webhook_tool_create, webhook_tool_delete
from runs.tools.registry import available_tools


class AgentVersionSerializer(serializers.ModelSerializer):
    class Meta:
        model = AgentVersion
        fields = [
            "number",
            "model",
            "system_prompt",
            "tools",
            "approval_tools",
            "parameters",
            "step_limit",
            "created_at",
        ]


class AgentSerializer(serializers.ModelSerializer):
    version = serializers.SerializerMethodField()

    class Meta:
        model = Agent
        fields = ["id", "name", "description", "latest_version", "version", "created_at", "updated_at"]

    def get_version(self, agent) -> dict:
        version = AgentVersion.objects.filter(agent=agent, number=agent.latest_version).first()
        return AgentVersionSerializer(version).data if version else None


class AgentConfigSerializer(InputSerializer):
    model = serializers.CharField(max_length=200, required=False)
    system_prompt = serializers.CharField(required=False, allow_blank=True)
    tools = serializers.ListField(child=serializers.CharField(max_length=64), required=False)
    approval_tools = serializers.ListField(child=serializers.CharField(max_length=64), required=False)
    parameters = serializers.DictField(required=False)
    step_limit = serializers.IntegerField(required=False)


class AgentCreateSerializer(AgentConfigSerializer):
    name = serializers.CharField(max_length=100)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    model = serializers.CharField(max_length=200)


class RunStartSerializer(InputSerializer):
    agent = serializers.IntegerField(help_text="The agent's id.")
    version = serializers.IntegerField(required=False, help_text="A version number; the latest by default.")
    input = serializers.JSONField(help_text="The user's message (text or JSON).")
    parameters = serializers.DictField(
        required=False, help_text="Overrides: temperature, top_p, max_tokens, random_seed."
    )


class WebhookToolSerializer(serializers.ModelSerializer):
    class Meta:
        model = WebhookTool
        fields = ["id", "name", "description", "parameters", "url", "timeout_seconds", "created_at"]


class WebhookToolCreateSerializer(InputSerializer):
    name = serializers.CharField(max_length=64)
    url = serializers.CharField(max_length=500)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    parameters = serializers.DictField(required=False)
    timeout_seconds = serializers.FloatField(required=False, default=10.0)


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class AgentListView(ProjectEndpoint):
    """The project's agents; create one (its version 1)."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = AgentSerializer
    queryset = Agent.objects.filter(platform="")  # the platform's own agents (the analyst) are not listed
    pagination_class = None

    def get(self, request, org_slug, project_slug):
        return Response(AgentSerializer(self.get_queryset().order_by("name"), many=True).data)

    @extend_schema(request=AgentCreateSerializer, responses={201: AgentSerializer})
    def post(self, request, org_slug, project_slug):
        data = _valid(AgentCreateSerializer, request.data)
        agent = agent_create(
            project=self.project, actor=request.user if request.user.pk else None, ip=self.client_ip, **data
        )
        return Response(AgentSerializer(agent).data, status=status.HTTP_201_CREATED)


class AgentDetailView(ProjectEndpoint):
    """One agent; PATCH saves the change as a new version (versions never change)."""

    permissions = {"GET": "work:read", "PATCH": "work:write"}
    serializer_class = AgentSerializer
    queryset = Agent.objects.filter(platform="")  # the platform's own agents (the analyst) are not listed
    lookup_url_kwarg = "agent_id"

    def get(self, request, org_slug, project_slug, agent_id):
        return Response(AgentSerializer(self.get_object()).data)

    @extend_schema(request=AgentConfigSerializer)
    def patch(self, request, org_slug, project_slug, agent_id):
        data = _valid(AgentConfigSerializer, request.data)
        agent = self.get_object()
        agent_version_create(agent=agent, actor=request.user if request.user.pk else None, ip=self.client_ip, **data)
        agent.refresh_from_db()
        return Response(AgentSerializer(agent).data)


class AgentVersionListView(ProjectEndpoint):
    """Every version of an agent, newest first."""

    permissions = {"GET": "work:read"}
    serializer_class = AgentVersionSerializer
    queryset = AgentVersion.objects.filter(agent__platform="")
    pagination_class = None

    def get(self, request, org_slug, project_slug, agent_id):
        versions = self.get_queryset().filter(agent_id=agent_id).order_by("-number")
        if not versions.exists():
            raise NotFound("agent not found")
        return Response(AgentVersionSerializer(versions, many=True).data)


class ToolListView(ProjectEndpoint):
    """The tools agents of this project may use: built-ins and webhook tools."""

    permissions = {"GET": "work:read"}
    queryset = WebhookTool.objects.none()

    @extend_schema(responses={200: dict})
    def get(self, request, org_slug, project_slug):
        tools = available_tools(project=self.project)
        return Response(
            [
                {
                    "name": tool.name,
                    "description": tool.description,
                    "parameters": tool.parameters,
                    "builtin": tool.builtin,
                }
                for tool in tools.values()
            ]
        )


class WebhookToolListView(ProjectEndpoint):
    """Webhook tools; creating one answers its signing secret once."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = WebhookToolSerializer
    queryset = WebhookTool.objects.all()
    pagination_class = None

    def get(self, request, org_slug, project_slug):
        return Response(WebhookToolSerializer(self.get_queryset(), many=True).data)

    @extend_schema(request=WebhookToolCreateSerializer, responses={201: WebhookToolSerializer})
    def post(self, request, org_slug, project_slug):
        data = _valid(WebhookToolCreateSerializer, request.data)
        tool, secret = webhook_tool_create(
            project=self.project, actor=request.user if request.user.pk else None, ip=self.client_ip, **data
        )
        return Response({**WebhookToolSerializer(tool).data, "secret": secret}, status=status.HTTP_201_CREATED)


class WebhookToolDetailView(ProjectEndpoint):
    permissions = {"GET": "work:read", "DELETE": "work:write"}
    serializer_class = WebhookToolSerializer
    queryset = WebhookTool.objects.all()
    lookup_url_kwarg = "tool_id"

    def get(self, request, org_slug, project_slug, tool_id):
        return Response(WebhookToolSerializer(self.get_object()).data)

    def delete(self, request, org_slug, project_slug, tool_id):
        webhook_tool_delete(tool=self.get_object(), actor=request.user if request.user.pk else None, ip=self.client_ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


def start_run(view, request):
    """POST on the runs list: start a run of an agent; 202 with the queued run (poll
    `runs/{id}/` for its status). Accepts `Idempotency-Key` (runs.api.views wraps it)."""
    data = _valid(RunStartSerializer, request.data)
    agent = Agent.objects.filter(project=view.project, pk=data["agent"], platform="").first()
    if agent is None:
        raise NotFound("agent not found")
    run = run_start(
        project=view.project,
        agent=agent,
        actor=request.user if request.user.pk else None,
        input=data["input"],
        version_number=data.get("version"),
        parameters=data.get("parameters"),
        api_key=view.access.api_key,
        ip=view.client_ip,
    )
    return Response(
        RunDetailSerializer(selectors.run_detail(project=view.project, run_id=run.pk)).data,
        status=status.HTTP_202_ACCEPTED,
    )


class RunCancelView(ProjectEndpoint):
    """Cancel an executed run: a queued run stops at once, a running one before its next step."""

    permissions = {"POST": "work:write"}
    queryset = Agent.objects.none()

    @extend_schema(request=None, responses={202: RunDetailSerializer})
    def post(self, request, org_slug, project_slug, run_id):
        run = selectors.run_detail(project=self.project, run_id=run_id)
        run_cancel(run=run, actor=request.user if request.user.pk else None, ip=self.client_ip)
        return Response(
            RunDetailSerializer(selectors.run_detail(project=self.project, run_id=run_id)).data,
            status=status.HTTP_202_ACCEPTED,
        )
