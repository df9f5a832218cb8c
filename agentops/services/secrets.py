"""Provider secrets: encrypted at rest, never shown again once saved."""

from __future__ import annotations

from functools import cache

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from agentops import crypto
from agentops.errors import InvalidRequest, NotFound
from agentops.models import Organization, ProviderSecret
from agentops.netguard import UnsafeUrlError, check_outbound_url
from agentops.scoping import organization_id_for_sql
from agentops.services.audit import acting_user, audit_record, audited_delete


def provider_secret_set(
    *, organization: Organization, actor, provider: str, api_key: str, base_url: str = "", ip: str | None = None
) -> ProviderSecret:
    """Save (or replace) an organization's credentials for ``provider``."""
    if provider not in ProviderSecret.Provider.values:
        raise InvalidRequest(
            f"unknown provider '{provider}'; choose one of {', '.join(ProviderSecret.Provider.values)}"
        )
    api_key = (api_key or "").strip()
    if len(api_key) < 8:
        raise InvalidRequest("the API key looks too short")
    base_url = (base_url or "").strip()
    if base_url:
        try:
            check_base_url(provider=provider, base_url=base_url)
        except UnsafeUrlError as exc:
            raise InvalidRequest(f"base URL refused: {exc}") from None
    with transaction.atomic():
        secret, created = ProviderSecret.objects.select_for_update().get_or_create(
            organization=organization,
            provider=provider,
            defaults={"api_key_ciphertext": "", "api_key_hint": ""},
        )
        secret.api_key_ciphertext = crypto.encrypt(api_key)
        secret.api_key_hint = api_key[-4:]
        secret.base_url = base_url
        secret.updated_by = acting_user(actor)
        secret.updated_at = timezone.now()
        secret.save()
        audit_record(
            organization=organization,
            actor=actor,
            action="provider_secret.create" if created else "provider_secret.update",
            target=secret,
            data={"provider": provider, "base_url": base_url},
            ip=ip,
        )
    return secret


def _normalised_url(url: str) -> str:
    return url.strip().rstrip("/").lower()


def check_base_url(*, provider: str, base_url: str) -> None:
    """Raise ``UnsafeUrlError`` unless ``base_url`` may be used for ``provider``: a public
    address, and for W&B also one of the operator's ``WANDB_ALLOWED_BASE_URLS`` (wandb's
    own service process uploads and follows redirects, so only a trusted server is safe).
    Checked when saved and again before each use (the list or DNS may have changed)."""
    if provider == ProviderSecret.Provider.WANDB:
        allowed = {_normalised_url(url) for url in settings.WANDB_ALLOWED_BASE_URLS if url.strip()}
        if _normalised_url(base_url) not in allowed:
            raise UnsafeUrlError(
                f"{base_url} is not in WANDB_ALLOWED_BASE_URLS (the W&B servers the operator allows: "
                f"{', '.join(sorted(allowed)) or 'none'})"
            )
    check_outbound_url(base_url)


def provider_secret_delete(*, organization: Organization, actor, provider: str, ip: str | None = None) -> None:
    """Delete an organization's credentials for ``provider``."""
    with transaction.atomic():
        secret = ProviderSecret.objects.filter(organization=organization, provider=provider).first()
        if secret is None:
            raise NotFound(f"no {provider} credentials are saved")
        audited_delete(
            secret,
            organization=organization,
            actor=actor,
            action="provider_secret.delete",
            data={"provider": provider},
            ip=ip,
        )


def provider_credentials(*, organization: Organization, provider: str) -> tuple[str, str] | None:
    """The decrypted API key and base URL, for the code that calls the provider only.
    The base URL is checked again here: DNS may have changed since it was saved.

    Read for every run a worker executes, so by one hand-written statement (the ORM's
    query cost a millisecond of Python), filtered by the organization in scope as the
    manager's."""
    with connection.cursor() as cursor:
        cursor.execute(
            _credentials_sql(),
            {"organization": organization.pk, "provider": provider, "scope": organization_id_for_sql()},
        )
        row = cursor.fetchone()
    if row is None:
        return None
    ciphertext, base_url = row
    if base_url:
        check_base_url(provider=provider, base_url=base_url)
    return crypto.decrypt(ciphertext), base_url


@cache
def _credentials_sql() -> str:
    return (
        f"SELECT api_key_ciphertext, base_url FROM {connection.ops.quote_name(ProviderSecret._meta.db_table)} "  # noqa: S608 - quoted name
        "WHERE organization_id = %(organization)s AND provider = %(provider)s "
        "AND (%(scope)s::bigint IS NULL OR organization_id = %(scope)s)"
    )
