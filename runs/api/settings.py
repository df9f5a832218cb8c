"""The project's settings: PII redaction rules, retention, W&B logging."""

from drf_spectacular.utils import extend_schema
from rest_framework import serializers
from rest_framework.response import Response

from agentops.api.base import ProjectEndpoint
from agentops.api.serializers import InputSerializer
from runs.models import IngestSettings
from runs.services.settings import ingest_settings_get, ingest_settings_update


class IngestSettingsSerializer(InputSerializer):
    redact = serializers.ListField(
        child=serializers.ChoiceField(choices=IngestSettings.Redaction.choices),
        help_text="Built-in rules applied to every payload before it is stored.",
    )
    custom_patterns = serializers.ListField(
        child=serializers.CharField(max_length=500),
        required=False,
        default=list,
        help_text="Extra regular expressions; every match is replaced by [REDACTED].",
    )
    retention_days = serializers.IntegerField(
        min_value=1,
        max_value=3650,
        allow_null=True,
        required=False,
        default=None,
        help_text="Runs older than this are deleted nightly; null keeps them.",
    )
    wandb_logging = serializers.ChoiceField(
        choices=IngestSettings.WandbLogging.choices,
        required=False,
        help_text="What goes to Weights & Biases when the organization saved a W&B key: off, experiments "
        "(the default) or runs (every ended run, and experiments). Left out: unchanged.",
    )


class IngestSettingsView(ProjectEndpoint):
    """Read (members) or replace (admins and owners) the project's redaction rules, retention
    and W&B logging. Changes apply to data stored from then on; retention applies at the next
    nightly purge."""

    permissions = {"GET": "work:read", "PUT": "project:write"}
    serializer_class = IngestSettingsSerializer

    def get(self, request, org_slug, project_slug):
        settings = ingest_settings_get(project=self.project)
        return Response(IngestSettingsSerializer(settings).data)

    @extend_schema(request=IngestSettingsSerializer)
    def put(self, request, org_slug, project_slug):
        serializer = IngestSettingsSerializer(data=request.data)
        serializer.is_valid(raise_exception=True)
        settings = ingest_settings_update(
            project=self.project, actor=request.user, ip=self.client_ip, **serializer.validated_data
        )
        return Response(IngestSettingsSerializer(settings).data)
