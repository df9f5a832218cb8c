"""Who may reach an organization and a project: the one-query resolution of the API
(``resolve_member_project``) decides exactly as the two-step one does."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import AnonymousUser

from agentops.access import resolve_member_project, resolve_organization, resolve_project
from agentops.errors import NotFound


def two_step(org_slug, project_slug, user):
    return resolve_project(resolve_organization(org_slug=org_slug, user=user), project_slug)


def outcome(resolve, org_slug, project_slug, user):
    try:
        access = resolve(org_slug, project_slug, user)
    except NotFound as exc:
        return ("not found", str(exc))
    membership = access.membership
    return (
        access.organization.pk,
        access.project.pk,
        access.project.organization_id,
        membership.pk,
        membership.role,
        membership.user.pk,
        membership.created_at,
    )


@pytest.mark.django_db
def test_the_one_query_resolution_decides_as_the_two_step_one(tenant, other_tenant, django_assert_num_queries):
    # Both organizations have a project of the same slug ("agent").
    assert other_tenant.project.slug == tenant.project.slug
    org, project = tenant.organization.slug, tenant.project.slug
    cases = [
        (org, project, tenant.viewer),
        (org, project, tenant.owner),
        (org, project, other_tenant.owner),  # not a member: the organization is not found
        (other_tenant.organization.slug, project, tenant.owner),
        (org, "no-such-project", tenant.owner),
        ("no-such-org", project, tenant.owner),
        (org, project, AnonymousUser()),
    ]
    for org_slug, project_slug, user in cases:
        one_query = outcome(
            lambda o, p, u: resolve_member_project(org_slug=o, project_slug=p, user=u), org_slug, project_slug, user
        )
        assert one_query == outcome(two_step, org_slug, project_slug, user), (org_slug, project_slug, user)
    assert outcome(two_step, org, project, tenant.viewer)[4] == "viewer"
    with django_assert_num_queries(1):
        resolve_member_project(org_slug=org, project_slug=project, user=tenant.member)
