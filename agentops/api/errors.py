"""One error body everywhere in the API: ``{"error": {"code", "message", "details"}}``."""

from __future__ import annotations

import logging

from django.core.exceptions import PermissionDenied as DjangoPermissionDenied
from django.http import Http404, JsonResponse
from rest_framework import exceptions, status
from rest_framework.response import Response

from agentops.errors import ServiceError
from agentops.outages import UNAVAILABLE_ERRORS, log_refusal

logger = logging.getLogger(__name__)

UNAVAILABLE_RETRY_AFTER = 5


def error_body(code: str, message: str, details=None) -> dict:
    return {"error": {"code": code, "message": message, "details": details}}


def _first_message(detail) -> str:
    """A readable one-line summary of a DRF error detail (nested dicts and lists)."""
    if isinstance(detail, dict):
        for field, value in detail.items():
            inner = _first_message(value)
            return inner if field == "non_field_errors" else f"{field}: {inner}"
        return "invalid input"
    if isinstance(detail, list):
        return _first_message(detail[0]) if detail else "invalid input"
    return str(detail)


def exception_handler(exc, context):
    """DRF's EXCEPTION_HANDLER: map every known error to the one body."""
    if isinstance(exc, ServiceError):
        return Response(error_body(exc.code, exc.message, exc.details), status=exc.status)
    if isinstance(exc, UNAVAILABLE_ERRORS):
        # The database or Redis is unreachable: nothing was done, the client may retry.
        request = context.get("request")
        log_refusal(logger, f"{request.method} {request.path} refused" if request else "request refused", exc)
        response = Response(
            error_body("unavailable", "the service is temporarily unavailable; retry later", None),
            status=503,
            headers={"Retry-After": str(UNAVAILABLE_RETRY_AFTER)},
        )
        response._has_been_logged = True  # one line per refusal: Django's would repeat it
        return response
    if isinstance(exc, Http404):
        exc = exceptions.NotFound()
    elif isinstance(exc, DjangoPermissionDenied):
        exc = exceptions.PermissionDenied()
    if not isinstance(exc, exceptions.APIException):
        return None  # A bug: Django logs it and handler500 answers in the same shape.

    headers = {}
    if getattr(exc, "auth_header", None):
        headers["WWW-Authenticate"] = exc.auth_header
    if isinstance(exc, exceptions.Throttled) and exc.wait is not None:
        headers["Retry-After"] = str(max(1, int(exc.wait + 0.999)))

    if isinstance(exc, exceptions.ValidationError):
        code, message, details = "invalid", _first_message(exc.detail), exc.detail
    else:
        detail = exc.detail
        code = getattr(detail, "code", None) or exc.default_code
        message, details = str(detail), None
        if isinstance(exc, exceptions.Throttled):
            code = "throttled"
            details = {"retry_after": int(headers.get("Retry-After", "1"))}
    return Response(error_body(code, message, details), status=exc.status_code, headers=headers)


def api_not_found(request, exception=None):
    return JsonResponse(error_body("not_found", "no API endpoint at this URL"), status=status.HTTP_404_NOT_FOUND)


def api_server_error(request):
    return JsonResponse(
        error_body("server_error", "the server failed to handle this request; it has been logged"),
        status=status.HTTP_500_INTERNAL_SERVER_ERROR,
    )
