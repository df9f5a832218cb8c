"""Approvals of a run's tool calls: list them, approve (optionally with edited
arguments) or reject."""

from __future__ import annotations

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from agentops.api.base import ProjectEndpoint
from agentops.api.serializers import InputSerializer
from agentops.errors import NotFound
from runs import selectors
from runs.models import Approval
from runs.services.approvals import approval_decide


class ApprovalSerializer(serializers.ModelSerializer):
    decided_by = serializers.EmailField(source="decided_by.email", read_only=True, default=None)

    class Meta:
        model = Approval
        fields = [
            "id",
            "call_id",
            "tool_name",
            "arguments",
            "approved_arguments",
            "status",
            "reason",
            "decided_by",
            "decided_at",
            "expires_at",
            "created_at",
        ]


class ApprovalDecisionSerializer(InputSerializer):
    approval = serializers.IntegerField(help_text="The approval's id.")
    decision = serializers.ChoiceField(choices=["approve", "reject"])
    arguments = serializers.JSONField(required=False, help_text="Edited arguments to approve instead.")
    reason = serializers.CharField(required=False, allow_blank=True, default="")


class RunApprovalsView(ProjectEndpoint):
    """The run's approvals; POST decides one, and the run continues on a worker."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = ApprovalSerializer
    queryset = Approval.objects.all()
    pagination_class = None

    def get(self, request, org_slug, project_slug, run_id):
        run = selectors.run_detail(project=self.project, run_id=run_id)
        return Response(ApprovalSerializer(self.get_queryset().filter(run=run), many=True).data)

    @extend_schema(request=ApprovalDecisionSerializer, responses={200: ApprovalSerializer})
    def post(self, request, org_slug, project_slug, run_id):
        run = selectors.run_detail(project=self.project, run_id=run_id)
        serializer = ApprovalDecisionSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        approval = self.get_queryset().filter(run=run, pk=data["approval"]).first()
        if approval is None:
            raise NotFound("approval not found")
        approval = approval_decide(
            approval=approval,
            actor=request.user if request.user.pk else None,
            approve=data["decision"] == "approve",
            arguments=data.get("arguments"),
            reason=data["reason"],
            ip=self.client_ip,
        )
        return Response(ApprovalSerializer(approval).data)
