"""Idempotency-Key on mutations that start work."""

from datetime import timedelta

from django.utils import timezone

from agentops.models import IdempotencyRecord, Invitation, Project
from agentops.scoping import organization_scope
from agentops.services.idempotency import request_fingerprint
from tests.agentops.factories import ProjectFactory


def _projects_url(tenant):
    return f"/api/v1/organizations/{tenant.organization.slug}/projects/"


def test_same_key_and_body_replays_first_response_without_doing_it_twice(tenant, client_for):
    client = client_for(tenant.admin)
    headers = {"HTTP_IDEMPOTENCY_KEY": '"7b1e0c1a-0d2f-4d55-9a57-3f6f0e1d2c3b"'}
    first = client.post(_projects_url(tenant), {"name": "Billing bot"}, format="json", **headers)
    second = client.post(_projects_url(tenant), {"name": "Billing bot"}, format="json", **headers)
    assert first.status_code == second.status_code == 201
    assert second.json() == first.json()
    assert second["Idempotent-Replayed"] == "true"
    with organization_scope(tenant.organization):
        assert Project.objects.filter(name="Billing bot").count() == 1


def test_same_key_with_another_body_is_422(tenant, client_for):
    client = client_for(tenant.admin)
    client.post(_projects_url(tenant), {"name": "One"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    response = client.post(_projects_url(tenant), {"name": "Two"}, format="json", HTTP_IDEMPOTENCY_KEY="k-1")
    assert response.status_code == 422
    assert response.json()["error"]["code"] == "idempotency_key_reused"
    with organization_scope(tenant.organization):
        assert not Project.objects.filter(name="Two").exists()


def test_keys_are_per_client(tenant, client_for):
    body = {"email": "x@example.com", "role": "member"}
    url = f"/api/v1/organizations/{tenant.organization.slug}/invitations/"
    first = client_for(tenant.owner).post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="shared")
    second = client_for(tenant.admin).post(url, body, format="json", HTTP_IDEMPOTENCY_KEY="shared")
    assert first.status_code == 201
    # A different client with the same key is a new request: here a duplicate invitation.
    assert second.status_code == 409
    with organization_scope(tenant.organization):
        assert Invitation.objects.filter(email="x@example.com").count() == 1


def test_failed_request_does_not_burn_the_key(tenant, client_for):
    client = client_for(tenant.admin)
    ProjectFactory(organization=tenant.organization, name="Taken", slug="taken")
    conflict = client.post(_projects_url(tenant), {"name": "Taken"}, format="json", HTTP_IDEMPOTENCY_KEY="retry-me")
    assert conflict.status_code == 409
    with organization_scope(tenant.organization):
        Project.objects.filter(slug="taken").delete()
    retry = client.post(_projects_url(tenant), {"name": "Taken"}, format="json", HTTP_IDEMPOTENCY_KEY="retry-me")
    assert retry.status_code == 201
    assert "Idempotent-Replayed" not in retry


def test_retry_while_first_is_in_progress_is_409(tenant, client_for):
    client = client_for(tenant.admin)
    body = {"name": "Slow"}
    fingerprint = request_fingerprint(method="POST", path=_projects_url(tenant), body=body)
    with organization_scope(tenant.organization):
        IdempotencyRecord.objects.create(
            organization=tenant.organization,
            client=f"user:{tenant.admin.pk}",
            key="busy",
            request_hash=fingerprint,
            expires_at=timezone.now() + timedelta(hours=1),
        )
    response = client.post(_projects_url(tenant), body, format="json", HTTP_IDEMPOTENCY_KEY="busy")
    assert response.status_code == 409
    with organization_scope(tenant.organization):
        assert not Project.objects.filter(name="Slow").exists()


def test_overlong_key_is_rejected(tenant, client_for):
    response = client_for(tenant.admin).post(
        _projects_url(tenant), {"name": "X"}, format="json", HTTP_IDEMPOTENCY_KEY="k" * 300
    )
    assert response.status_code == 400
    assert "Idempotency-Key" in response.json()["error"]["message"]
