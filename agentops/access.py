"""Who is asking, in which organization and project, and what they may do.

Shared by the API base views, the page views and the WebSocket consumer, so the
organization always comes from the URL (checked against the member's membership or
the API key's project) and never from a request body or the session.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cache

from django.db import connection

from agentops.errors import Forbidden, NotFound
from agentops.models import ApiKey, Membership, Organization, Project
from agentops.roles import key_allows, role_allows
from agentops.rows import columns, instances
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
    # The user's own membership only: the organization is named by its slug.
    row = _fetch_one(_membership_sql(), [user.pk, org_slug])
    if row is None:
        raise NotFound("organization not found")
    organization, membership = instances(row, (Organization, ()), (Membership, ()))
    return Access(organization=organization, membership=_member_of(membership, organization, user))


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
        row = _fetch_one(_member_project_sql(), [user.pk, org_slug, project_slug])
        if row is not None:
            project, organization, membership = instances(row, (Project, ()), (Organization, ()), (Membership, ()))
            if membership is not None:
                project.organization = organization
                membership = _member_of(membership, organization, user)
                return Access(organization=organization, membership=membership, project=project)
    return resolve_project(resolve_organization(org_slug=org_slug, user=user), project_slug)


# --- The statements (SQL, not the ORM: they run on every request, and building the
# ORM's query cost several times the query itself) ----------------------------------


@cache
def _membership_sql() -> str:
    return f"""
        SELECT {columns(Organization, "o")}, {columns(Membership, "m")}
        FROM {Membership._meta.db_table} m JOIN {Organization._meta.db_table} o ON o.id = m.organization_id
        WHERE m.user_id = %s AND o.slug = %s
    """  # noqa: S608 - tables and columns from the models, values are parameters


@cache
def _member_project_sql() -> str:
    """The project of the organization found by slugs, and the user's membership of that
    organization if any (all NULL otherwise)."""
    return f"""
        SELECT {columns(Project, "p")}, {columns(Organization, "o")}, {columns(Membership, "m")}
        FROM {Project._meta.db_table} p JOIN {Organization._meta.db_table} o ON o.id = p.organization_id
        LEFT JOIN {Membership._meta.db_table} m ON m.organization_id = o.id AND m.user_id = %s
        WHERE o.slug = %s AND p.slug = %s
    """  # noqa: S608 - tables and columns from the models, values are parameters


def _fetch_one(sql: str, params: list) -> tuple | None:
    with connection.cursor() as cursor:
        cursor.execute(sql, params)
        return cursor.fetchone()


def _member_of(membership: Membership, organization: Organization, user) -> Membership:
    # Related objects set without a query: the membership's own organization, and the
    # user whose membership it is (the one asking).
    membership.organization = organization
    membership.user = user
    return membership
