"""API of exports (docs/exports.md): export destinations of the organization, a
project's export jobs (create, list, detail, retry, cancel), export schedules, and the
outcome of its Weights & Biases logging (list, retry of a failed one).

Reading jobs and schedules is `work:read` (viewers too); everything that starts,
changes or stops an export, and every destination, is `export:write` (owners and
admins): an export copies all of a project's data out with the organization's storage
credentials. Credentials are write-only: responses show their last characters.
"""

from __future__ import annotations

from django.urls import path
from drf_spectacular.utils import OpenApiParameter, extend_schema
from rest_framework import serializers, status
from rest_framework.response import Response

from agentops import url_prefixes
from agentops.api.base import OrganizationEndpoint, ProjectEndpoint
from agentops.api.idempotency import idempotent
from agentops.api.pagination import CreatedCursorPagination
from agentops.api.serializers import InputSerializer
from agentops.errors import InvalidRequest, NotFound
from evals.bulk_export import services
from evals.bulk_export.kinds import EXPORT_KIND_CHOICES
from evals.bulk_export.tables import TABLE_NAMES
from evals.models import ExportDestination, ExportJob, ExportSchedule, WandbExport
from evals.services.wandb_export import wandb_retry


class DestinationSerializer(serializers.ModelSerializer):
    class Meta:
        model = ExportDestination
        fields = ["id", "name", "kind", "config", "credentials_hint", "created_at"]
        read_only_fields = fields


class DestinationCreateSerializer(InputSerializer):
    name = serializers.CharField(max_length=100)
    kind = serializers.ChoiceField(choices=ExportDestination.Kind.choices)
    config = serializers.DictField(
        default=dict,
        help_text="folder: path (inside EXPORT_ROOT). s3: endpoint_url, bucket, prefix, region. "
        "hf_hub: endpoint (empty: https://huggingface.co), namespace.",
    )
    credentials = serializers.DictField(
        default=dict,
        write_only=True,
        help_text="s3: access_key_id and secret_access_key. hf_hub: token. Stored encrypted.",
    )


class ExportJobSerializer(serializers.ModelSerializer):
    destination = serializers.SerializerMethodField()
    rows = serializers.IntegerField(source="rows_written", read_only=True)

    class Meta:
        model = ExportJob
        fields = [
            "id",
            "kind",
            "status",
            "destination",
            "start_date",
            "end_date",
            "tables",
            "options",
            "progress",
            "rows",
            "files",
            "error",
            "log",
            "attempt",
            "retry_of",
            "schedule",
            "cancel_requested",
            "created_at",
            "started_at",
            "ended_at",
        ]
        read_only_fields = fields

    def get_destination(self, job) -> dict:
        return {"id": job.destination_id, "name": job.destination_label}


class ExportCreateSerializer(InputSerializer):
    kind = serializers.ChoiceField(
        choices=EXPORT_KIND_CHOICES,
        default="parquet",
        help_text="parquet: the project's tables for a range of days. hf_dataset, hf_results, hf_leaderboard, "
        "hf_trajectory: a push to a Hugging Face Hub dataset repository; hf_import: a Hub dataset's split into a "
        "dataset.",
    )
    destination = serializers.IntegerField(help_text="An export destination's id (an hf_hub one for the Hub kinds).")
    start_date = serializers.DateField(required=False, help_text="parquet: the first day.")
    end_date = serializers.DateField(required=False, help_text="parquet: the last day, included (whole UTC days).")
    tables = serializers.ListField(
        child=serializers.CharField(max_length=32),
        required=False,
        default=list,
        help_text=f"parquet: any of {', '.join(TABLE_NAMES)}; empty: all.",
    )
    options = serializers.DictField(
        required=False,
        default=dict,
        help_text="The Hub kinds: repo_id, private (default true), split; hf_dataset: dataset, version; "
        "hf_results: experiment; hf_leaderboard: dataset; hf_trajectory: session or run; hf_import: revision, columns "
        "({input, expected, key, metadata}), dataset or new_dataset (docs/exports.md).",
    )


class ScheduleSerializer(serializers.ModelSerializer):
    destination = serializers.SerializerMethodField()

    class Meta:
        model = ExportSchedule
        fields = ["id", "kind", "every", "destination", "tables", "next_start", "enabled", "created_at"]
        read_only_fields = fields

    def get_destination(self, schedule) -> dict:
        return {"id": schedule.destination_id, "name": schedule.destination.name}


class ScheduleCreateSerializer(InputSerializer):
    destination = serializers.IntegerField()
    every = serializers.ChoiceField(choices=ExportSchedule.Every.choices)
    tables = serializers.ListField(child=serializers.CharField(max_length=32), required=False, default=list)


def _valid(serializer_class, data) -> dict:
    serializer = serializer_class(data=data)
    serializer.is_valid(raise_exception=True)
    return serializer.validated_data


def _actor(request):
    return request.user if request.user.pk else None


