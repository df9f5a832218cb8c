"""OTLP/HTTP receivers, mounted at ``/api/v1/otlp/`` so that an exporter configured with
``OTEL_EXPORTER_OTLP_ENDPOINT=https://host/api/v1/otlp`` finds ``/v1/traces`` and
``/v1/logs`` under it (no trailing slash, as the OTLP specification names them)."""

from django.urls import path

from runs.api.otlp import OtlpLogsView, OtlpTracesView

urlpatterns = [
    path("v1/traces", OtlpTracesView.as_view(), name="otlp-traces"),
    path("v1/logs", OtlpLogsView.as_view(), name="otlp-logs"),
]
