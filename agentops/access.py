"""Who is asking, in which organization and project, and what they may do.

Shared by the API base views, the page views and the WebSocket consumer, so the
organization always comes from the URL (checked against the member's membership or
the API key's project) and never from a request body or the session.
"""

from __future__ import annotations

from dataclasses import dataclass

from agentops.errors import Forbidden, NotFound
from agentops.models import ApiKey, Membership, Organization, Project
from agentops.roles import key_allows, role_allows
from agentops.scoping import organization_scope


@dataclass
class Access:
    organization: Organization
    membership: Membership | None = None
    api_key: ApiKey | None = None
    project: Project | None = None

    @property
    def role(self) -> str | None:
        return self.membership.role if self.membership else None

    @property
    def actor(self):
        return self.membership.user if self.membership else self.api_key

    def allows(self, permission: str) -> bool:
        if self.membership is not None:
            return role_allows(self.membership.role, permission)
        if self.api_key is not None:
            return key_allows(self.api_key.scopes, permission)
        return False

    def require(self, permission: str, what: str = "do this") -> None:
        if self.allows(permission):
            return
        if self.membership is not None:
            raise Forbidden(f"your role ({self.membership.role}) does not allow you to {what}")
        raise Forbidden(f"this API key's scopes ({', '.join(self.api_key.scopes)}) do not allow it to {what}")


def resolve_organization(*, org_slug: str, user=None, api_key: ApiKey | None = None) -> Access:
    """The access of ``user`` or ``api_key`` to the organization ``org_slug``.
    Anything they may not see is NotFound, exactly like an organization that does not exist."""
    organization = Organization.objects.filter(slug=org_slug).first()
    if organization is None:
        raise NotFound("organization not found")
    if api_key is not None:
        if api_key.organization_id != organization.pk:
            raise NotFound("organization not found")
        return Access(organization=organization, api_key=api_key)
    if user is None or not user.is_authenticated:
        raise NotFound("organization not found")
    with organization_scope(organization):
        membership = Membership.objects.filter(user=user).select_related("user").first()
    if membership is None:
        raise NotFound("organization not found")
    membership.organization = organization
    return Access(organization=organization, membership=membership)


def resolve_project(access: Access, project_slug: str) -> Access:
    """Narrow ``access`` to one project; an API key only reaches its own project."""
    with organization_scope(access.organization):
        project = Project.objects.filter(slug=project_slug).first()
    if project is None or (access.api_key is not None and access.api_key.project_id != project.pk):
        raise NotFound("project not found")
    project.organization = access.organization
    access.project = project
    return access
