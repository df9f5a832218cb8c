"""``Idempotency-Key`` support for API handlers that start work."""

from __future__ import annotations

import functools

from rest_framework.response import Response

from agentops.errors import InvalidRequest
from agentops.models import ApiKey
from agentops.services.idempotency import (
    idempotency_abandon,
    idempotency_begin,
    idempotency_finish,
    request_fingerprint,
)

HEADER = "Idempotency-Key"
MAX_KEY_LENGTH = 255


def idempotent(handler):
    """Wrap an endpoint's handler (``post``) so a retried request with the same
    ``Idempotency-Key`` gets the first response instead of doing the work twice."""

    @functools.wraps(handler)
    def wrapper(view, request, *args, **kwargs):
        key = request.headers.get(HEADER)
        if key is None:
            return handler(view, request, *args, **kwargs)
        key = key.strip().strip('"')
        if not key or len(key) > MAX_KEY_LENGTH:
            raise InvalidRequest(f"the {HEADER} header must be 1 to {MAX_KEY_LENGTH} characters")
        client = f"key:{request.auth.pk}" if isinstance(request.auth, ApiKey) else f"user:{request.user.pk}"
        fingerprint = request_fingerprint(method=request.method, path=request.path, body=request.data)
        record, stored = idempotency_begin(
            organization=view.organization, client=client, key=key, fingerprint=fingerprint
        )
        if stored is not None:
            return Response(stored.body, status=stored.status, headers={"Idempotent-Replayed": "true"})
        try:
            response = handler(view, request, *args, **kwargs)
        except Exception:
            idempotency_abandon(record=record)
            raise
        idempotency_finish(record=record, status=response.status_code, body=response.data)
        return response

    return wrapper
