"""OTLP/HTTP receivers: ``POST /api/v1/otlp/v1/traces`` and ``POST /api/v1/otlp/v1/logs``.

Point any OpenTelemetry exporter at them with
``OTEL_EXPORTER_OTLP_ENDPOINT=https://host/api/v1/otlp`` and
``OTEL_EXPORTER_OTLP_HEADERS=Authorization=Bearer%20<key>`` (the value URL-encoded). The key must have the
``ingest`` scope; the project is always the key's, whatever the payload names.

These endpoints speak OTLP/HTTP (opentelemetry-proto ``docs/specification.md``), not the
platform's JSON conventions: every answer, errors included, is in the request's content
type (``application/x-protobuf`` or ``application/json``), and error bodies are a
``google.rpc.Status`` (``{"code": <gRPC code>, "message": "..."}`` in JSON), not the
platform's ``{"error": {...}}``.

=====  ==============================================================================
200    stored; ``partial_success`` says how many spans / log records were rejected and why,
       and which were stored with values changed to be storable (a warning)
400    the body is not a decodable export request, or is truncated/corrupt when compressed
401    no key, or an invalid, revoked or expired key (``WWW-Authenticate: Bearer``)
403    the key lacks the ``ingest`` scope
405    any method but POST
413    the body, compressed or decompressed, exceeds ``OTLP_MAX_BODY_BYTES`` (16 MiB)
415    a Content-Type other than protobuf or JSON (the Status body is then JSON), or a
       Content-Encoding other than gzip, deflate or none
429    the key's rate limit (``Retry-After``)
503    the database is unreachable (``Retry-After``): nothing is acknowledged that
       is not stored. Redis alone down is no reason: rate limits and live updates wait.
=====  ==============================================================================

Log records: only the GenAI message events are stored (see ``runs.otlp.logs``);
other records are accepted and dropped.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.http import HttpResponse
from drf_spectacular.types import OpenApiTypes
from drf_spectacular.utils import OpenApiResponse, extend_schema
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from rest_framework import exceptions
from rest_framework.negotiation import BaseContentNegotiation
from rest_framework.permissions import IsAuthenticated
from rest_framework.views import APIView

from agentops.access import Access
from agentops.api.authentication import ApiKeyAuthentication
from agentops.api.throttling import ApiKeyRateThrottle
from agentops.errors import ServiceError
from agentops.outages import UNAVAILABLE_ERRORS, log_refusal
from agentops.scoping import organization_scope, reset_scope
from runs.ingest import ingest
from runs.otlp import MappedBatch, decode, map_logs, map_traces

logger = logging.getLogger(__name__)

DEFAULT_MAX_BODY_BYTES = 16 * 1024 * 1024
RETRY_AFTER_SECONDS = 5


class AnyAcceptNegotiation(BaseContentNegotiation):
    """OTLP answers in the request's content type whatever ``Accept`` says, so DRF's
    negotiation must never refuse a request with 406."""

    def select_parser(self, request, parsers):
        return None

    def select_renderer(self, request, renderers, format_suffix=None):
        renderer = renderers[0]
        return renderer, renderer.media_type


def store(project, batch: MappedBatch, *, api_key=None, announce: bool = True) -> None:
    """Store what the receivers mapped (``batch``) for ``project``; the caller holds the
    organization's scope. The benchmarks call it as the receivers do."""
    ingest(
        project=project,
        steps=batch.steps,
        messages=batch.messages,
        tool_calls=batch.tool_calls,
        snapshots=batch.snapshots,
        api_key=api_key,
        announce=announce,
        # The mapping makes every JSON value storable (runs.otlp.attributes).
        json_checked=True,
    )


def _max_body_bytes() -> int:
    return getattr(settings, "OTLP_MAX_BODY_BYTES", DEFAULT_MAX_BODY_BYTES)


