"""The Django admin (staff console) reads across organizations; nobody else gets in."""

from datetime import date
from decimal import Decimal

import pytest

from agentops.models import ApiKey, AuditEvent
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.api_keys import api_key_create
from agentops.services.audit import audit_record
from billing.models import UsageDaily
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


def test_staff_revoke_api_keys_and_never_delete_one_whose_usage_the_ledger_names(staff, tenant, client):
    # Deleting the key would null its ledger row into the same day's unkeyed one
    # (usage_daily_unique): an IntegrityError, a 500, and the key's spend unattributed.
    with organization_scope(tenant.organization):
        key, raw_key = api_key_create(project=tenant.project, actor=tenant.owner, name="ci", scopes=["read"])
        for api_key in (key, None):
            UsageDaily.objects.create(
                organization=tenant.organization, project=tenant.project, day=date(2026, 11, 29), agent_name="a",
                model="m", api_key=api_key, category="llm", unit="token", cost=Decimal("0.5"), steps=1,
            )  # fmt: skip
    client.force_login(staff)
    assert client.get(f"/admin/agentops/apikey/{key.pk}/delete/").status_code == 403
    changelist = client.get("/admin/agentops/apikey/").content.decode()
    assert 'value="revoke"' in changelist and 'value="delete_selected"' not in changelist

    response = client.post("/admin/agentops/apikey/", {"action": "revoke", "_selected_action": [key.pk]}, follow=True)
    assert response.status_code == 200 and "1 API key(s) revoked." in response.content.decode()
    assert client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {raw_key}").status_code == 401
    with dangerously_unscoped("test reads across organizations"):
        assert ApiKey.objects.get(pk=key.pk).revoked_at is not None
        assert UsageDaily.objects.filter(api_key=key).count() == 1
        assert AuditEvent.objects.filter(action="api_key.revoke", target_id=str(key.pk)).exists()
