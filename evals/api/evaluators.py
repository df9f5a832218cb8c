"""API of evaluations: evaluators (rules, LLM judges, webhooks, human scales), and
trying one on a given output."""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from agentops import url_prefixes
from agentops.api.base import ProjectEndpoint
from agentops.api.serializers import InputSerializer
from evals.models import Evaluator
from evals.scoring import Subject, evaluate, passed, spec_of
from evals.services.evaluators import evaluator_archive, evaluator_create, evaluator_input, evaluator_update


class EvaluatorSerializer(serializers.ModelSerializer):
    threshold = serializers.FloatField(source="pass_threshold")
    has_secret = serializers.SerializerMethodField()

    class Meta:
        model = Evaluator
        fields = [
            "id",
            "name",
            "kind",
            "description",
            "config",
            "threshold",
            "has_secret",
            "archived",
            "created_at",
            "updated_at",
        ]

    def get_has_secret(self, evaluator) -> bool:
        return bool(evaluator.secret_ciphertext)


class EvaluatorCreateSerializer(InputSerializer):
    name = serializers.CharField(max_length=64)
    kind = serializers.ChoiceField(choices=Evaluator.Kind.choices)
    description = serializers.CharField(required=False, allow_blank=True, default="")
    config = serializers.DictField(required=False, default=dict)
    threshold = serializers.FloatField(required=False, default=0.5)
    secret = serializers.CharField(
        required=False, allow_blank=True, default="", help_text="Webhook kind: your own signing secret."
    )


class EvaluatorUpdateSerializer(InputSerializer):
    kind = serializers.CharField(required=False, help_text="Cannot change; accepted when it is the same.")
    name = serializers.CharField(max_length=64, required=False)
    description = serializers.CharField(required=False, allow_blank=True)
    config = serializers.DictField(required=False, help_text="Replaces the whole configuration.")
    threshold = serializers.FloatField(required=False)
    secret = serializers.CharField(required=False, allow_blank=True, help_text="Webhook kind: a new signing secret.")
    archived = serializers.BooleanField(required=False, help_text="false restores an archived evaluator.")


class EvaluatorTestSerializer(InputSerializer):
    input = serializers.JSONField(required=False, allow_null=True, default=None)
    expected = serializers.JSONField(required=False, allow_null=True, default=None)
    output = serializers.JSONField(required=False, allow_null=True, default=None)
    metadata = serializers.DictField(required=False, default=dict)
    cost = serializers.DecimalField(max_digits=18, decimal_places=9, required=False, allow_null=True, default=None)
    latency_ms = serializers.IntegerField(required=False, allow_null=True, default=None, min_value=0)
    tokens = serializers.IntegerField(required=False, default=0, min_value=0)
    steps = serializers.ListField(child=serializers.DictField(), required=False, allow_null=True, default=None)
    tool_calls = serializers.ListField(child=serializers.DictField(), required=False, allow_null=True, default=None)


class OutcomeSerializer(serializers.Serializer):
    value = serializers.FloatField(allow_null=True)
    passed = serializers.BooleanField(allow_null=True)
    reasoning = serializers.CharField()
    details = serializers.DictField()
    error = serializers.CharField()


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


class EvaluatorListView(ProjectEndpoint):
    """The project's evaluators (``?archived=true`` lists the archived ones too;
    ``?kind=`` filters); create one. A webhook evaluator's signing secret is in the
    create response, once."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = EvaluatorSerializer
    queryset = Evaluator.objects.all()
    pagination_class = None

    def get(self, request, org_slug, project_slug):
        evaluators = self.get_queryset().order_by("name")
        if request.query_params.get("archived", "").lower() not in ("1", "true", "yes"):
            evaluators = evaluators.filter(archived=False)
        if kind := request.query_params.get("kind"):
            evaluators = evaluators.filter(kind=kind)
        return Response(EvaluatorSerializer(evaluators, many=True).data)

    @extend_schema(request=EvaluatorCreateSerializer, responses={201: EvaluatorSerializer})
    def post(self, request, org_slug, project_slug):
        data = _valid(EvaluatorCreateSerializer, request.data)
        evaluator, secret = evaluator_create(
            project=self.project,
            actor=self.access.actor,
            kind=data["kind"],
            **evaluator_input(data),
            ip=self.client_ip,
        )
        body = EvaluatorSerializer(evaluator).data
        if secret:
            body["secret"] = secret
        return Response(body, status=status.HTTP_201_CREATED)


class EvaluatorDetailView(ProjectEndpoint):
    """One evaluator; PATCH changes it (not its kind), DELETE archives it."""

    permissions = {"GET": "work:read", "PATCH": "work:write", "DELETE": "work:write"}
    serializer_class = EvaluatorSerializer
    queryset = Evaluator.objects.all()
    lookup_url_kwarg = "evaluator_id"

    def get(self, request, org_slug, project_slug, evaluator_id):
        return Response(EvaluatorSerializer(self.get_object()).data)

    @extend_schema(request=EvaluatorUpdateSerializer, responses={200: EvaluatorSerializer})
    def patch(self, request, org_slug, project_slug, evaluator_id):
        data = _valid(EvaluatorUpdateSerializer, request.data)
        evaluator = evaluator_update(
            evaluator=self.get_object(),
            actor=self.access.actor,
            name=data.get("name"),
            description=data.get("description"),
            config=data.get("config"),
            pass_threshold=data.get("threshold"),
            secret=data.get("secret") or None,
            archived=data.get("archived"),
            kind=data.get("kind"),
            ip=self.client_ip,
        )
        return Response(EvaluatorSerializer(evaluator).data)

    def delete(self, request, org_slug, project_slug, evaluator_id):
        evaluator_archive(evaluator=self.get_object(), actor=self.access.actor, ip=self.client_ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


class EvaluatorTestView(ProjectEndpoint):
    """Score a given input, expected and output (and optionally cost, latency, steps and
    tool calls) with the evaluator, without a run: try a rule before using it. LLM
    judges and webhooks are really called."""

    permissions = {"POST": "work:write"}
    serializer_class = EvaluatorSerializer
    queryset = Evaluator.objects.all()
    lookup_url_kwarg = "evaluator_id"

    @extend_schema(request=EvaluatorTestSerializer, responses={200: OutcomeSerializer})
    def post(self, request, org_slug, project_slug, evaluator_id):
        evaluator = self.get_object()
        data = _valid(EvaluatorTestSerializer, request.data)
        subject = Subject.reported(
            item={"input": data["input"], "expected": data["expected"], "metadata": data["metadata"]},
            output=data["output"],
            cost=data["cost"],
            latency_ms=data["latency_ms"],
            tokens=data["tokens"],
            steps=data["steps"],
            tool_calls=data["tool_calls"],
        )
        spec = spec_of(evaluator)
        outcome = evaluate(spec, subject, organization=self.organization, project=self.project, source="try")
        return Response(outcome_body(spec, outcome))


def outcome_body(spec: dict, outcome) -> dict:
    return {
        "value": outcome.value,
        "passed": passed(spec, outcome.value),
        "reasoning": outcome.reasoning,
        "details": outcome.details,
        "error": outcome.error,
    }


project = url_prefixes.API_PROJECT
evaluator = f"{project}/evaluators/<int:evaluator_id>"

urlpatterns = [
    path(f"{project}/evaluators/", EvaluatorListView.as_view(), name="api-evaluator-list"),
    path(f"{evaluator}/", EvaluatorDetailView.as_view(), name="api-evaluator-detail"),
    path(f"{evaluator}/test/", EvaluatorTestView.as_view(), name="api-evaluator-test"),
]
