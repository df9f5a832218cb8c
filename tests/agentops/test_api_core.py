"""Core API behaviour: organizations, members, invitations, errors, pagination, throttling, schema."""

import json
import time

from django.core import mail

from agentops.models import Membership, Organization
from agentops.scoping import organization_scope
from tests.agentops.factories import MembershipFactory, UserFactory


def wait_for_mail(count: int, timeout: float = 30) -> None:
    """Until the worker has sent ``count`` emails (invitations are mailed by a task)."""
    deadline = time.monotonic() + timeout
    while len(mail.outbox) < count:
        assert time.monotonic() < deadline, f"{len(mail.outbox)} of {count} emails sent within {timeout} s"
        time.sleep(0.05)


def test_user_creates_organization_and_becomes_owner(db, client_for):
    user = UserFactory()
    response = client_for(user).post("/api/v1/organizations/", {"name": "Initech", "slug": "initech"}, format="json")
    assert response.status_code == 201
    assert response.json()["role"] == "owner"
    organization = Organization.objects.get(slug="initech")
    with organization_scope(organization):
        assert Membership.objects.get(user=user).role == "owner"
    listing = client_for(user).get("/api/v1/organizations/").json()
    assert [(o["slug"], o["role"]) for o in listing] == [("initech", "owner")]


def test_taken_organization_slug_is_409_and_writes_nothing(tenant, client_for):
    user = UserFactory()
    response = client_for(user).post("/api/v1/organizations/", {"name": "Acme", "slug": "acme"}, format="json")
    assert response.status_code == 409
    assert response.json()["error"]["message"] == "the slug 'acme' is taken; choose another"
    assert Organization.objects.filter(slug="acme").count() == 1
    with organization_scope(tenant.organization):
        assert not Membership.objects.filter(user=user).exists()


def test_user_may_belong_to_several_organizations(tenant, other_tenant, client_for):
    MembershipFactory(organization=other_tenant.organization, user=tenant.member, role="viewer")
    body = client_for(tenant.member).get("/api/v1/me/").json()
    assert sorted((o["slug"], o["role"]) for o in body["organizations"]) == [("acme", "member"), ("globex", "viewer")]


def test_last_owner_cannot_be_demoted_or_leave(tenant, client_for):
    with organization_scope(tenant.organization):
        owner_membership = Membership.objects.get(user=tenant.owner)
    url = f"/api/v1/organizations/acme/members/{owner_membership.pk}/"
    client = client_for(tenant.owner)
    demote = client.patch(url, {"role": "admin"}, format="json")
    assert demote.status_code == 409
    assert "last owner" in demote.json()["error"]["message"]
    leave = client.delete(url)
    assert leave.status_code == 409
    with organization_scope(tenant.organization):
        assert Membership.objects.get(pk=owner_membership.pk).role == "owner"


def test_transfer_ownership_makes_target_owner_and_actor_admin(tenant, client_for):
    with organization_scope(tenant.organization):
        target = Membership.objects.get(user=tenant.member)
    response = client_for(tenant.owner).post(
        "/api/v1/organizations/acme/transfer-ownership/", {"membership_id": target.pk}, format="json"
    )
    assert response.status_code == 200
    with organization_scope(tenant.organization):
        roles = dict(Membership.objects.values_list("user__email", "role"))
    assert roles["member@acme.example.com"] == "owner"
    assert roles["owner@acme.example.com"] == "admin"


def test_member_can_leave_organization(tenant, client_for):
    with organization_scope(tenant.organization):
        own = Membership.objects.get(user=tenant.viewer)
    response = client_for(tenant.viewer).delete(f"/api/v1/organizations/acme/members/{own.pk}/")
    assert response.status_code == 204
    assert client_for(tenant.viewer).get("/api/v1/organizations/acme/").status_code == 404


def test_invitation_is_emailed_and_accepted_with_matching_verified_email(tenant, client_for, celery_worker):
    response = client_for(tenant.admin).post(
        "/api/v1/organizations/acme/invitations/", {"email": "Newbie@Example.com", "role": "member"}, format="json"
    )
    assert response.status_code == 201 and response.json()["status"] == "pending"
    wait_for_mail(1)
    assert mail.outbox[-1].to == ["newbie@example.com"]
    link = next(line for line in mail.outbox[-1].body.splitlines() if "/invitations/" in line)
    token = link.rstrip("/").rsplit("/", 1)[-1]

    stranger = UserFactory(email="someone-else@example.com")
    refused = client_for(stranger).post("/api/v1/invitations/accept/", {"token": token}, format="json")
    assert refused.status_code == 403
    assert "this invitation is for newbie@example.com" in refused.json()["error"]["message"]

    newbie = UserFactory(email="newbie@example.com")
    accepted = client_for(newbie).post("/api/v1/invitations/accept/", {"token": token}, format="json")
    assert accepted.status_code == 200 and accepted.json()["role"] == "member"
    assert client_for(newbie).get("/api/v1/organizations/acme/").json()["role"] == "member"
    again = client_for(newbie).post("/api/v1/invitations/accept/", {"token": token}, format="json")
    assert again.status_code == 409


