"""The scoping guard: tenant-owned rows cannot be queried without an organization."""

import pytest

from agentops.api.base import OrganizationEndpoint
from agentops.models import ApiKey, AuditEvent, Membership, Project
from agentops.scoping import UnscopedQueryError, dangerously_unscoped, organization_scope


@pytest.mark.parametrize("model", [Project, Membership, ApiKey, AuditEvent])
def test_unscoped_query_of_tenant_owned_model_fails(tenant, model):
    with pytest.raises(UnscopedQueryError):
        list(model.objects.all())
    with pytest.raises(UnscopedQueryError):
        model.objects.count()
    with pytest.raises(UnscopedQueryError):
        model.objects.filter(pk=1).exists()
    with pytest.raises(UnscopedQueryError):
        model.objects.filter(pk=-1).update(organization_id=tenant.organization.pk)
    with pytest.raises(UnscopedQueryError):
        model.objects.filter(pk=-1).delete()


def test_scope_filters_to_the_organization(tenant, other_tenant):
    with organization_scope(tenant.organization):
        slugs = {(p.organization_id, p.slug) for p in Project.objects.all()}
    assert slugs == {(tenant.organization.pk, "agent")}


def test_reverse_relation_is_scoped_too(tenant, other_tenant):
    with organization_scope(tenant.organization):
        assert list(other_tenant.organization.memberships.all()) == []
        assert tenant.organization.memberships.count() == 4


def test_queryset_built_outside_scope_refuses_even_if_evaluated_inside(tenant):
    declared = Project.objects.all()  # like a class attribute evaluated at import
    with organization_scope(tenant.organization), pytest.raises(UnscopedQueryError):
        list(declared)
    with organization_scope(tenant.organization):
        assert [p.slug for p in declared.in_current_scope()] == ["agent"]


def test_dangerously_unscoped_sees_every_organization(tenant, other_tenant):
    with dangerously_unscoped("test reads both tenants"):
        assert Project.objects.count() == 2
    with pytest.raises(ValueError):
        with dangerously_unscoped(""):
            pass


def test_endpoint_cannot_override_get_queryset():
    with pytest.raises(TypeError, match="bypass tenant scoping"):

        class Leaky(OrganizationEndpoint):
            def get_queryset(self):
                return Project.dangerously_unscoped_objects.all()
