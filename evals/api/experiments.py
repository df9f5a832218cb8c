"""Experiments over the API: start one (CI does, with a project API key), follow it,
read its per-item results, report results from an outside harness, cancel, and ask
the quality gate."""

from __future__ import annotations

from django.urls import path, reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.renderers import JSONRenderer
from rest_framework.response import Response

from agentops import url_prefixes
from agentops.api.base import ProjectEndpoint
from agentops.api.idempotency import idempotent
from agentops.api.lookup import by_name_or_id
from agentops.api.pagination import CreatedCursorPagination
from agentops.api.serializers import InputSerializer
from agentops.errors import InvalidRequest, NotFound
from evals import exports, selectors
from evals.models import Dataset, Evaluator, Experiment, ExperimentResult
from evals.services.experiments import (
    MAX_CONCURRENCY,
    experiment_cancel,
    experiment_complete,
    experiment_start,
    results_report,
)
from evals.services.gate import gate_check
from runs.models import Agent


class ExperimentSerializer(serializers.ModelSerializer):
    dataset = serializers.SerializerMethodField()
    dataset_version = serializers.IntegerField(source="dataset_version.number")
    agent = serializers.SerializerMethodField()
    progress = serializers.SerializerMethodField()
    total_cost = serializers.DecimalField(max_digits=18, decimal_places=9, coerce_to_string=True)
    evaluators = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = Experiment
        fields = [
            "id",
            "name",
            "kind",
            "status",
            "dataset",
            "dataset_version",
            "agent",
            "model",
            "parameters",
            "evaluators",
            "branch",
            "commit",
            "metadata",
            "concurrency",
            "item_count",
            "completed_count",
            "error_count",
            "progress",
            "summary",
            "total_cost",
            "total_tokens",
            "error",
            "created_at",
            "started_at",
            "ended_at",
            "url",
        ]

    def get_dataset(self, experiment) -> dict:
        return {"id": experiment.dataset_id, "name": experiment.dataset.name}

    def get_agent(self, experiment) -> dict:
        return {"name": experiment.agent_name, "version": experiment.agent_version_label}

    def get_progress(self, experiment) -> float:
        return (experiment.completed_count / experiment.item_count) if experiment.item_count else 0.0

    def get_evaluators(self, experiment) -> list[dict]:
        return [
            {"name": spec["name"], "kind": spec["kind"], "threshold": spec.get("threshold")}
            for spec in experiment.evaluators
        ]

    def get_url(self, experiment) -> str:
        page = reverse(
            "evals:experiment",
            kwargs={
                "org_slug": experiment.project.organization.slug,
                "project_slug": experiment.project.slug,
                "experiment_id": experiment.pk,
            },
        )
        request = self.context.get("request")
        return request.build_absolute_uri(page) if request is not None else page


class ExperimentStartSerializer(InputSerializer):
    dataset = serializers.JSONField(help_text="The dataset's name or id.")
    dataset_version = serializers.IntegerField(required=False, allow_null=True, min_value=1, default=None)
    agent = serializers.JSONField(required=False, allow_null=True, default=None, help_text="The agent's name or id.")
    agent_version = serializers.IntegerField(required=False, allow_null=True, min_value=1, default=None)
    evaluators = serializers.ListField(child=serializers.CharField(max_length=64), allow_empty=False)
    kind = serializers.ChoiceField(choices=Experiment.Kind.choices, default=Experiment.Kind.EXECUTED)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    concurrency = serializers.IntegerField(min_value=1, max_value=MAX_CONCURRENCY, default=4)
    parameters = serializers.DictField(required=False, default=dict)
    branch = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    commit = serializers.CharField(max_length=100, required=False, allow_blank=True, default="")
    metadata = serializers.DictField(required=False, default=dict)


