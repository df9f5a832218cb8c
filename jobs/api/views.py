"""GPU jobs over the API: submit (with its estimate), follow, read logs, cancel; the
hardware catalog with rates; the organization's compute backends and job secrets; and
the two endpoints an evaluation job calls with its own token."""

from __future__ import annotations

from django.urls import path, reverse
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.permissions import AllowAny
from rest_framework.response import Response
from rest_framework.views import APIView

from agentops import url_prefixes
from agentops.api.base import OrganizationEndpoint, ProjectEndpoint
from agentops.api.idempotency import idempotent
from agentops.api.lookup import by_name_or_id
from agentops.api.pagination import CreatedCursorPagination
from agentops.api.serializers import InputSerializer, refuse_unknown_fields
from agentops.errors import NotFound
from agentops.scoping import organization_scope
from evals.models import Dataset, Evaluator
from jobs import hardware as catalog
from jobs.auth import JobTokenAuthentication
from jobs.models import ComputeBackend, Job, JobSecret
from jobs.selectors import job_log_page
from jobs.services import (
    backend_create,
    backend_update,
    estimate,
    job_cancel,
    job_items,
    job_results,
    job_submit,
    offered_hardware,
    secret_delete,
    secret_set,
)


class JobSerializer(serializers.ModelSerializer):
    backend = serializers.SerializerMethodField()
    env = serializers.SerializerMethodField()
    estimated_cost = serializers.DecimalField(max_digits=18, decimal_places=9, coerce_to_string=True, allow_null=True)
    cost = serializers.DecimalField(max_digits=18, decimal_places=9, coerce_to_string=True, allow_null=True)
    events = serializers.SerializerMethodField()
    duration_seconds = serializers.FloatField(allow_null=True)
    experiment = serializers.SerializerMethodField()
    url = serializers.SerializerMethodField()

    class Meta:
        model = Job
        fields = [
            "id",
            "name",
            "kind",
            "status",
            "backend",
            "hardware",
            "image",
            "command",
            "env",
            "secret_names",
            "time_limit_seconds",
            "external_id",
            "exit_code",
            "error",
            "estimate",
            "estimated_cost",
            "cost",
            "duration_seconds",
            "log_line_count",
            "experiment",
            "events",
            "created_at",
            "submitted_at",
            "started_at",
            "ended_at",
            "url",
        ]

    def get_backend(self, job) -> dict:
        return {"id": job.backend_id, "name": job.backend.name, "kind": job.backend_kind}

    def get_env(self, job) -> dict:
        return dict(job.env)  # plain variables only: secrets are never stored here

    def get_events(self, job) -> list[dict]:
        return [
            {"status": event.status, "at": event.at.isoformat(), "message": event.message} for event in job.events.all()
        ]

    def get_experiment(self, job) -> dict | None:
        if job.experiment_id is None:
            return None
        return {"id": job.experiment_id, "status": job.experiment.status if job.experiment else None}

    def get_url(self, job) -> str:
        page = reverse(
            "jobs:detail",
            kwargs={"org_slug": job.project.organization.slug, "project_slug": job.project.slug, "job_id": job.pk},
        )
        request = self.context.get("request")
        return request.build_absolute_uri(page) if request is not None else page


class EvaluationSerializer(InputSerializer):
    dataset = serializers.JSONField(help_text="The dataset's name or id.")
    dataset_version = serializers.IntegerField(required=False, allow_null=True, min_value=1, default=None)
    evaluators = serializers.ListField(child=serializers.CharField(max_length=64), allow_empty=False)
    model = serializers.CharField(max_length=500, help_text="What the job evaluates (AGENTOPS_MODEL).")
    seconds_per_item = serializers.FloatField(required=False, allow_null=True, min_value=0.001, default=None)


class JobSubmitSerializer(InputSerializer):
    backend = serializers.JSONField(help_text="The compute backend's name or id.")
    hardware = serializers.CharField(max_length=32)
    name = serializers.CharField(max_length=200, required=False, allow_blank=True, default="")
    image = serializers.CharField(max_length=500, required=False, allow_blank=True, default="")
    command = serializers.JSONField(required=False, default=None, help_text="A list, or a shell-quoted text.")
    env = serializers.DictField(required=False, default=dict)
    secrets = serializers.ListField(child=serializers.CharField(max_length=128), required=False, default=list)
    time_limit_seconds = serializers.IntegerField(required=False, default=3600)
    evaluation = EvaluationSerializer(required=False, allow_null=True, default=None)


