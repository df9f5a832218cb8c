"""The billing API: spend (JSON or CSV) and budget status for the organization's
owners and admins and for a project's API keys with ``read`` (a CI pipeline failing a
build on cost), and budgets created, changed and deleted by owners and admins, the
roles of the billing page. See docs/api.md, "Billing"."""

from __future__ import annotations

from django.db.models import Q
from drf_spectacular.utils import extend_schema
from rest_framework import status
from rest_framework.response import Response

from agentops.api.base import OrganizationEndpoint, ProjectEndpoint
from agentops.api.idempotency import idempotent
from agentops.csvexport import csv_response, plain_number
from agentops.errors import InvalidRequest
from agentops.models import ApiKey, Project
from billing import budgets, carbon, spend
from billing.api import serializers as s
from billing.models import Budget, BudgetAlert

# The ledger's measures, in the order of the spend tables (billing.spend.SUMS).
MEASURES = tuple(spend.SUMS)
# Money is a decimal string in JSON; in the CSV, named as on the billing page's export.
MONEY = {"cost", "reported_cost", "reported_computed_cost"}
CSV_NAMES = {
    "cost": "cost_usd",
    "reported_cost": "reported_cost_usd",
    "reported_computed_cost": "reported_steps_computed_cost_usd",
}


def _query(request, *, allow_project: bool) -> dict:
    data = dict(request.query_params.items())
    if not allow_project and "project" in data:
        raise InvalidRequest("project: this endpoint is one project's already; leave it out")
    serializer = s.SpendQuerySerializer(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _spend_response(*, organization, query: dict, project: Project | None, filename: str):
    window, group_by = query["window"], query["group_by"]
    rows = spend.spend_by(
        organization=organization, window=window, group_by=group_by, project=project, categories=query["category"]
    )
    if query["format"] == "csv":
        columns = [*group_by, *(["api_key_name"] if "api_key" in group_by else []), *MEASURES]
        return csv_response(
            f"{filename}-spend-{window.start}-{window.end}.csv",
            [CSV_NAMES.get(column, column) for column in columns],
            ([row[column] for column in columns] for row in rows),
        )
    totals = {name: sum(row[name] for row in rows) for name in MEASURES}
    footprint = carbon.daily_footprint(organization=organization, window=window, project=project)["total"]
    return Response(
        {
            "start": window.start.isoformat(),
            "end": window.end.isoformat(),
            "group_by": list(group_by),
            "categories": list(query["category"]) or list(spend.CATEGORIES),
            "currency": "USD",
            "totals": {name: plain_number(value) if name in MONEY else value for name, value in totals.items()},
            "carbon": footprint.as_json(),
            "rows": [
                {
                    key: value.isoformat() if key == "day" else plain_number(value) if key in MONEY else value
                    for key, value in row.items()
                }
                for row in rows
            ],
        }
    )


class _FormatParameter:
    """``?format=csv`` is the spend's own parameter: DRF's content negotiation, which
    reads ``format`` too, must not refuse it (the CSV is written by agentops.csvexport)."""

    def perform_content_negotiation(self, request, force=False):
        return super().perform_content_negotiation(request, force=True)


class OrganizationSpendView(_FormatParameter, OrganizationEndpoint):
    """The organization's spend over a date range, grouped (JSON or CSV)."""

    permissions = {"GET": "billing:read"}

    @extend_schema(parameters=[s.SpendQuerySerializer], responses={200: dict})
    def get(self, request, org_slug):
        query = _query(request, allow_project=True)
        project = None
        if query.get("project"):
            project = Project.objects.filter(organization=self.organization, slug=query["project"]).first()
            if project is None:
                raise InvalidRequest(f"project: no project {query['project']!r} in this organization")
        return _spend_response(
            organization=self.organization, query=query, project=project, filename=self.organization.slug
        )


class ProjectSpendView(_FormatParameter, ProjectEndpoint):
    """One project's spend (API keys of the project with ``read`` too)."""

    permissions = {"GET": "billing:read"}

    @extend_schema(parameters=[s.SpendQuerySerializer], responses={200: dict})
    def get(self, request, org_slug, project_slug):
        query = _query(request, allow_project=False)
        return _spend_response(
            organization=self.organization,
            query=query,
            project=self.project,
            filename=f"{self.organization.slug}-{self.project.slug}",
        )


def _targets(organization, data: dict) -> dict:
    """The body's project slug and API key id as the objects the services take (404-like
    400 for another tenant's: they are simply not found in this organization)."""
    fields = dict(data)
    if fields.get("project"):
        project = Project.objects.filter(organization=organization, slug=fields["project"]).first()
        if project is None:
            raise InvalidRequest(f"project: no project {fields['project']!r} in this organization")
        fields["project"] = project
    if fields.get("api_key"):
        key = ApiKey.objects.filter(organization=organization, pk=fields["api_key"], revoked_at__isnull=True).first()
        if key is None:
            raise InvalidRequest(f"api_key: no active API key {fields['api_key']} in this organization")
        fields["api_key"] = key
    if "scope" not in fields and "api_key" in fields and fields["api_key"]:
        fields["scope"] = Budget.Scope.API_KEY
    elif "scope" not in fields and "project" in fields and fields["project"]:
        fields["scope"] = Budget.Scope.PROJECT
    return fields


class BudgetListView(OrganizationEndpoint):
    """The organization's budgets with their status; create one (owners and admins)."""

    permissions = {"GET": "billing:read", "POST": "budget:write"}
    queryset = Budget.objects.select_related("project", "api_key").order_by("id")
    serializer_class = s.BudgetSerializer

    def get(self, request, org_slug):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.BudgetSerializer(page, many=True).data)

    @extend_schema(request=s.BudgetWriteSerializer, responses={201: s.BudgetSerializer})
    @idempotent
    def post(self, request, org_slug):
        serializer = s.BudgetWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        fields = _targets(self.organization, serializer.validated_data)
        budget = budgets.budget_create(organization=self.organization, actor=request.user, ip=self.client_ip, **fields)
        return Response(s.BudgetSerializer(budget).data, status=status.HTTP_201_CREATED)


