"""API of evaluations: online evaluation rules (score a sampled share of the project's
incoming runs with an evaluator, in the background)."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from agentops import url_prefixes
from agentops.api.base import ProjectEndpoint
from agentops.api.serializers import InputSerializer
from agentops.errors import NotFound
from evals.models import OnlineRule
from evals.services import online


class OnlineRuleSerializer(serializers.ModelSerializer):
    evaluator = serializers.SerializerMethodField()

    class Meta:
        model = OnlineRule
        fields = ["id", "evaluator", "sampling_rate", "filters", "enabled", "scored_count", "cursor_at", "created_at"]
        read_only_fields = fields

    def get_evaluator(self, rule) -> dict:
        return {"id": rule.evaluator_id, "name": rule.evaluator.name, "kind": rule.evaluator.kind}


class OnlineRuleCreateSerializer(InputSerializer):
    evaluator = serializers.CharField(max_length=64, help_text="The evaluator's id or name (not a human one).")
    sampling_rate = serializers.FloatField(default=1.0, help_text="The share of matching runs scored, 0 to 1.")
    filters = serializers.DictField(
        required=False, default=dict, help_text="agent_name, environment, tag: runs must match each one given."
    )
    enabled = serializers.BooleanField(default=True)


class OnlineRuleUpdateSerializer(InputSerializer):
    sampling_rate = serializers.FloatField(required=False)
    filters = serializers.DictField(required=False)
    enabled = serializers.BooleanField(required=False)


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class OnlineRuleEndpoint(ProjectEndpoint):
    queryset = OnlineRule.objects.all()
    serializer_class = OnlineRuleSerializer

    def get_rule(self, rule_id: int) -> OnlineRule:
        rule = self.get_queryset().filter(pk=rule_id).select_related("evaluator").first()
        if rule is None:
            raise NotFound("online rule not found")
        return rule


class OnlineRuleListView(OnlineRuleEndpoint):
    """The project's online evaluation rules; members create one (it scores runs that
    end from now on)."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    pagination_class = None

    def get(self, request, org_slug, project_slug):
        return Response(OnlineRuleSerializer(online.rule_list(project=self.project), many=True).data)

    @extend_schema(request=OnlineRuleCreateSerializer, responses={201: OnlineRuleSerializer})
    def post(self, request, org_slug, project_slug):
        data = _valid(OnlineRuleCreateSerializer, request.data)
        evaluator = data["evaluator"].strip()
        rule = online.rule_create(
            project=self.project,
            actor=self.access.actor,
            evaluator=int(evaluator) if evaluator.isdecimal() else evaluator,
            sampling_rate=data["sampling_rate"],
            filters=data["filters"],
            enabled=data["enabled"],
            ip=self.client_ip,
        )
        return Response(OnlineRuleSerializer(rule).data, status=status.HTTP_201_CREATED)


class OnlineRuleDetailView(OnlineRuleEndpoint):
    """One online rule; PATCH changes its sampling rate, filters or `enabled` (the
    evaluator stays); DELETE removes it (its scores stay on their runs)."""

    permissions = {"GET": "work:read", "PATCH": "work:write", "DELETE": "work:write"}

    def get(self, request, org_slug, project_slug, rule_id):
        return Response(OnlineRuleSerializer(self.get_rule(rule_id)).data)

    @extend_schema(request=OnlineRuleUpdateSerializer, responses={200: OnlineRuleSerializer})
    def patch(self, request, org_slug, project_slug, rule_id):
        rule = self.get_rule(rule_id)
        data = _valid(OnlineRuleUpdateSerializer, request.data)
        rule = online.rule_update(rule=rule, actor=self.access.actor, ip=self.client_ip, **data)
        return Response(OnlineRuleSerializer(rule).data)

    def delete(self, request, org_slug, project_slug, rule_id):
        online.rule_delete(rule=self.get_rule(rule_id), actor=self.access.actor, ip=self.client_ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


project = url_prefixes.API_PROJECT

urlpatterns = [
    path(f"{project}/online-rules/", OnlineRuleListView.as_view(), name="api-online-rule-list"),
    path(f"{project}/online-rules/<int:rule_id>/", OnlineRuleDetailView.as_view(), name="api-online-rule-detail"),
]