class DestinationListView(OrganizationEndpoint):
    """The organization's export destinations; owners and admins add one."""

    permissions = {"GET": "export:write", "POST": "export:write"}
    queryset = ExportDestination.objects.all()
    serializer_class = DestinationSerializer
    pagination_class = None

    def get(self, request, org_slug):
        return Response(DestinationSerializer(self.get_queryset(), many=True).data)

    @extend_schema(request=DestinationCreateSerializer, responses={201: DestinationSerializer})
    def post(self, request, org_slug):
        data = _valid(DestinationCreateSerializer, request.data)
        destination = services.destination_create(
            organization=self.organization, actor=_actor(request), ip=self.client_ip, **data
        )
        return Response(DestinationSerializer(destination).data, status=status.HTTP_201_CREATED)


class DestinationDetailView(OrganizationEndpoint):
    """One destination; DELETE removes it (its past exports keep its name)."""

    permissions = {"GET": "export:write", "DELETE": "export:write"}
    queryset = ExportDestination.objects.all()
    serializer_class = DestinationSerializer

    def _destination(self, destination_id) -> ExportDestination:
        destination = self.get_queryset().filter(pk=destination_id).first()
        if destination is None:
            raise NotFound("export destination not found")
        return destination

    def get(self, request, org_slug, destination_id):
        return Response(DestinationSerializer(self._destination(destination_id)).data)

    def delete(self, request, org_slug, destination_id):
        services.destination_delete(
            destination=self._destination(destination_id), actor=_actor(request), ip=self.client_ip
        )
        return Response(status=status.HTTP_204_NO_CONTENT)


class ExportEndpoint(ProjectEndpoint):
    queryset = ExportJob.objects.all()
    serializer_class = ExportJobSerializer

    def get_job(self, export_id: int) -> ExportJob:
        job = self.get_queryset().filter(pk=export_id).first()
        if job is None:
            raise NotFound("export not found")
        return job


class ExportListView(ExportEndpoint):
    """The project's exports, newest first; owners and admins start one (it runs on a
    worker: poll its detail for progress)."""

    permissions = {"GET": "work:read", "POST": "export:write"}

    def get(self, request, org_slug, project_slug):
        page = self.paginate_queryset(self.get_queryset().order_by("-created_at", "-id"))
        return self.get_paginated_response(ExportJobSerializer(page, many=True).data)

    @extend_schema(request=ExportCreateSerializer, responses={201: ExportJobSerializer})
    def post(self, request, org_slug, project_slug):
        data = _valid(ExportCreateSerializer, request.data)
        job = services.export_create(
            project=self.project,
            actor=_actor(request),
            destination_id=data["destination"],
            start_date=data.get("start_date"),
            end_date=data.get("end_date"),
            tables=data["tables"],
            kind=data["kind"],
            options=data["options"],
            ip=self.client_ip,
        )
        return Response(ExportJobSerializer(job).data, status=status.HTTP_201_CREATED)


class ExportDetailView(ExportEndpoint):
    """One export: status, progress (rows per table), files, log, failure reason."""

    permissions = {"GET": "work:read"}

    def get(self, request, org_slug, project_slug, export_id):
        return Response(ExportJobSerializer(self.get_job(export_id)).data)


class ExportRetryView(ExportEndpoint):
    """A new attempt of a failed or cancelled export (409 otherwise)."""

    permissions = {"POST": "export:write"}

    @extend_schema(request=None, responses={201: ExportJobSerializer})
    def post(self, request, org_slug, project_slug, export_id):
        job = services.export_retry(job=self.get_job(export_id), actor=_actor(request), ip=self.client_ip)
        return Response(ExportJobSerializer(job).data, status=status.HTTP_201_CREATED)


class ExportCancelView(ExportEndpoint):
    """Cancel a queued export at once, a running one after its current chunk (409 once ended)."""

    permissions = {"POST": "export:write"}

    @extend_schema(request=None, responses={200: ExportJobSerializer})
    def post(self, request, org_slug, project_slug, export_id):
        job = services.export_cancel(job=self.get_job(export_id), actor=_actor(request), ip=self.client_ip)
        return Response(ExportJobSerializer(job).data)


class ScheduleListView(ProjectEndpoint):
    """The project's export schedules; owners and admins add one."""

    permissions = {"GET": "work:read", "POST": "export:write"}
    queryset = ExportSchedule.objects.select_related("destination")
    serializer_class = ScheduleSerializer
    pagination_class = None

    def get(self, request, org_slug, project_slug):
        return Response(ScheduleSerializer(self.get_queryset(), many=True).data)

    @extend_schema(request=ScheduleCreateSerializer, responses={201: ScheduleSerializer})
    def post(self, request, org_slug, project_slug):
        data = _valid(ScheduleCreateSerializer, request.data)
        schedule = services.schedule_create(
            project=self.project,
            actor=_actor(request),
            destination_id=data["destination"],
            every=data["every"],
            tables=data["tables"],
            ip=self.client_ip,
        )
        return Response(ScheduleSerializer(schedule).data, status=status.HTTP_201_CREATED)


