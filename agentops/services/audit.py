"""Writes to the append-only audit log."""

from __future__ import annotations

from agentops.models import ApiKey, AuditEvent, Organization


def audit_record(
    *,
    organization: Organization,
    actor,
    action: str,
    target=None,
    data: dict | None = None,
    ip: str | None = None,
) -> AuditEvent:
    """Record that ``actor`` (a user, an API key or None for the system) did ``action``."""
    if isinstance(actor, ApiKey):
        actor_user, actor_label = None, f"API key {actor.prefix}"
    elif actor is not None:
        actor_user, actor_label = actor, actor.email or actor.get_username()
    else:
        actor_user, actor_label = None, "system"
    return AuditEvent.objects.create(
        organization=organization,
        organization_slug=organization.slug,
        actor=actor_user,
        actor_label=actor_label,
        action=action,
        target_type=type(target).__name__ if target is not None else "",
        target_id=str(target.pk) if target is not None else "",
        target_label=str(target)[:255] if target is not None else "",
        data=data or {},
        ip_address=ip,
    )