class OtlpExportView(APIView):
    """Base of the two receivers: authentication by project API key, the ``run:ingest``
    permission, the body limits and the OTLP answer formats."""

    authentication_classes = [ApiKeyAuthentication]
    permission_classes = [IsAuthenticated]
    throttle_classes = [ApiKeyRateThrottle]
    content_negotiation_class = AnyAcceptNegotiation
    http_method_names = ["post"]
    permissions = {"POST": "run:ingest"}
    signal = ""  # "traces" or "logs", set by subclasses

    def dispatch(self, request, *args, **kwargs):
        # Each request starts with no organization in scope (as agentops.api.base does).
        with reset_scope():
            return super().dispatch(request, *args, **kwargs)

    def initial(self, request, *args, **kwargs):
        super().initial(request, *args, **kwargs)  # authentication, throttling
        key = request.auth
        self.access = Access(organization=key.organization, api_key=key, project=key.project)
        permission = self.permissions.get(request.method)
        if permission is not None:  # other methods are answered 405 next
            self.access.require(permission, f"send {self.signal}")

    def post(self, request, *args, **kwargs):
        media = decode.media_type(request.content_type)
        limit = _max_body_bytes()
        try:
            content_length = int(request.META.get("CONTENT_LENGTH") or 0) or None
        except ValueError:
            content_length = None
        # Read the raw stream, not request.body: Django refuses bodies over
        # DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MiB) there, and OTLP batches are often larger.
        # DRF's request.stream is None without a Content-Length (chunked uploads).
        try:
            body = decode.read_body(request._request, content_length=content_length, limit=limit)
        except OSError as exc:  # the client went away mid-body (UnreadablePostError)
            raise decode.UndecodableBody(f"the body could not be read: {exc}") from None
        body = decode.decompress(body, request.META.get("HTTP_CONTENT_ENCODING"), limit=limit)
        batch = self.map(body, media)

        project = self.access.project
        project.organization = self.access.organization
        if not batch.empty:
            with organization_scope(project.organization):
                store(project, batch, api_key=self.access.api_key)
        return self.answer(batch, media)

    def map(self, body: bytes, media: str) -> MappedBatch:
        raise NotImplementedError

    def answer(self, batch: MappedBatch, media: str) -> HttpResponse:
        raise NotImplementedError

    def handle_exception(self, exc):
        """Every error as a google.rpc.Status in the request's content type."""
        media = self._response_media()
        headers: dict[str, str] = {}
        if isinstance(exc, decode.BodyRejected):
            status, message = exc.status, str(exc)
        elif isinstance(exc, UNAVAILABLE_ERRORS):
            log_refusal(logger, f"OTLP {self.signal} refused", exc)
            status, message = 503, "the server cannot store data right now; retry later"
            headers["Retry-After"] = str(RETRY_AFTER_SECONDS)
        elif isinstance(exc, ServiceError):
            status, message = exc.status, exc.message
        elif isinstance(exc, exceptions.APIException):
            status, message = exc.status_code, str(exc.detail)
            if isinstance(exc, exceptions.NotAuthenticated | exceptions.AuthenticationFailed):
                headers["WWW-Authenticate"] = self.get_authenticate_header(self.request)
            if isinstance(exc, exceptions.Throttled):
                headers["Retry-After"] = str(max(1, int((exc.wait or 1) + 0.999)))
        else:
            return super().handle_exception(exc)  # a bug: logged, and answered 500
        response = HttpResponse(decode.encode_status(status, message, media), status=status, content_type=media)
        for name, value in headers.items():
            response[name] = value
        if status == 503:
            response._has_been_logged = True  # one line per refusal: Django's would repeat it
        return response

    def _response_media(self) -> str:
        """The request's content type; JSON when it is not one OTLP allows."""
        try:
            return decode.media_type(self.request.META.get("CONTENT_TYPE"))
        except decode.UnsupportedMediaType:
            return decode.JSON

    def _response(self, message, media: str) -> HttpResponse:
        return HttpResponse(decode.encode_message(message, media), status=200, content_type=media)


_SCHEMA = {
    "request": {decode.PROTOBUF: OpenApiTypes.BINARY, decode.JSON: OpenApiTypes.OBJECT},
    "responses": {
        200: OpenApiResponse(description="Stored (see partial_success for rejected items)."),
        400: OpenApiResponse(description="Undecodable body (google.rpc.Status)."),
        401: OpenApiResponse(description="No, invalid, revoked or expired API key."),
        403: OpenApiResponse(description="The key lacks the ingest scope."),
        413: OpenApiResponse(description="Body over the size limit."),
        415: OpenApiResponse(description="Unsupported Content-Type or Content-Encoding."),
        429: OpenApiResponse(description="Rate limited (Retry-After)."),
        503: OpenApiResponse(description="Storage unavailable (Retry-After)."),
    },
    "tags": ["otlp"],
}


class OtlpTracesView(OtlpExportView):
    """``ExportTraceServiceRequest`` in; every valid span becomes a step of its trace's
    run (see ``runs.otlp.spans``); spans with invalid ids are rejected alone."""

    signal = "traces"

    def map(self, body, media):
        return map_traces(decode.decode_traces(body, media))

    def answer(self, batch, media):
        response = ExportTraceServiceResponse()
        if batch.rejected or batch.changed:
            # With nothing rejected, a message alone is OTLP's way of a warning.
            response.partial_success.rejected_spans = batch.rejected
            response.partial_success.error_message = batch.error_message("spans")
        return self._response(response, media)

    @extend_schema(
        summary="OTLP/HTTP traces receiver",
        description="OpenTelemetry OTLP/HTTP `ExportTraceServiceRequest` (protobuf or JSON, optionally gzip or "
        "deflate). Answers follow the OTLP specification, not the platform's error format.",
        **_SCHEMA,
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)


class OtlpLogsView(OtlpExportView):
    """``ExportLogsServiceRequest`` in; the GenAI message events become messages of their
    trace (``runs.otlp.logs``). Other log records are accepted and ignored."""

    signal = "logs"

    def map(self, body, media):
        return map_logs(decode.decode_logs(body, media))

    def answer(self, batch, media):
        response = ExportLogsServiceResponse()
        if batch.rejected or batch.changed:
            response.partial_success.rejected_log_records = batch.rejected
            response.partial_success.error_message = batch.error_message("log records")
        return self._response(response, media)

    @extend_schema(
        summary="OTLP/HTTP logs receiver (GenAI message events)",
        description="OpenTelemetry OTLP/HTTP `ExportLogsServiceRequest`. Only GenAI message events are stored; "
        "other log records are accepted and dropped.",
        **_SCHEMA,
    )
    def post(self, request, *args, **kwargs):
        return super().post(request, *args, **kwargs)