def job_submit_arguments(submission: dict) -> dict:
    """job_submit's keyword arguments from a checked JobSubmitSerializer submission whose names are
    resolved: the REST API and the assistant's submit_job both submit through it, so a field added
    to the submission reaches the service from both."""
    return {
        "backend": submission["backend"],
        "hardware": submission["hardware"],
        "name": submission["name"],
        "image": submission["image"],
        "command": submission["command"],
        "env": submission["env"],
        "secret_names": submission["secrets"],
        "time_limit_seconds": submission["time_limit_seconds"],
        "evaluation": submission["evaluation"],
    }


class JobsEndpoint(ProjectEndpoint):
    queryset = Job.objects.none()

    def get_job(self) -> Job:
        job = (
            Job.objects.select_related("backend", "project__organization", "experiment")
            .prefetch_related("events")
            .filter(project=self.project, pk=self.kwargs["job_id"])
            .first()
        )
        if job is None:
            raise NotFound("job not found")
        return job

    def represent(self, job: Job) -> dict:
        return JobSerializer(job, context={"request": self.request}).data

    def parse_submission(self, data) -> dict:
        serializer = JobSubmitSerializer(data=data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        backend = by_name_or_id(
            ComputeBackend.objects.filter(organization=self.organization), data["backend"], "backend"
        )
        evaluation = data["evaluation"]
        if evaluation:
            dataset = by_name_or_id(Dataset.objects.filter(project=self.project), evaluation["dataset"], "dataset")
            evaluators = [
                by_name_or_id(Evaluator.objects.filter(project=self.project), name, "evaluator")
                for name in evaluation["evaluators"]
            ]
            evaluation = {**evaluation, "dataset": dataset, "evaluators": evaluators}
        return {**data, "backend": backend, "evaluation": evaluation}


class JobListView(JobsEndpoint):
    """GET: the project's jobs, newest first (`?status=`). POST: submit a job (202;
    `Idempotency-Key`; members, or API keys with the `execute` scope); 402 when a hard
    budget is spent."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = JobSerializer
    pagination_class = CreatedCursorPagination

    @extend_schema(parameters=[OpenApiParameter("status", str, enum=Job.Status.values)])
    def get(self, request, org_slug, project_slug):
        queryset = (
            Job.objects.filter(project=self.project)
            .select_related("backend", "project__organization", "experiment")
            .prefetch_related("events")
        )
        if request.query_params.get("status"):
            queryset = queryset.filter(status=request.query_params["status"])
        page = self.paginate_queryset(queryset)
        return self.get_paginated_response(JobSerializer(page, many=True, context={"request": request}).data)

    @extend_schema(request=JobSubmitSerializer, responses={202: JobSerializer})
    @idempotent
    def post(self, request, org_slug, project_slug):
        data = self.parse_submission(request.data)
        job = job_submit(
            project=self.project,
            actor=request.user if request.user.pk else None,
            **job_submit_arguments(data),
            api_key=self.access.api_key,
            ip=self.client_ip,
        )
        self.kwargs["job_id"] = job.pk
        return Response(self.represent(self.get_job()), status=status.HTTP_202_ACCEPTED)


class JobEstimateView(JobsEndpoint):
    """What a job would cost, before submitting it: the body of a submission ->
    `{"amount", "hourly", "basis", "note", ...}` (`amount` null when the hardware has
    no price on that backend)."""

    permissions = {"POST": "work:read"}

    @extend_schema(request=JobSubmitSerializer, responses={200: dict})
    def post(self, request, org_slug, project_slug):
        data = self.parse_submission(request.data)
        items = None
        if data["evaluation"]:
            from evals.models import DatasetItem

            dataset = data["evaluation"]["dataset"]
            number = data["evaluation"]["dataset_version"] or dataset.latest_version
            items = DatasetItem.objects.filter(dataset=dataset).in_version(number).count()
        return Response(
            estimate(
                project=self.project,
                backend=data["backend"],
                hardware=data["hardware"],
                time_limit_seconds=data["time_limit_seconds"],
                items=items,
                seconds_per_item=(data["evaluation"] or {}).get("seconds_per_item"),
            )
        )


class JobDetailView(JobsEndpoint):
    """One job: status, timeline, estimate and actual cost, exit code, experiment."""

    permissions = {"GET": "work:read"}
    serializer_class = JobSerializer

    def get(self, request, org_slug, project_slug, job_id):
        return Response(self.represent(self.get_job()))


class JobLogsView(JobsEndpoint):
    """The job's log lines after line `after` (default 0), up to 1,000 per call:
    `{"lines": [{"number", "text", "at"}], "next_after": n, "ended": bool}`."""

    permissions = {"GET": "work:read"}

    @extend_schema(parameters=[OpenApiParameter("after", int)], responses={200: dict})
    def get(self, request, org_slug, project_slug, job_id):
        job = self.get_job()
        try:
            after = max(0, int(request.query_params.get("after", 0)))
        except ValueError:
            after = 0
        return Response(job_log_page(job=job, after=after))


class JobCancelView(JobsEndpoint):
    """Cancel a job (the backend is told within seconds); 409 once it has ended."""

    permissions = {"POST": "work:write"}

    @extend_schema(request=None, responses={202: JobSerializer})
    def post(self, request, org_slug, project_slug, job_id):
        job_cancel(job=self.get_job(), actor=request.user if request.user.pk else None, ip=self.client_ip)
        return Response(self.represent(self.get_job()), status=status.HTTP_202_ACCEPTED)


class HardwareView(ProjectEndpoint):
    """The hardware catalog: which of the organization's backends offer each type
    (`offered_by`), and at what hourly rate (`hourly_by_backend`, backends that offer it)."""

    permissions = {"GET": "work:read"}
    queryset = ComputeBackend.objects.none()

    @extend_schema(responses={200: dict})
    def get(self, request, org_slug, project_slug):
        backends = list(ComputeBackend.objects.filter(organization=self.organization, enabled=True))
        offered = {backend.pk: offered_hardware(backend) for backend in backends}
        hardware = []
        for item in catalog.CATALOG.values():
            rates = {}
            for backend in backends:
                if item.name not in offered[backend.pk]:
                    continue
                price = catalog.hourly_rate(
                    hardware=item.name, backend_kind=backend.kind, organization_id=self.organization.pk
                )
                rates[backend.name] = str(price.hourly) if price is not None and price.hourly is not None else None
            hardware.append(
                {
                    "name": item.name,
                    "label": item.label,
                    "gpus": item.gpus,
                    "gpu_memory_gib": item.gpu_memory_gib,
                    "offered_by": list(rates),
                    "hourly_by_backend": rates,
                }
            )
        return Response({"hardware": hardware})


# -- organization settings: backends and secrets -----------------------------------------------


class BackendSerializer(serializers.ModelSerializer):
    class Meta:
        model = ComputeBackend
        fields = ["id", "name", "kind", "config", "credentials_hint", "enabled", "created_at", "updated_at"]


class BackendWriteSerializer(InputSerializer):
    name = serializers.CharField(max_length=64, required=False)
    kind = serializers.ChoiceField(choices=ComputeBackend.Kind.choices, required=False)
    config = serializers.DictField(required=False)
    credentials = serializers.DictField(required=False, help_text="Encrypted at rest; never shown again.")
    enabled = serializers.BooleanField(required=False)


class BackendListView(OrganizationEndpoint):
    """The organization's compute backends (admins): list, add."""

    permissions = {"GET": "secret:read", "POST": "secret:write"}
    serializer_class = BackendSerializer
    queryset = ComputeBackend.objects.all()
    pagination_class = None

    def get(self, request, org_slug):
        return Response(BackendSerializer(self.get_queryset(), many=True).data)

    @extend_schema(request=BackendWriteSerializer, responses={201: BackendSerializer})
    def post(self, request, org_slug):
        serializer = BackendWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        backend = backend_create(
            organization=self.organization,
            actor=request.user,
            name=data.get("name", ""),
            kind=data.get("kind", ""),
            config=data.get("config"),
            credentials=data.get("credentials"),
            ip=self.client_ip,
        )
        return Response(BackendSerializer(backend).data, status=status.HTTP_201_CREATED)


class BackendDetailView(OrganizationEndpoint):
    """One backend: change its settings, replace its credentials, turn it on or off."""

    permissions = {"GET": "secret:read", "PATCH": "secret:write"}
    serializer_class = BackendSerializer
    queryset = ComputeBackend.objects.all()
    lookup_url_kwarg = "backend_id"

    def get(self, request, org_slug, backend_id):
        return Response(BackendSerializer(self.get_object()).data)

    @extend_schema(request=BackendWriteSerializer, responses={200: BackendSerializer})
    def patch(self, request, org_slug, backend_id):
        serializer = BackendWriteSerializer(data=request.data, partial=True)
        serializer.is_valid(raise_exception=True)
        data = serializer.validated_data
        backend = backend_update(
            backend=self.get_object(),
            actor=request.user,
            config=data.get("config"),
            credentials=data.get("credentials"),
            enabled=data.get("enabled"),
            ip=self.client_ip,
        )
        return Response(BackendSerializer(backend).data)


class SecretSerializer(serializers.ModelSerializer):
    class Meta:
        model = JobSecret
        fields = ["name", "hint", "updated_at"]


class SecretWriteSerializer(InputSerializer):
    name = serializers.CharField(max_length=128)
    value = serializers.CharField(max_length=65536, trim_whitespace=False)


class SecretListView(OrganizationEndpoint):
    """Secrets jobs receive as environment variables (admins). Values are never shown."""

    permissions = {"GET": "secret:read", "POST": "secret:write"}
    serializer_class = SecretSerializer
    queryset = JobSecret.objects.all()
    pagination_class = None

    def get(self, request, org_slug):
        return Response(SecretSerializer(self.get_queryset(), many=True).data)

    @extend_schema(request=SecretWriteSerializer, responses={201: SecretSerializer})
    def post(self, request, org_slug):
        serializer = SecretWriteSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        secret = secret_set(
            organization=self.organization, actor=request.user, ip=self.client_ip, **serializer.validated_data
        )
        return Response(SecretSerializer(secret).data, status=status.HTTP_201_CREATED)


class SecretDetailView(OrganizationEndpoint):
    permissions = {"DELETE": "secret:write"}
    serializer_class = SecretSerializer
    queryset = JobSecret.objects.all()

    @extend_schema(responses={204: None})
    def delete(self, request, org_slug, name):
        secret_delete(organization=self.organization, actor=request.user, name=name, ip=self.client_ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


# -- what an evaluation job calls, with its own token -------------------------------------------


class JobTokenEndpoint(APIView):
    """Base of the endpoints a job calls with AGENTOPS_JOB_TOKEN: only its own job."""

    authentication_classes = [JobTokenAuthentication]
    permission_classes = [AllowAny]
    throttle_classes: list = []

    def job(self, request, job_id: int) -> Job:
        job = request.auth
        if job.pk != job_id:
            raise NotFound("this token belongs to another job")
        return job


class JobItemsView(JobTokenEndpoint):
    """The items the evaluation job evaluates, and its evaluators' names."""

    @extend_schema(responses={200: dict})
    def get(self, request, job_id):
        job = self.job(request, job_id)
        with organization_scope(job.organization_id):
            return Response(job_items(job=job))


class JobResultsView(JobTokenEndpoint):
    """Per-item results of the evaluation job: the body of an experiment's results."""

    @extend_schema(request=dict, responses={202: dict})
    def post(self, request, job_id):
        job = self.job(request, job_id)
        refuse_unknown_fields(request.data, ["results"])
        results = request.data.get("results") if isinstance(request.data, dict) else None
        with organization_scope(job.organization_id):
            accepted = job_results(job=job, results=results)
        return Response({"accepted": accepted}, status=status.HTTP_202_ACCEPTED)


project = url_prefixes.API_PROJECT
job = f"{project}/jobs/<int:job_id>"
org = url_prefixes.API_ORGANIZATION
urlpatterns = [
    path(f"{project}/jobs/", JobListView.as_view(), name="api-job-list"),
    path(f"{project}/jobs/estimate/", JobEstimateView.as_view(), name="api-job-estimate"),
    path(f"{job}/", JobDetailView.as_view(), name="api-job-detail"),
    path(f"{job}/logs/", JobLogsView.as_view(), name="api-job-logs"),
    path(f"{job}/cancel/", JobCancelView.as_view(), name="api-job-cancel"),
    path(f"{project}/hardware/", HardwareView.as_view(), name="api-hardware"),
    path(f"{org}/compute-backends/", BackendListView.as_view(), name="api-compute-backend-list"),
    path(f"{org}/compute-backends/<int:backend_id>/", BackendDetailView.as_view(), name="api-compute-backend-detail"),
    path(f"{org}/job-secrets/", SecretListView.as_view(), name="api-job-secret-list"),
    path(f"{org}/job-secrets/<str:name>/", SecretDetailView.as_view(), name="api-job-secret-detail"),
    path("jobs/<int:job_id>/items/", JobItemsView.as_view(), name="api-job-token-items"),
    path("jobs/<int:job_id>/results/", JobResultsView.as_view(), name="api-job-token-results"),
]