def experiment_start_settings(start: dict) -> dict:
    """experiment_start's keyword arguments that a checked ExperimentStartSerializer body
    gives as they are (the caller resolves the dataset, agent and evaluators it names):
    the REST API and the assistant's start_experiment both start through it."""
    return {
        "dataset_version_number": start["dataset_version"],
        "agent_version_number": start["agent_version"],
        "kind": start["kind"],
        "name": start["name"],
        "concurrency": start["concurrency"],
        "parameters": start["parameters"],
        "branch": start["branch"],
        "commit": start["commit"],
        "metadata": start["metadata"],
    }


class ResultSerializer(serializers.ModelSerializer):
    input = serializers.JSONField(source="item.input")
    expected = serializers.JSONField(source="item.expected")
    passed = serializers.SerializerMethodField()
    cost = serializers.DecimalField(max_digits=18, decimal_places=9, coerce_to_string=True)

    class Meta:
        model = ExperimentResult
        fields = [
            "id",
            "item_key",
            "status",
            "input",
            "expected",
            "output",
            "scores",
            "passed",
            "cost",
            "tokens",
            "latency_ms",
            "run_id",
            "error",
            "started_at",
            "ended_at",
        ]

    def get_passed(self, result) -> dict:
        thresholds = self.context["thresholds"]
        return {
            name: (None if value is None or thresholds.get(name) is None else value >= thresholds[name])
            for name, value in (result.scores or {}).items()
        }


class ResultsReportSerializer(InputSerializer):
    results = serializers.ListField(child=serializers.JSONField(), allow_empty=False)


class GateSerializer(InputSerializer):
    conditions = serializers.ListField(child=serializers.JSONField(), allow_empty=False)
    baseline = serializers.JSONField(required=False, allow_null=True, default=None)


class ResultPagination(CreatedCursorPagination):
    ordering = ("id",)
    page_size = 100


class ExperimentsEndpoint(ProjectEndpoint):
    queryset = Experiment.objects.none()

    def get_experiment(self) -> Experiment:
        experiment = (
            Experiment.objects.select_related("dataset", "dataset_version", "project__organization")
            .filter(project=self.project, pk=self.kwargs["experiment_id"])
            .first()
        )
        if experiment is None:
            raise NotFound("experiment not found")
        return experiment

    def represent(self, experiment: Experiment) -> dict:
        return ExperimentSerializer(experiment, context={"request": self.request}).data


