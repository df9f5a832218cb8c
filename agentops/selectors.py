"""Reads of the core, always scoped to what the caller may see."""

from __future__ import annotations

from django.db.models import QuerySet

from agentops.models import ApiKey, AuditEvent, Invitation, Membership, Organization, Project, ProviderSecret


def organizations_for_user(*, user) -> QuerySet[Organization]:
    """The organizations ``user`` belongs to (the organization switcher)."""
    return Organization.objects.filter(memberships__user=user).distinct().order_by("name")


def memberships_for_user(*, user) -> QuerySet[Membership]:
    """Every membership of ``user``, across organizations: a user may see their own."""
    return Membership.dangerously_unscoped_objects.filter(user=user).select_related("organization")


def membership_list(*, organization: Organization) -> QuerySet[Membership]:
    return Membership.objects.filter(organization=organization).select_related("user").order_by("created_at", "id")


def project_list(*, organization: Organization) -> QuerySet[Project]:
    return Project.objects.filter(organization=organization).order_by("name")


def invitation_list(*, organization: Organization, open_only: bool = False) -> QuerySet[Invitation]:
    queryset = Invitation.objects.filter(organization=organization).select_related("invited_by")
    if open_only:
        queryset = queryset.filter(accepted_at__isnull=True, revoked_at__isnull=True)
    return queryset.order_by("-created_at", "-id")


def api_key_list(*, project: Project) -> QuerySet[ApiKey]:
    return ApiKey.objects.filter(project=project).select_related("created_by").order_by("-created_at", "-id")


def provider_secret_list(*, organization: Organization) -> QuerySet[ProviderSecret]:
    return ProviderSecret.objects.filter(organization=organization).select_related("updated_by")


def audit_event_list(*, organization: Organization, action: str | None = None) -> QuerySet[AuditEvent]:
    queryset = AuditEvent.objects.filter(organization=organization)
    if action:
        queryset = queryset.filter(action__startswith=action)
    return queryset.order_by("-created_at", "-id")
