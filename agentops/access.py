"""Who is asking, in which organization and project, and what they may do.

Shared by the API base views, the page views and the WebSocket consumer, so the
organization always comes from the URL (checked against the member's membership or
the API key's project) and never from a request body or the session.
"""

from __future__ import annotations

from dataclasses import dataclass

from django.db.models import OuterRef, Subquery

from agentops.errors import Forbidden, NotFound
from agentops.models import ApiKey, Membership, Organization, Project
from agentops.roles import key_allows, role_allows
from agentops.scoping import dangerously_unscoped, organization_scope


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
    Anything they may not see is NotFound, exactly like an organization that does not exist.

    One query for a member (the membership with its organization, found by slug), none
    for an API key (its organization is the only one it reaches): this runs on every
    request."""
    if api_key is not None:
        if api_key.organization.slug != org_slug:
            raise NotFound("organization not found")
        return Access(organization=api_key.organization, api_key=api_key)
    if user is None or not user.is_authenticated:
        raise NotFound("organization not found")
    with dangerously_unscoped("the organization is named by its slug; only the user's own membership is read"):
        membership = (
            Membership.objects.filter(user=user, organization__slug=org_slug)
            .select_related("organization", "user")
            .first()
        )
    if membership is None:
        raise NotFound("organization not found")
    return Access(organization=membership.organization, membership=membership)


def resolve_project(access: Access, project_slug: str) -> Access:
    """Narrow ``access`` to one project; an API key only reaches its own project (read
    with the key, no query)."""
    if access.api_key is not None:
        project = access.api_key.project
        if project.slug != project_slug:
            raise NotFound("project not found")
        project.organization = access.organization
        access.project = project
        return access
    with organization_scope(access.organization):
        project = Project.objects.filter(slug=project_slug).first()
    if project is None:
        raise NotFound("project not found")
    project.organization = access.organization
    access.project = project
    return access


def resolve_member_project(*, org_slug: str, project_slug: str, user) -> Access:
    """``resolve_project(resolve_organization(...))`` for a signed-in user, in one query
    when both are found (the project with its organization, found by slugs, and the
    user's own membership of that organization); anything else goes the two-step way,
    which names what was not found."""
    if user is not None and user.is_authenticated:
        with dangerously_unscoped("the project is named by its slugs; only the user's own membership is read"):
            member = Membership.objects.filter(organization=OuterRef("organization"), user=user)
            project = (
                Project.objects.filter(slug=project_slug, organization__slug=org_slug)
                .select_related("organization")
                .annotate(
                    membership_id=Subquery(member.values("pk")[:1]),
                    membership_role=Subquery(member.values("role")[:1]),
                    membership_created_at=Subquery(member.values("created_at")[:1]),
                )
                .first()
            )
        if project is not None and project.membership_id is not None:
            membership = Membership(
                pk=project.membership_id,
                organization=project.organization,
                user=user,
                role=project.membership_role,
                created_at=project.membership_created_at,
            )
            membership._state.adding, membership._state.db = False, project._state.db
            return Access(organization=project.organization, membership=membership, project=project)
    return resolve_project(resolve_organization(org_slug=org_slug, user=user), project_slug)