class ExperimentListView(ExperimentsEndpoint):
    """GET: the project's experiments, newest first (filters: `dataset` name or id,
    `branch`, `status`). POST: start an experiment (202; `Idempotency-Key` honoured;
    members, or API keys with the `execute` scope). 402 when a hard budget is spent."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = ExperimentSerializer
    pagination_class = CreatedCursorPagination

    @extend_schema(
        parameters=[
            OpenApiParameter("dataset", str, description="Dataset name or id."),
            OpenApiParameter("branch", str),
            OpenApiParameter("status", str, enum=Experiment.Status.values),
        ]
    )
    def get(self, request, org_slug, project_slug):
        dataset_id = None
        if request.query_params.get("dataset"):
            value = request.query_params["dataset"]
            dataset_id = by_name_or_id(
                Dataset.objects.filter(project=self.project), int(value) if value.isdecimal() else value, "dataset"
            ).pk
        queryset = selectors.experiment_list(
            project=self.project,
            dataset_id=dataset_id,
            branch=request.query_params.get("branch", ""),
            status=request.query_params.get("status", ""),
        ).select_related("project__organization")
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(ExperimentSerializer(page, many=True, context={"request": request}).data)

    @extend_schema(request=ExperimentStartSerializer, responses={202: ExperimentSerializer})
    @idempotent
    def post(self, request, org_slug, project_slug):
        serializer = ExperimentStartSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        dataset = by_name_or_id(Dataset.objects.filter(project=self.project), data["dataset"], "dataset")
        agent = (
            by_name_or_id(Agent.objects.filter(project=self.project, platform=""), data["agent"], "agent")
            if data["agent"] is not None
            else None
        )
        evaluators = []
        for name in data["evaluators"]:
            evaluator = Evaluator.objects.filter(project=self.project, name=name).first()
            if evaluator is None:
                raise NotFound(f"no evaluator {name!r} in this project")
            evaluators.append(evaluator)
        experiment = experiment_start(
            project=self.project,
            actor=request.user if request.user.pk else None,
            dataset=dataset,
            agent=agent,
            evaluators=evaluators,
            **experiment_start_settings(data),
            api_key=self.access.api_key,
            ip=self.client_ip,
        )
        self.kwargs["experiment_id"] = experiment.pk
        return Response(self.represent(self.get_experiment()), status=status.HTTP_202_ACCEPTED)


class ExperimentDetailView(ExperimentsEndpoint):
    """One experiment: status, progress, and when it has ended each metric's mean with
    its 95% interval, pass rates, cost and latency (`summary`)."""

    permissions = {"GET": "work:read"}
    serializer_class = ExperimentSerializer

    def get(self, request, org_slug, project_slug, experiment_id):
        return Response(self.represent(self.get_experiment()))


class ExperimentResultsView(ExperimentsEndpoint):
    """GET: per-item results in item order (cursor-paginated). POST: report results of
    an external experiment (`{"results": [{"item", "output", "scores"?, "cost"?,
    "latency_ms"?, "tokens"?, "error"?, "steps"?, "tool_calls"?}]}`), all or none; the
    platform's evaluators score them on a worker."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = ResultSerializer
    pagination_class = ResultPagination

    def get(self, request, org_slug, project_slug, experiment_id):
        experiment = self.get_experiment()
        page = self.paginate_queryset(selectors.result_list(experiment=experiment))
        thresholds = {spec["name"]: spec.get("threshold") for spec in experiment.evaluators}
        return self.get_paginated_response(ResultSerializer(page, many=True, context={"thresholds": thresholds}).data)

    @extend_schema(request=ResultsReportSerializer, responses={202: ExperimentSerializer})
    def post(self, request, org_slug, project_slug, experiment_id):
        serializer = ResultsReportSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        experiment = self.get_experiment()
        accepted = results_report(experiment=experiment, results=serializer.validated_data["results"])
        return Response(
            {"accepted": accepted, "experiment": self.represent(self.get_experiment())},
            status=status.HTTP_202_ACCEPTED,
        )


class ExperimentCompleteView(ExperimentsEndpoint):
    """End an external experiment once its reported items are scored."""

    permissions = {"POST": "work:write"}

    @extend_schema(request=None, responses={200: ExperimentSerializer})
    def post(self, request, org_slug, project_slug, experiment_id):
        experiment_complete(
            experiment=self.get_experiment(), actor=request.user if request.user.pk else None, ip=self.client_ip
        )
        return Response(self.represent(self.get_experiment()))


class ExperimentCancelView(ExperimentsEndpoint):
    """Cancel a running experiment: no new items start, running ones are cancelled."""

    permissions = {"POST": "work:write"}

    @extend_schema(request=None, responses={200: ExperimentSerializer})
    def post(self, request, org_slug, project_slug, experiment_id):
        experiment_cancel(
            experiment=self.get_experiment(), actor=request.user if request.user.pk else None, ip=self.client_ip
        )
        return Response(self.represent(self.get_experiment()))


class ExperimentGateView(ExperimentsEndpoint):
    """The quality gate: `{"conditions": [{"metric", "comparator", "threshold",
    "relative"?}], "baseline": {"experiment": id} | {"branch": "main"} | null}` ->
    `{"status": "passed"|"failed", "conditions": [{"metric", "comparator", "threshold",
    "actual", "status", ...}]}`. 409 while the experiment runs."""

    permissions = {"POST": "work:read"}

    @extend_schema(request=GateSerializer, responses={200: dict})
    def post(self, request, org_slug, project_slug, experiment_id):
        serializer = GateSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        answer = gate_check(
            experiment=self.get_experiment(),
            conditions=serializer.validated_data["conditions"],
            baseline=serializer.validated_data["baseline"],
        )
        return Response(answer)


