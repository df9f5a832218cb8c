"""Provider secrets: encrypted at rest, never returned, rotated to the newest key."""

import pytest
from cryptography.fernet import Fernet
from django.core.management import call_command

from agentops import crypto
from agentops.models import AuditEvent, ProviderSecret
from agentops.netguard import UnsafeUrlError, check_outbound_url
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.secrets import provider_credentials, provider_secret_set

PLAINTEXT = "sk-mistral-very-secret-4242"


def _url(tenant, provider="mistral"):
    return f"/api/v1/organizations/{tenant.organization.slug}/provider-secrets/{provider}/"


def test_secret_is_encrypted_at_rest_and_never_returned(tenant, client_for):
    client = client_for(tenant.admin)
    response = client.put(_url(tenant), {"api_key": PLAINTEXT, "base_url": "http://127.0.0.1:9/v1"}, format="json")
    assert response.status_code == 200
    assert PLAINTEXT not in response.content.decode()
    assert response.json()["api_key_hint"] == "4242"
    for body in (client.get(_url(tenant)).content, client.get(_url(tenant).rsplit("mistral/", 1)[0]).content):
        assert PLAINTEXT.encode() not in body
    row = ProviderSecret.dangerously_unscoped_objects.filter(organization=tenant.organization).values().get()
    assert PLAINTEXT not in str(row)
    assert crypto.decrypt(row["api_key_ciphertext"]) == PLAINTEXT
    with organization_scope(tenant.organization):
        assert provider_credentials(organization=tenant.organization, provider="mistral") == (
            PLAINTEXT,
            "http://127.0.0.1:9/v1",
        )
        event = AuditEvent.objects.get(action="provider_secret.create")
    assert PLAINTEXT not in str(event.data)


def test_credentials_are_read_by_one_statement_in_their_organizations_scope_only(
    tenant, other_tenant, django_assert_num_queries
):
    from agentops.scoping import UnscopedQueryError

    organization = tenant.organization
    with organization_scope(organization):
        provider_secret_set(organization=organization, actor=tenant.owner, provider="mistral", api_key=PLAINTEXT)
        with django_assert_num_queries(1):
            assert provider_credentials(organization=organization, provider="mistral") == (PLAINTEXT, "")
        assert provider_credentials(organization=organization, provider="wandb") is None
        assert provider_credentials(organization=other_tenant.organization, provider="mistral") is None
    with organization_scope(other_tenant.organization):
        assert provider_credentials(organization=organization, provider="mistral") is None
    with pytest.raises(UnscopedQueryError):
        provider_credentials(organization=organization, provider="mistral")


def test_unknown_provider_is_a_clear_400(tenant, client_for):
    response = client_for(tenant.admin).put(_url(tenant, "nope"), {"api_key": PLAINTEXT}, format="json")
    assert response.status_code == 400
    assert "unknown provider 'nope'" in response.json()["error"]["message"]


