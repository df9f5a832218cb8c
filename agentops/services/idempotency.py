"""Idempotency keys for mutations that start work (IETF draft "The Idempotency-Key
HTTP Header Field"): the same key and body give the first response again; the same
key with another body is a 422; a retry while the first is still running is a 409."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass

from django.conf import settings
from django.db import IntegrityError, transaction
from django.utils import timezone

from agentops.errors import Conflict, ServiceError
from agentops.models import IdempotencyRecord, Organization
from agentops.scoping import dangerously_unscoped


class IdempotencyKeyReused(ServiceError):
    status = 422
    code = "idempotency_key_reused"


@dataclass
class StoredResponse:
    status: int
    body: object


def request_fingerprint(*, method: str, path: str, body: object) -> str:
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(f"{method} {path}\n{canonical}".encode()).hexdigest()


def idempotency_begin(
    *, organization: Organization, client: str, key: str, fingerprint: str
) -> tuple[IdempotencyRecord | None, StoredResponse | None]:
    """Claim ``key`` for this request. Returns (record, None) when the request must run,
    or (None, stored) when an earlier identical request already answered."""
    now = timezone.now()
    try:
        with transaction.atomic():
            record = IdempotencyRecord.objects.create(
                organization=organization,
                client=client,
                key=key,
                request_hash=fingerprint,
                expires_at=now + settings.IDEMPOTENCY_KEY_TTL,
            )
        return record, None
    except IntegrityError:
        pass
    existing = IdempotencyRecord.objects.get(organization=organization, client=client, key=key)
    if existing.expires_at <= now:
        # Expired but not yet purged: the key may be used afresh.
        existing.delete()
        return idempotency_begin(organization=organization, client=client, key=key, fingerprint=fingerprint)
    if existing.request_hash != fingerprint:
        raise IdempotencyKeyReused("this Idempotency-Key was already used with a different request body")
    if existing.state == IdempotencyRecord.State.IN_PROGRESS:
        raise Conflict("a request with this Idempotency-Key is still being processed; retry later")
    return None, StoredResponse(status=existing.response_status, body=existing.response_body)


def idempotency_finish(*, record: IdempotencyRecord, status: int, body: object) -> None:
    """Store the response so a retry gets it again. Server errors are not stored, so a
    retry after one runs the request afresh."""
    if status >= 500:
        record.delete()
        return
    record.state = IdempotencyRecord.State.COMPLETED
    record.response_status = status
    record.response_body = body
    record.save(update_fields=["state", "response_status", "response_body"])


def idempotency_abandon(*, record: IdempotencyRecord) -> None:
    """Forget a claim whose request raised, so the key can be retried."""
    record.delete()


def idempotency_purge_expired() -> int:
    """Delete expired records across organizations (a periodic task)."""
    with dangerously_unscoped("periodic purge of expired idempotency keys"):
        deleted, _ = IdempotencyRecord.objects.filter(expires_at__lte=timezone.now()).delete()
    return deleted
