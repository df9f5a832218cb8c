"""The Django admin (staff console) reads across organizations; nobody else gets in."""

import pytest

from agentops.services.audit import audit_record
from tests.agentops.factories import UserFactory


@pytest.fixture
def staff(db):
    return UserFactory(is_staff=True, is_superuser=True)


@pytest.mark.parametrize(
    "path", ["project", "membership", "organization", "apikey", "invitation", "providersecret", "auditevent"]
)
def test_staff_changelists_render_across_organizations(path, staff, tenant, other_tenant, client):
    client.force_login(staff)
    response = client.get(f"/admin/agentops/{path}/")
    assert response.status_code == 200


def test_staff_searches_projects_of_every_organization(staff, tenant, other_tenant, client):
    client.force_login(staff)
    body = client.get("/admin/agentops/project/?q=agent").content.decode()
    assert "acme" in body and "globex" in body


def test_organization_change_page_shows_its_members(staff, tenant, client):
    client.force_login(staff)
    response = client.get(f"/admin/agentops/organization/{tenant.organization.pk}/change/")
    assert response.status_code == 200
    assert "owner@acme.example.com" in response.content.decode() or "owner-acme" in response.content.decode()


def test_audit_events_are_read_only_in_admin(staff, tenant, client):
    event = audit_record(organization=tenant.organization, actor=tenant.owner, action="test.event")
    client.force_login(staff)
    assert client.get(f"/admin/agentops/auditevent/{event.pk}/delete/").status_code == 403
    assert client.get("/admin/agentops/auditevent/add/").status_code == 403


def test_non_staff_member_cannot_open_admin(tenant, client):
    client.force_login(tenant.owner)
    response = client.get("/admin/agentops/project/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
