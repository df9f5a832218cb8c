"""Project API keys: hashing, scopes, revocation, expiry, the create command."""

import hashlib
from datetime import timedelta

from django.core.management import call_command
from django.utils import timezone
from rest_framework.test import APIClient

from agentops.models import ApiKey, AuditEvent
from agentops.scoping import dangerously_unscoped, organization_scope


def _bearer(raw: str) -> APIClient:
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


def _project_url(tenant):
    return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/"


def test_created_key_is_returned_once_and_stored_only_as_hash(tenant, client_for):
    url = f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/api-keys/"
    response = client_for(tenant.admin).post(url, {"name": "ci", "scopes": ["read", "ingest"]}, format="json")
    assert response.status_code == 201
    raw = response.json()["key"]
    assert raw.startswith("ao_") and response.json()["prefix"] == raw[:11]
    with dangerously_unscoped("test"):
        key = ApiKey.objects.get(pk=response.json()["id"])
    assert key.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw not in str(ApiKey.dangerously_unscoped_objects.filter(pk=key.pk).values().first())
    listing = client_for(tenant.admin).get(url).json()["results"]
    assert all("key" not in item for item in listing)
    detail = client_for(tenant.admin).get(f"{url}{key.pk}/").json()
    assert "key" not in detail and detail["prefix"] == raw[:11]


def test_key_authenticates_and_records_last_use(tenant, make_api_key):
    key, raw = make_api_key(tenant.project, ["read"])
    assert key.last_used_at is None
    response = _bearer(raw).get("/api/v1/me/")
    assert response.status_code == 200
    assert response.json() == {
        "type": "api_key",
        "api_key": {"id": key.pk, "name": "ci", "prefix": key.prefix, "scopes": ["read"], "expires_at": None},
        "organization": "acme",
        "project": "agent",
    }
    with organization_scope(tenant.organization):
        key.refresh_from_db()
    assert key.last_used_at is not None


def test_revoked_key_is_refused_at_once(tenant, make_api_key, client_for):
    key, raw = make_api_key(tenant.project, ["read"])
    client = _bearer(raw)
    assert client.get(_project_url(tenant)).status_code == 200
    revoke = client_for(tenant.owner).delete(f"{_project_url(tenant)}api-keys/{key.pk}/")
    assert revoke.status_code == 200 and revoke.json()["status"] == "revoked"
    response = client.get(_project_url(tenant))
    assert response.status_code == 401
    assert response.json()["error"] == {
        "code": "authentication_failed",
        "message": "this API key has been revoked",
        "details": None,
    }
    with organization_scope(tenant.organization):
        assert AuditEvent.objects.filter(action="api_key.revoke", target_id=str(key.pk)).exists()


def test_expired_key_is_refused(tenant, make_api_key):
    key, raw = make_api_key(tenant.project, ["read"], expires_at=timezone.now() + timedelta(seconds=30))
    assert _bearer(raw).get(_project_url(tenant)).status_code == 200
    ApiKey.dangerously_unscoped_objects.filter(pk=key.pk).update(expires_at=timezone.now() - timedelta(seconds=1))
    response = _bearer(raw).get(_project_url(tenant))
    assert response.status_code == 401
    assert response.json()["error"]["message"] == "this API key has expired"


def test_unknown_or_malformed_key_is_unauthorized(tenant):
    assert _bearer("ao_not-a-real-key").get(_project_url(tenant)).status_code == 401
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION="Bearer two parts")
    assert client.get(_project_url(tenant)).status_code == 401


def test_key_scopes_limit_what_it_may_do(tenant, make_api_key):
    _key, ingest_only = make_api_key(tenant.project, ["ingest"])
    response = _bearer(ingest_only).get(_project_url(tenant))
    assert response.status_code == 403
    assert "scopes (ingest)" in response.json()["error"]["message"]


def test_key_cannot_manage_keys_or_organizations(tenant, make_api_key):
    _key, raw = make_api_key(tenant.project, ["ingest", "read", "execute"])
    client = _bearer(raw)
    assert client.get(f"{_project_url(tenant)}api-keys/").status_code == 403
    assert client.post(f"{_project_url(tenant)}api-keys/", {"name": "x", "scopes": ["read"]}).status_code == 403
    assert client.get(f"/api/v1/organizations/{tenant.organization.slug}/members/").status_code == 403
    assert client.get("/api/v1/organizations/").status_code == 403


def test_create_api_key_command_prints_key_alone_on_last_line(tenant, capsys):
    call_command("create_api_key", "acme/agent", "--scopes", "ingest,read", "--name", "pipeline")
    last_line = capsys.readouterr().out.strip().splitlines()[-1]
    assert last_line.startswith("ao_") and " " not in last_line
    response = _bearer(last_line).get(_project_url(tenant))
    assert response.status_code == 200 and response.json()["slug"] == "agent"


def test_a_key_is_read_with_its_project_and_organization_in_one_statement(
    tenant, make_api_key, django_assert_num_queries
):
    from agentops.services.api_keys import api_key_authenticate

    key, raw = make_api_key(tenant.project, ["read", "ingest"])
    api_key_authenticate(raw)  # the first use also records last_used_at
    with django_assert_num_queries(1):
        found = api_key_authenticate(raw)
        assert sorted(found.scopes) == ["ingest", "read"]
        assert (found.pk, found.name, found.scopes, found.prefix) == (key.pk, "ci", key.scopes, key.prefix)
        assert (found.project.pk, found.project.slug, found.organization.slug) == (tenant.project.pk, "agent", "acme")
        assert found.project.organization is found.organization
        assert found.last_used_at is not None and found.last_used_at.tzinfo is not None