class ScheduleDetailView(ProjectEndpoint):
    """One schedule; DELETE stops it (its exports stay)."""

    permissions = {"GET": "work:read", "DELETE": "export:write"}
    queryset = ExportSchedule.objects.select_related("destination")
    serializer_class = ScheduleSerializer

    def _schedule(self, schedule_id) -> ExportSchedule:
        schedule = self.get_queryset().filter(pk=schedule_id).first()
        if schedule is None:
            raise NotFound("export schedule not found")
        return schedule

    def get(self, request, org_slug, project_slug, schedule_id):
        return Response(ScheduleSerializer(self._schedule(schedule_id)).data)

    def delete(self, request, org_slug, project_slug, schedule_id):
        services.schedule_delete(schedule=self._schedule(schedule_id), actor=_actor(request), ip=self.client_ip)
        return Response(status=status.HTTP_204_NO_CONTENT)


class WandbExportSerializer(serializers.ModelSerializer):
    kind = serializers.SerializerMethodField()
    run = serializers.SerializerMethodField()
    experiment = serializers.SerializerMethodField()

    class Meta:
        model = WandbExport
        fields = ["id", "kind", "run", "experiment", "status", "attempts", "error", "logged_at", "updated_at"]
        read_only_fields = fields

    def get_kind(self, export) -> str:
        return "run" if export.run_id else "experiment"

    def get_run(self, export) -> dict | None:
        run = export.run
        return {"id": run.pk, "name": run.name or run.trace_id} if run else None

    def get_experiment(self, export) -> dict | None:
        experiment = export.experiment
        return {"id": experiment.pk, "name": experiment.name} if experiment else None


class WandbExportPagination(CreatedCursorPagination):
    ordering = ("-updated_at", "-id")


class WandbExportEndpoint(ProjectEndpoint):
    queryset = WandbExport.objects.select_related("run", "experiment")
    serializer_class = WandbExportSerializer
    pagination_class = WandbExportPagination


class WandbExportListView(WandbExportEndpoint):
    """The project's Weights & Biases logging of runs and experiments, the most recently
    changed first; ``?status=queued|logged|failed`` filters."""

    permissions = {"GET": "work:read"}

    @extend_schema(
        parameters=[
            OpenApiParameter("status", str, enum=list(WandbExport.Status.values), description="Only these rows.")
        ]
    )
    def get(self, request, org_slug, project_slug):
        exports = self.get_queryset()
        wanted = request.query_params.get("status")
        if wanted:
            if wanted not in WandbExport.Status.values:
                raise InvalidRequest(f"unknown status {wanted!r}: one of {', '.join(WandbExport.Status.values)}")
            exports = exports.filter(status=wanted)
        page = self.paginate_queryset(exports)
        return self.get_paginated_response(WandbExportSerializer(page, many=True).data)


class WandbExportRetryView(WandbExportEndpoint):
    """Queue a failed W&B logging again (409 when it has not failed, or when a setting
    must change first)."""

    permissions = {"POST": "export:write"}

    @extend_schema(request=None, responses={202: WandbExportSerializer})
    @idempotent
    def post(self, request, org_slug, project_slug, wandb_export_id):
        export = self.get_queryset().filter(pk=wandb_export_id).first()
        if export is None:
            raise NotFound("W&B logging not found")
        export = wandb_retry(export=export, actor=_actor(request), ip=self.client_ip)
        return Response(WandbExportSerializer(export).data, status=status.HTTP_202_ACCEPTED)


org = url_prefixes.API_ORGANIZATION
project = url_prefixes.API_PROJECT

urlpatterns = [
    path(f"{org}/export-destinations/", DestinationListView.as_view(), name="api-export-destination-list"),
    path(
        f"{org}/export-destinations/<int:destination_id>/",
        DestinationDetailView.as_view(),
        name="api-export-destination-detail",
    ),
    path(f"{project}/exports/", ExportListView.as_view(), name="api-export-list"),
    path(f"{project}/exports/wandb/", WandbExportListView.as_view(), name="api-wandb-export-list"),
    path(
        f"{project}/exports/wandb/<int:wandb_export_id>/retry/",
        WandbExportRetryView.as_view(),
        name="api-wandb-export-retry",
    ),
    path(f"{project}/exports/<int:export_id>/", ExportDetailView.as_view(), name="api-export-detail"),
    path(f"{project}/exports/<int:export_id>/retry/", ExportRetryView.as_view(), name="api-export-retry"),
    path(f"{project}/exports/<int:export_id>/cancel/", ExportCancelView.as_view(), name="api-export-cancel"),
    path(f"{project}/export-schedules/", ScheduleListView.as_view(), name="api-export-schedule-list"),
    path(
        f"{project}/export-schedules/<int:schedule_id>/",
        ScheduleDetailView.as_view(),
        name="api-export-schedule-detail",
    ),
]