def test_revoked_invitation_cannot_be_accepted(tenant, client_for, celery_worker):
    created = client_for(tenant.owner).post(
        "/api/v1/organizations/acme/invitations/", {"email": "late@example.com", "role": "viewer"}, format="json"
    )
    wait_for_mail(1)
    token = mail.outbox[-1].body.split("/invitations/")[1].split("/")[0]
    revoke = client_for(tenant.owner).delete(f"/api/v1/organizations/acme/invitations/{created.json()['id']}/")
    assert revoke.json()["status"] == "revoked"
    response = client_for(UserFactory(email="late@example.com")).post(
        "/api/v1/invitations/accept/", {"token": token}, format="json"
    )
    assert response.status_code == 409
    assert response.json()["error"]["message"] == "this invitation is revoked; ask for a new one"


def test_validation_error_uses_the_one_error_body(tenant, client_for):
    response = client_for(tenant.owner).post(
        "/api/v1/organizations/acme/invitations/", {"email": "not-an-email", "role": "emperor"}, format="json"
    )
    assert response.status_code == 400
    error = response.json()["error"]
    assert error["code"] == "invalid"
    assert error["message"].startswith("email: ")
    assert set(error["details"]) == {"email", "role"}


def test_malformed_json_is_400_not_500(tenant, client_for):
    response = client_for(tenant.owner).generic(
        "POST", "/api/v1/organizations/acme/projects/", "{not json", content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"


def test_unknown_api_url_is_json_404(client_for, tenant):
    response = client_for(tenant.owner).get("/api/v1/nothing-here/")
    assert response.status_code == 404
    assert response.json()["error"]["code"] == "not_found"


def test_lists_use_cursor_pagination(tenant, client_for):
    for _ in range(3):
        MembershipFactory(organization=tenant.organization, user=UserFactory(), role="viewer")
    client = client_for(tenant.owner)
    first = client.get("/api/v1/organizations/acme/members/?page_size=4").json()
    assert len(first["results"]) == 4 and "cursor=" in first["next"]
    second = client.get(first["next"]).json()
    assert len(second["results"]) == 3 and second["next"] is None
    ids = [m["id"] for m in first["results"] + second["results"]]
    assert len(set(ids)) == 7


def test_throttled_key_gets_429_with_retry_after(tenant, key_client, monkeypatch):
    from rest_framework.throttling import SimpleRateThrottle

    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"api_key": "2/min", "user": "1000/min"})
    client = key_client(tenant.project, ["read"])  # a new key: no counter yet
    url = "/api/v1/projects/acme/agent/"
    assert [client.get(url).status_code for _ in range(2)] == [200, 200]
    response = client.get(url)
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert response.json()["error"]["code"] == "throttled"
    # Another key is not affected by this key's limit.
    assert key_client(tenant.project, ["read"]).get(url).status_code == 200


def test_openapi_schema_and_docs_are_served(client):
    schema = client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json")
    assert schema.status_code == 200
    document = json.loads(schema.content)
    assert "/api/v1/projects/{org_slug}/{project_slug}/api-keys/" in document["paths"]
    assert document["components"]["securitySchemes"]["ApiKey"]["scheme"] == "bearer"
    assert client.get("/api/docs/").status_code == 200


def test_expired_invitation_does_not_block_inviting_the_address_again(tenant, client_for):
    from datetime import timedelta

    from django.utils import timezone

    from agentops.models import Invitation

    url = "/api/v1/organizations/acme/invitations/"
    first = client_for(tenant.owner).post(url, {"email": "slow@example.com", "role": "member"}, format="json")
    Invitation.dangerously_unscoped_objects.filter(pk=first.json()["id"]).update(
        expires_at=timezone.now() - timedelta(minutes=1)
    )
    second = client_for(tenant.owner).post(url, {"email": "slow@example.com", "role": "member"}, format="json")
    assert second.status_code == 201
    statuses = {item["id"]: item["status"] for item in client_for(tenant.owner).get(url).json()["results"]}
    assert statuses == {first.json()["id"]: "expired", second.json()["id"]: "pending"}


def test_a_read_is_served_while_the_rate_limiters_redis_is_down(tenant, client_for, redis_down):
    # The limits are off while Redis is down; the organization is read from PostgreSQL.
    response = client_for(tenant.owner).get("/api/v1/organizations/acme/")
    assert response.status_code == 200
    assert response.json()["slug"] == "acme"


def test_unreachable_redis_is_503_with_retry_after_not_500(tenant, client_for, monkeypatch):
    from redis.exceptions import ConnectionError as RedisConnectionError

    from agentops.api.views import OrganizationDetailView

    def redis_down(self):
        raise RedisConnectionError("Error 111 connecting to 127.0.0.1:6379. Connection refused.")

    # Work that needs Redis (here: the body) and cannot do without it.
    monkeypatch.setattr(OrganizationDetailView, "_body", redis_down)
    response = client_for(tenant.owner).get("/api/v1/organizations/acme/")
    assert response.status_code == 503
    assert response["Retry-After"] == "5"
    assert response.json()["error"]["code"] == "unavailable"