def test_private_base_url_is_refused_unless_allowed(tenant, client_for, settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    for url in ("http://127.0.0.1:8080/v1", "http://10.0.0.5/v1", "http://169.254.169.254/latest", "http://[::1]/"):
        response = client_for(tenant.admin).put(_url(tenant), {"api_key": PLAINTEXT, "base_url": url}, format="json")
        assert response.status_code == 400, url
        assert "private or reserved address" in response.json()["error"]["message"]
    assert not ProviderSecret.dangerously_unscoped_objects.exists()


def test_outbound_url_check_accepts_public_addresses_and_rejects_bad_schemes():
    assert check_outbound_url("https://8.8.8.8/v1", allow_private=False) == "https://8.8.8.8/v1"
    for bad in ("ftp://example.com", "file:///etc/passwd", "http://user:pw@8.8.8.8/"):
        with pytest.raises(UnsafeUrlError):
            check_outbound_url(bad, allow_private=False)


def test_rotation_reencrypts_every_secret_with_the_newest_key(tenant, other_tenant, settings, capsys):
    old_key = settings.ENCRYPTION_KEYS[0]
    for t in (tenant, other_tenant):
        with organization_scope(t.organization):
            provider_secret_set(
                organization=t.organization,
                actor=None,
                provider="mistral",
                api_key=f"{PLAINTEXT}-{t.organization.slug}",
            )
    new_key = Fernet.generate_key().decode()
    settings.ENCRYPTION_KEYS = [new_key, old_key]
    call_command("rotate_encryption_keys")
    assert "Re-encrypted 2 secret(s)" in capsys.readouterr().out
    settings.ENCRYPTION_KEYS = [new_key]  # the old key is retired
    with dangerously_unscoped("test checks every tenant's ciphertext"):
        secrets = list(ProviderSecret.objects.order_by("organization__slug"))
    assert [crypto.decrypt(s.api_key_ciphertext) for s in secrets] == [f"{PLAINTEXT}-acme", f"{PLAINTEXT}-globex"]
    settings.ENCRYPTION_KEYS = [old_key]
    with pytest.raises(crypto.DecryptionError):
        crypto.decrypt(secrets[0].api_key_ciphertext)


def test_a_new_base_url_needs_the_key_again(tenant, client_for):
    """Provider and W&B credentials are saved whole: the key goes with every base URL."""
    client = client_for(tenant.admin)
    for provider in ("mistral", "wandb"):
        assert client.put(_url(tenant, provider), {"api_key": PLAINTEXT}, format="json").status_code == 200
        moved = client.put(_url(tenant, provider), {"base_url": "http://127.0.0.1:10/steal"}, format="json")
        assert moved.status_code == 400 and "api_key" in moved.content.decode()
        with organization_scope(tenant.organization):
            assert provider_credentials(organization=tenant.organization, provider=provider) == (PLAINTEXT, "")


def test_a_wandb_base_url_outside_the_operators_list_is_a_400_naming_the_setting(tenant, client_for, settings):
    """wandb's service process follows redirects the platform cannot check: only servers
    the operator listed may receive the key and the runs."""
    settings.WANDB_ALLOWED_BASE_URLS = ["https://api.wandb.ai", "https://wandb.acme.test"]
    client = client_for(tenant.admin)
    refused = client.put(
        _url(tenant, "wandb"), {"api_key": PLAINTEXT, "base_url": "https://wandb.evil.test"}, format="json"
    )
    assert refused.status_code == 400
    assert "WANDB_ALLOWED_BASE_URLS" in refused.json()["error"]["message"]
    assert not ProviderSecret.dangerously_unscoped_objects.exists()
    allowed = client.put(
        _url(tenant, "wandb"), {"api_key": PLAINTEXT, "base_url": "https://wandb.acme.test/"}, format="json"
    )
    assert allowed.status_code == 200, allowed.content
    # Mistral's base URL is not W&B's business.
    assert (
        client.put(_url(tenant), {"api_key": PLAINTEXT, "base_url": "http://127.0.0.1:9/v1"}, format="json").status_code
        == 200
    )


def test_the_secrets_page_refuses_a_wandb_base_url_outside_the_list(tenant, client, settings):
    settings.WANDB_ALLOWED_BASE_URLS = ["https://api.wandb.ai"]
    client.force_login(tenant.admin)
    response = client.post(
        "/o/acme/secrets/", {"provider": "wandb", "api_key": PLAINTEXT, "base_url": "https://wandb.evil.test"}
    )
    assert response.status_code == 400
    assert "WANDB_ALLOWED_BASE_URLS" in response.content.decode()
    assert not ProviderSecret.dangerously_unscoped_objects.exists()


def test_a_stored_wandb_base_url_taken_off_the_list_is_refused_when_used(tenant, settings):
    settings.WANDB_ALLOWED_BASE_URLS = ["https://wandb.acme.test"]
    with organization_scope(tenant.organization):
        provider_secret_set(
            organization=tenant.organization,
            actor=tenant.owner,
            provider="wandb",
            api_key=PLAINTEXT,
            base_url="https://wandb.acme.test",
        )
        settings.WANDB_ALLOWED_BASE_URLS = ["https://api.wandb.ai"]
        with pytest.raises(UnsafeUrlError, match="WANDB_ALLOWED_BASE_URLS"):
            provider_credentials(organization=tenant.organization, provider="wandb")


def test_deleted_credentials_are_gone_and_the_deletion_is_audited_with_the_provider(tenant, client_for):
    client = client_for(tenant.admin)
    assert client.put(_url(tenant), {"api_key": PLAINTEXT}, format="json").status_code == 200
    assert client.delete(_url(tenant)).status_code == 204
    assert client.delete(_url(tenant)).status_code == 404
    with organization_scope(tenant.organization):
        assert not ProviderSecret.objects.exists()
        event = AuditEvent.objects.get(action="provider_secret.delete")
    assert (event.target_type, event.data) == ("ProviderSecret", {"provider": "mistral"})
    assert event.target_id


def test_credentials_saved_by_an_api_key_name_no_user_and_are_audited_with_the_key(tenant):
    """An actor that is not a user (an API key, as the services accept everywhere) is no
    ``updated_by``: the audit log names it instead."""
    from agentops.services.api_keys import api_key_create

    with organization_scope(tenant.organization):
        key, _raw = api_key_create(project=tenant.project, actor=None, name="ops", scopes=["execute"])
        secret = provider_secret_set(organization=tenant.organization, actor=key, provider="mistral", api_key="k" * 16)
        assert ProviderSecret.objects.get(pk=secret.pk).updated_by is None
        assert AuditEvent.objects.filter(action="provider_secret.create").exists()
