"""Every API resource of the core passes the shared tenant-isolation checks."""

from datetime import timedelta

from django.utils import timezone

from agentops.models import ApiKey, Invitation, Membership, Project, ProviderSecret
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.api_keys import api_key_create
from agentops.services.audit import audit_record
from agentops.services.secrets import provider_secret_set
from tests.agentops.factories import MembershipFactory, ProjectFactory, UserFactory
from tests.isolation import (
    CreateIsolation,
    DeleteIsolation,
    ListIsolation,
    ReadIsolation,
    TenantIsolationChecks,
    UpdateIsolation,
)


def _organization_of(model, pk):
    with dangerously_unscoped("test inspects the row it just created"):
        return model.objects.get(pk=pk).organization_id


class TestMemberIsolation(ReadIsolation, UpdateIsolation, DeleteIsolation, ListIsolation):
    update_body = {"role": "viewer"}

    def make_object(self, tenant):
        return MembershipFactory(organization=tenant.organization, user=UserFactory(), role="member")

    def detail_url(self, url_tenant, obj):
        return f"/api/v1/organizations/{url_tenant.organization.slug}/members/{obj.pk}/"

    def list_url(self, tenant):
        return f"/api/v1/organizations/{tenant.organization.slug}/members/"


class TestInvitationIsolation(ReadIsolation, DeleteIsolation, ListIsolation, CreateIsolation):
    create_body = {"email": "newcomer@example.com", "role": "member"}

    def make_object(self, tenant):
        return Invitation.dangerously_unscoped_objects.create(
            organization=tenant.organization,
            email=f"invitee-{tenant.organization.slug}@example.com",
            role="member",
            token_hash=f"hash-{tenant.organization.slug}",
            expires_at=timezone.now() + timedelta(days=1),
        )

    def detail_url(self, url_tenant, obj):
        return f"/api/v1/organizations/{url_tenant.organization.slug}/invitations/{obj.pk}/"

    def list_url(self, tenant):
        return f"/api/v1/organizations/{tenant.organization.slug}/invitations/"

    def created_organization_id(self, response):
        return _organization_of(Invitation, response.json()["id"])


class TestProjectIsolation(TenantIsolationChecks):
    update_body = {"name": "Renamed"}
    create_body = {"name": "Brand new", "slug": "brand-new"}

    def make_object(self, tenant):
        return ProjectFactory(organization=tenant.organization)

    def detail_url(self, url_tenant, obj):
        return f"/api/v1/projects/{url_tenant.organization.slug}/{obj.slug}/"

    def list_url(self, tenant):
        return f"/api/v1/organizations/{tenant.organization.slug}/projects/"

    def created_organization_id(self, response):
        return _organization_of(Project, response.json()["id"])


class TestProjectIsolationWithApiKey(ReadIsolation):
    """An API key reaches its own project only: another organization's is a 404."""

    as_key = True

    def make_object(self, tenant):
        return ProjectFactory(organization=tenant.organization)

    def detail_url(self, url_tenant, obj):
        return f"/api/v1/projects/{url_tenant.organization.slug}/{obj.slug}/"

    def list_url(self, tenant):
        return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/"

    def test_key_reads_only_its_own_project(self, caller, tenant, other_tenant):
        assert caller.get(self.list_url(tenant)).status_code == 200
        assert caller.get(self.list_url(other_tenant)).status_code == 404


class TestApiKeyIsolation(ReadIsolation, DeleteIsolation, ListIsolation, CreateIsolation):
    create_body = {"name": "deploy", "scopes": ["read"]}

    def make_object(self, tenant):
        with organization_scope(tenant.organization):
            key, _raw = api_key_create(project=tenant.project, actor=None, name="k", scopes=["read"])
        return key

    def detail_url(self, url_tenant, obj):
        return f"/api/v1/projects/{url_tenant.organization.slug}/{url_tenant.project.slug}/api-keys/{obj.pk}/"

    def list_url(self, tenant):
        return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/api-keys/"

    def created_organization_id(self, response):
        return _organization_of(ApiKey, response.json()["id"])


class TestProviderSecretIsolation(ReadIsolation, DeleteIsolation, ListIsolation):
    # PUT on one's own URL creates one's own secret; the foreign URL is checked below.

    def make_object(self, tenant):
        with organization_scope(tenant.organization):
            return provider_secret_set(
                organization=tenant.organization,
                actor=None,
                provider="mistral",
                api_key=f"sk-secret-value-{tenant.organization.slug}",
            )

    def detail_url(self, url_tenant, obj):
        return f"/api/v1/organizations/{url_tenant.organization.slug}/provider-secrets/{obj.provider}/"

    def list_url(self, tenant):
        return f"/api/v1/organizations/{tenant.organization.slug}/provider-secrets/"

    def list_ids(self, response):
        return {item["api_key_hint"] for item in response.json()}

    def list_id(self, obj):
        return obj.api_key_hint

    def test_other_organizations_secret_cannot_be_replaced(self, client_for, tenant, other_tenant):
        foreign = self.make_object(other_tenant)
        response = client_for(tenant.owner).put(
            self.detail_url(other_tenant, foreign), {"api_key": "attacker-key-123"}, format="json"
        )
        assert response.status_code == 404
        with dangerously_unscoped("test"):
            assert ProviderSecret.objects.get(pk=foreign.pk).api_key_ciphertext == foreign.api_key_ciphertext


class TestAuditLogIsolation(ListIsolation):
    def make_object(self, tenant):
        return audit_record(organization=tenant.organization, actor=tenant.owner, action="test.event")

    def list_url(self, tenant):
        return f"/api/v1/organizations/{tenant.organization.slug}/audit-log/"


def test_api_key_of_another_project_in_same_organization_is_not_found(tenant, key_client):
    sibling = ProjectFactory(organization=tenant.organization)
    client = key_client(tenant.project)
    assert client.get(f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/").status_code == 200
    response = client.get(f"/api/v1/projects/{tenant.organization.slug}/{sibling.slug}/")
    assert response.status_code == 404


def test_membership_rows_are_counted_per_organization(tenant, other_tenant):
    with organization_scope(tenant.organization):
        assert Membership.objects.count() == 4
    with organization_scope(other_tenant.organization):
        assert set(Membership.objects.values_list("organization_id", flat=True)) == {other_tenant.organization.pk}
