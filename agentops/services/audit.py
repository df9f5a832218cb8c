"""Writes to the append-only audit log."""

from __future__ import annotations

from django.utils import timezone

from agentops.models import ApiKey, AuditEvent, Organization
from agentops.scoping import dangerously_unscoped


def acting_user(actor):
    """The user behind ``actor``, for ``created_by`` and ``updated_by``: None for an API
    key, the system (None) or an anonymous request."""
    return actor if getattr(actor, "is_authenticated", False) and getattr(actor, "pk", None) else None


def audit_record(
    *,
    organization: Organization | None,
    actor,
    action: str,
    target=None,
    data: dict | None = None,
    ip: str | None = None,
) -> AuditEvent:
    """Record that ``actor`` (a user, an API key or None for the system) did ``action``
    in ``organization`` (None: a platform-wide change by staff, such as a public price)."""
    if isinstance(actor, ApiKey):
        actor_user, actor_label = None, f"API key {actor.prefix}"
    elif actor is not None:
        actor_user, actor_label = actor, actor.email or actor.get_username()
    else:
        actor_user, actor_label = None, "system"
    fields = dict(
        organization=organization,
        organization_slug=organization.slug if organization is not None else "",
        actor=actor_user,
        actor_label=actor_label,
        action=action,
        target_type=type(target).__name__ if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        target_label=str(target)[:255] if target is not None else "",
        data=data or {},
        ip_address=ip,
    )
    if organization is None:
        with dangerously_unscoped("a platform-wide change belongs to no organization"):
            return AuditEvent.objects.create(**fields)
    return AuditEvent.objects.create(**fields)


def audited_create(
    model, *, organization: Organization, actor, action: str, data: dict | None = None, ip=None, **fields
):
    """A new ``model`` row of ``organization`` with ``fields``, ``created_by`` the user
    behind ``actor`` (``acting_user``), and ``action`` recorded on it. Call inside the
    caller's transaction."""
    row = model.objects.create(organization=organization, created_by=acting_user(actor), **fields)
    audit_record(organization=organization, actor=actor, action=action, target=row, data=data, ip=ip)
    return row


def audited_delete(row, *, organization: Organization, actor, action: str, data: dict | None = None, ip=None) -> None:
    """Record ``action`` on ``row`` in ``organization`` (while it still has its id), then
    delete it. Call inside the caller's transaction."""
    audit_record(organization=organization, actor=actor, action=action, target=row, data=data, ip=ip)
    row.delete()


def audited_update(row, changes: dict, *, actor, action: str, data: dict, ip: str | None = None) -> None:
    """Save ``changes`` (field name -> value) on ``row`` (locked by the caller) with a new
    ``updated_at``, writing those columns only, and record ``action`` on it in its
    project's organization."""
    for field, value in changes.items():
        setattr(row, field, value)
    row.updated_at = timezone.now()
    row.save(update_fields=[*changes, "updated_at"])
    audit_record(organization=row.project.organization, actor=actor, action=action, target=row, data=data, ip=ip)