class BudgetDetailView(OrganizationEndpoint):
    """One budget: read it with its status, change it, delete it (and its alerts)."""

    permissions = {"GET": "billing:read", "PATCH": "budget:write", "DELETE": "budget:write"}
    queryset = Budget.objects.select_related("project", "api_key")
    lookup_url_kwarg = "budget_id"
    serializer_class = s.BudgetSerializer

    def get(self, request, org_slug, budget_id):
        return Response(s.BudgetSerializer(self.get_object()).data)

    @extend_schema(request=s.BudgetWriteSerializer, responses={200: s.BudgetSerializer})
    def patch(self, request, org_slug, budget_id):
        serializer = s.BudgetWriteSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        budget = self.get_object()
        fields = _targets(self.organization, serializer.validated_data)
        budget = budgets.budget_update(budget=budget, actor=request.user, ip=self.client_ip, **fields)
        budget = Budget.objects.select_related("project", "api_key").get(pk=budget.pk)
        return Response(s.BudgetSerializer(budget).data)

    @extend_schema(responses={204: None})
    def delete(self, request, org_slug, budget_id):
        budgets.budget_delete(budget=self.get_object(), actor=request.user, ip=self.client_ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


class AlertListView(OrganizationEndpoint):
    """The alerts raised (budget thresholds crossed, spend spikes), newest first. What
    alerts are raised is set on each budget (thresholds, emails, webhook)."""

    permissions = {"GET": "billing:read"}
    queryset = BudgetAlert.objects.order_by("-created_at", "-id")
    serializer_class = s.AlertSerializer

    def get(self, request, org_slug):
        page = self.paginate_queryset(self.get_queryset())
        return self.get_paginated_response(s.AlertSerializer(page, many=True).data)


class ProjectBudgetStatusView(ProjectEndpoint):
    """The budgets that cover this project (the organization's, the project's and its
    API keys'), each with its status: what a CI pipeline checks before spending more."""

    permissions = {"GET": "billing:read"}

    @extend_schema(responses={200: dict})
    def get(self, request, org_slug, project_slug):
        covering = (
            Q(scope=Budget.Scope.ORGANIZATION)
            | Q(scope=Budget.Scope.PROJECT, project=self.project)
            | Q(scope=Budget.Scope.API_KEY, api_key__project=self.project)
        )
        rows = Budget.objects.filter(covering).select_related("project", "api_key").order_by("id")
        items = [
            {
                "id": budget.pk,
                "name": budget.name,
                "scope": budget.scope,
                "period": budget.period,
                "hard_limit": budget.hard_limit,
                **s.budget_status(budget),
            }
            for budget in rows
        ]
        return Response(
            {
                "project": self.project.slug,
                "budgets": items,
                "reached": any(item["reached"] for item in items),
                "blocking": any(item["blocking"] for item in items),
            }
        )