class DownloadNegotiation:
    """``?format=`` picks the download's format here, not DRF's renderer (which would
    answer 404 for csv and jsonl); errors still answer as JSON."""

    def perform_content_negotiation(self, request, force=False):
        return JSONRenderer(), JSONRenderer.media_type


def _export_format(request) -> str:
    value = request.query_params.get("format", "jsonl")
    if value not in ("csv", "jsonl"):
        raise InvalidRequest("format must be csv or jsonl")
    return value


class ExperimentExportView(DownloadNegotiation, ExperimentsEndpoint):
    """Every item's result as CSV or JSON Lines (`?format=csv|jsonl`, default jsonl),
    streamed: key, input, expected, output, each metric's score and pass, cost,
    latency, tokens, status, error, run id."""

    permissions = {"GET": "work:read"}

    @extend_schema(parameters=[OpenApiParameter("format", str, enum=["csv", "jsonl"])], responses={200: bytes})
    def get(self, request, org_slug, project_slug, experiment_id):
        experiment = self.get_experiment()
        return exports.experiment_download(
            request, experiment, format=_export_format(request), organization=self.organization
        )


class LeaderboardView(DownloadNegotiation, ExperimentsEndpoint):
    """A dataset's leaderboard: its ended experiments with each metric's mean and 95%
    interval, pass rate, cost, latency and date. `?format=json` (default) answers
    `{"metrics": [...], "rows": [...]}`; `csv` and `jsonl` download the rows.
    `?sort=<metric>|pass_rate|cost|latency|created|name&branch=&agent=&model=`."""

    permissions = {"GET": "work:read"}

    @extend_schema(
        parameters=[
            OpenApiParameter("format", str, enum=["json", "csv", "jsonl"]),
            OpenApiParameter("sort", str),
            OpenApiParameter("branch", str),
            OpenApiParameter("agent", str),
            OpenApiParameter("model", str),
        ],
        responses={200: dict},
    )
    def get(self, request, org_slug, project_slug, dataset_id):
        dataset = Dataset.objects.filter(project=self.project, pk=dataset_id).first()
        if dataset is None:
            raise NotFound("dataset not found")
        params = request.query_params
        names, rows = selectors.leaderboard(
            dataset=dataset,
            sort=params.get("sort", ""),
            branch=params.get("branch", ""),
            agent=params.get("agent", ""),
            model=params.get("model", ""),
        )
        file_format = params.get("format", "json")
        if file_format == "json":
            return Response({"metrics": names, "rows": list(exports.leaderboard_rows(dataset, names, rows))})
        return exports.leaderboard_download(
            request, dataset, names, rows, format=_export_format(request), organization=self.organization
        )


project = url_prefixes.API_PROJECT
experiment = f"{project}/experiments/<int:experiment_id>"
urlpatterns = [
    path(f"{project}/experiments/", ExperimentListView.as_view(), name="api-experiment-list"),
    path(f"{experiment}/", ExperimentDetailView.as_view(), name="api-experiment-detail"),
    path(f"{experiment}/results/", ExperimentResultsView.as_view(), name="api-experiment-results"),
    path(f"{experiment}/complete/", ExperimentCompleteView.as_view(), name="api-experiment-complete"),
    path(f"{experiment}/cancel/", ExperimentCancelView.as_view(), name="api-experiment-cancel"),
    path(f"{experiment}/gate/", ExperimentGateView.as_view(), name="api-experiment-gate"),
    path(f"{experiment}/export/", ExperimentExportView.as_view(), name="api-experiment-export"),
    path(f"{project}/datasets/<int:dataset_id>/leaderboard/", LeaderboardView.as_view(), name="api-leaderboard"),
]
