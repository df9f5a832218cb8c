"""Every role against every protected action of the core API.

The expected roles are written out here, not read from agentops/roles.py, so a change
to the permission table that widens or narrows a role makes this test fail.
"""

from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.models import Invitation
from agentops.scoping import organization_scope
from agentops.services.api_keys import api_key_create
from agentops.services.secrets import provider_secret_set
from tests.agentops.factories import MembershipFactory, UserFactory

ALL = {"owner", "admin", "member", "viewer"}
ADMINS = {"owner", "admin"}
OWNER = {"owner"}

ORG = "/api/v1/organizations/{org}"
PROJECT = "/api/v1/projects/{org}/{project}"

# (action, method, url template, body, roles allowed)
ACTIONS = [
    ("read organization", "get", ORG + "/", None, ALL),
    ("rename organization", "patch", ORG + "/", {"name": "Renamed"}, ADMINS),
    ("delete organization", "delete", ORG + "/", {"confirm": "{org}"}, OWNER),
    ("transfer ownership", "post", ORG + "/transfer-ownership/", {"membership_id": "{extra_member}"}, OWNER),
    ("list members", "get", ORG + "/members/", None, ALL),
    ("change a member's role", "patch", ORG + "/members/{extra_member}/", {"role": "viewer"}, ADMINS),
    ("demote an owner", "patch", ORG + "/members/{second_owner}/", {"role": "admin"}, OWNER),
    ("remove a member", "delete", ORG + "/members/{extra_member}/", None, ADMINS),
    ("remove an owner", "delete", ORG + "/members/{second_owner}/", None, OWNER),
    ("list invitations", "get", ORG + "/invitations/", None, ADMINS),
    ("invite a member", "post", ORG + "/invitations/", {"email": "new@example.com", "role": "member"}, ADMINS),
    ("invite an owner", "post", ORG + "/invitations/", {"email": "boss@example.com", "role": "owner"}, OWNER),
    ("revoke an invitation", "delete", ORG + "/invitations/{invitation}/", None, ADMINS),
    ("list projects", "get", ORG + "/projects/", None, ALL),
    ("create a project", "post", ORG + "/projects/", {"name": "Second"}, ADMINS),
    ("read a project", "get", PROJECT + "/", None, ALL),
    ("rename a project", "patch", PROJECT + "/", {"name": "Renamed"}, ADMINS),
    ("delete a project", "delete", PROJECT + "/", None, ADMINS),
    ("list API keys", "get", PROJECT + "/api-keys/", None, ADMINS),
    ("create an API key", "post", PROJECT + "/api-keys/", {"name": "ci", "scopes": ["read"]}, ADMINS),
    ("revoke an API key", "delete", PROJECT + "/api-keys/{api_key}/", None, ADMINS),
    ("list provider secrets", "get", ORG + "/provider-secrets/", None, ADMINS),
    ("set a provider secret", "put", ORG + "/provider-secrets/mistral/", {"api_key": "sk-new-key-1234"}, ADMINS),
    ("delete a provider secret", "delete", ORG + "/provider-secrets/mistral/", None, ADMINS),
    ("read the audit log", "get", ORG + "/audit-log/", None, ADMINS),
]


@pytest.fixture
def world(tenant):
    """The tenant plus the objects the actions act on."""
    organization = tenant.organization
    second_owner = MembershipFactory(organization=organization, user=UserFactory(), role="owner")
    extra_member = MembershipFactory(organization=organization, user=UserFactory(), role="member")
    with organization_scope(organization):
        invitation = Invitation.objects.create(
            organization=organization,
            email="pending@example.com",
            role="member",
            token_hash="x" * 64,
            expires_at=timezone.now() + timedelta(days=1),
        )
        key, _ = api_key_create(project=tenant.project, actor=None, name="existing", scopes=["read"])
        provider_secret_set(organization=organization, actor=None, provider="mistral", api_key="sk-existing-9999")
    return {
        "org": organization.slug,
        "project": tenant.project.slug,
        "second_owner": second_owner.pk,
        "extra_member": extra_member.pk,
        "invitation": invitation.pk,
        "api_key": key.pk,
    }


def _fill(value, names):
    if isinstance(value, str):
        filled = value.format(**names)
        return int(filled) if filled.isdigit() else filled
    if isinstance(value, dict):
        return {k: _fill(v, names) for k, v in value.items()}
    return value


@pytest.mark.parametrize("role", sorted(ALL))
@pytest.mark.parametrize(("action", "method", "url", "body", "allowed"), ACTIONS, ids=[a[0] for a in ACTIONS])
def test_role_matrix(role, action, method, url, body, allowed, tenant, world, client_for):
    client = client_for(tenant.user(role))
    response = getattr(client, method)(_fill(url, world), _fill(body, world), format="json")
    if role in allowed:
        assert 200 <= response.status_code < 300, f"{role} should be able to {action}: {response.content}"
    else:
        assert response.status_code == 403, f"{role} must not {action}: {response.status_code} {response.content}"
        assert response.json()["error"]["code"] == "permission_denied"


@pytest.mark.parametrize(("action", "method", "url", "body", "allowed"), ACTIONS, ids=[a[0] for a in ACTIONS])
def test_outsider_gets_not_found(action, method, url, body, allowed, tenant, world, outsider, client_for):
    response = getattr(client_for(outsider), method)(_fill(url, world), _fill(body, world), format="json")
    assert response.status_code == 404, response.content


def test_anonymous_request_is_unauthorized(tenant, api_client):
    response = api_client.get(f"/api/v1/organizations/{tenant.organization.slug}/")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"].startswith("Bearer")
