"""Project API keys: shown once at creation, stored only as a SHA-256 hash."""

from __future__ import annotations

import functools
import hashlib
import secrets
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest
from agentops.models import ApiKey, Organization, Project
from agentops.roles import KEY_SCOPES
from agentops.rows import columns, instances
from agentops.services.audit import audit_record

KEY_PREFIX = "ao_"
VISIBLE_PREFIX_LENGTH = len(KEY_PREFIX) + 8
# Touch last_used_at at most this often: one write per key per minute, not per request.
LAST_USED_RESOLUTION = timedelta(minutes=1)


class KeyRejected(Exception):
    """The presented key is unknown, revoked or expired; the message says which."""


def hash_key(raw_key: str) -> str:
    # Keys carry 240 bits of randomness, so a fast hash is safe; no salt is needed.
    return hashlib.sha256(raw_key.encode()).hexdigest()


def api_key_create(
    *,
    project: Project,
    actor,
    name: str,
    scopes: list[str],
    expires_at: datetime | None = None,
    ip: str | None = None,
) -> tuple[ApiKey, str]:
    """Create a key for ``project``; return it with the plaintext, which is never stored."""
    name = (name or "").strip()
    if not name:
        raise InvalidRequest("the key needs a name")
    scopes = sorted(set(scopes or []))
    unknown = [scope for scope in scopes if scope not in KEY_SCOPES]
    if unknown or not scopes:
        raise InvalidRequest(f"scopes must be one or more of {', '.join(KEY_SCOPES)}")
    if expires_at is not None and expires_at <= timezone.now():
        raise InvalidRequest("the expiry must be in the future")
    raw_key = KEY_PREFIX + secrets.token_urlsafe(30)
    with transaction.atomic():
        key = ApiKey.objects.create(
            organization=project.organization,
            project=project,
            name=name,
            prefix=raw_key[:VISIBLE_PREFIX_LENGTH],
            key_hash=hash_key(raw_key),
            scopes=scopes,
            created_by=actor,
            expires_at=expires_at,
        )
        audit_record(
            organization=project.organization,
            actor=actor,
            action="api_key.create",
            target=key,
            data={"project": project.slug, "scopes": scopes},
            ip=ip,
        )
    return key, raw_key


def api_key_revoke(*, key: ApiKey, actor, ip: str | None = None) -> ApiKey:
    """Revoke a key: it is refused from the next request on."""
    with transaction.atomic():
        key = ApiKey.objects.select_for_update().get(pk=key.pk)
        if key.revoked_at:
            raise Conflict("this key is already revoked")
        key.revoked_at = timezone.now()
        key.save(update_fields=["revoked_at"])
        audit_record(organization=key.organization, actor=actor, action="api_key.revoke", target=key, ip=ip)
    return key


@functools.cache
def _key_with_project_sql() -> str:
    return f"""
        SELECT {columns(ApiKey, "k")}, {columns(Project, "p")}, {columns(Organization, "o")}
        FROM {ApiKey._meta.db_table} k
        JOIN {Project._meta.db_table} p ON p.id = k.project_id
        JOIN {Organization._meta.db_table} o ON o.id = k.organization_id
        WHERE k.key_hash = %s
    """  # noqa: S608 - tables and columns from the models, the hash a parameter


def api_key_authenticate(raw_key: str) -> ApiKey:
    """The active key ``raw_key`` names, or ``KeyRejected``. Looked up across
    organizations: the key itself is what tells which organization is asking."""
    # The key names its organization only through its hash (the one read across
    # organizations); one statement, as it runs on every request made with a key.
    with connection.cursor() as cursor:
        cursor.execute(_key_with_project_sql(), [hash_key(raw_key)])
        row = cursor.fetchone()
    if row is None:
        raise KeyRejected("invalid API key")
    key, project, organization = instances(row, (ApiKey, ()), (Project, ()), (Organization, ()))
    project.organization = organization
    key.project, key.organization = project, organization
    now = timezone.now()
    if key.revoked_at:
        raise KeyRejected("this API key has been revoked")
    if key.expires_at and key.expires_at <= now:
        raise KeyRejected("this API key has expired")
    if key.last_used_at is None or now - key.last_used_at > LAST_USED_RESOLUTION:
        ApiKey.dangerously_unscoped_objects.filter(pk=key.pk).update(last_used_at=now)
        key.last_used_at = now
    return key
