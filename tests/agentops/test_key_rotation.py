"""Key rotation (agentops/services/key_rotation.py and the rotate_encryption_keys
command): every kind of stored secret survives the old key's removal."""

from decimal import Decimal

import pytest
from cryptography.fernet import Fernet
from django.core.management import CommandError, call_command

from agentops import crypto
from agentops.models import ProviderSecret
from agentops.scoping import organization_scope
from agentops.services.key_rotation import encryption_rotate
from agentops.services.secrets import provider_credentials, provider_secret_set
from billing.budgets import budget_create
from billing.models import Budget
from evals.bulk_export.destinations import credentials_of
from evals.bulk_export.services import destination_create
from evals.models import Evaluator, ExportDestination
from evals.services.evaluators import evaluator_create
from jobs.backends import backend_for
from jobs.models import ComputeBackend, JobSecret
from jobs.services import backend_create, secret_set
from runs.models import WebhookTool
from runs.services.agents import webhook_tool_create

# One plaintext per kind of secret, per organization: what each must still decrypt to.
KINDS = {
    (ProviderSecret, "api_key_ciphertext"),
    (WebhookTool, "secret_ciphertext"),
    (Evaluator, "secret_ciphertext"),
    (ComputeBackend, "credentials_ciphertext"),
    (JobSecret, "value_ciphertext"),
    (Budget, "webhook_ciphertext"),
    (ExportDestination, "credentials_ciphertext"),
}


def store_every_kind_of_secret(tenant) -> dict[tuple[type, str], set[str]]:
    """Save one secret of every kind through the services; return the plaintexts per
    (model, column)."""
    slug = tenant.organization.slug
    organization, project, admin = tenant.organization, tenant.project, tenant.admin
    with organization_scope(organization):
        provider_secret_set(organization=organization, actor=admin, provider="mistral", api_key=f"mistral-key-{slug}")
        provider_secret_set(organization=organization, actor=admin, provider="wandb", api_key=f"wandb-key-{slug}0000")
        _, tool_secret = webhook_tool_create(
            project=project, actor=admin, name="lookup", url="http://127.0.0.1:9/tool", description="Look up"
        )
        _, evaluator_secret = evaluator_create(
            project=project, actor=admin, name="graded", kind="webhook", config={"url": "http://127.0.0.1:9/score"}
        )
        backend_create(
            organization=organization,
            actor=admin,
            name="hub",
            kind="hf_jobs",
            credentials={"token": f"hf_token_{slug}"},
        )
        secret_set(organization=organization, actor=admin, name="OPENAI_API_KEY", value=f"sk-job-{slug}")
        budget_create(
            organization=organization,
            actor=admin,
            name="monthly",
            amount=Decimal("100"),
            webhook_url=f"https://hooks.example.com/{slug}",
        )
        destination_create(
            organization=organization,
            actor=admin,
            name="lake",
            kind="s3",
            config={"endpoint_url": "http://127.0.0.1:9", "bucket": "lake-bucket"},
            credentials={"access_key_id": f"AKIA{slug}", "secret_access_key": f"s3-secret-{slug}"},
        )
    return {
        (ProviderSecret, "api_key_ciphertext"): {f"mistral-key-{slug}", f"wandb-key-{slug}0000"},
        (WebhookTool, "secret_ciphertext"): {tool_secret},
        (Evaluator, "secret_ciphertext"): {evaluator_secret},
        (ComputeBackend, "credentials_ciphertext"): {f'{{"token": "hf_token_{slug}"}}'},
        (JobSecret, "value_ciphertext"): {f"sk-job-{slug}"},
        (Budget, "webhook_ciphertext"): {f"https://hooks.example.com/{slug}"},
        (ExportDestination, "credentials_ciphertext"): {
            f'{{"access_key_id": "AKIA{slug}", "secret_access_key": "s3-secret-{slug}"}}'
        },
    }


def _plaintexts() -> dict[tuple[type, str], set[str]]:
    """Every stored ciphertext of every registered column, decrypted."""
    found = {}
    for model, names in crypto.encrypted_fields():
        for name in names:
            values = model._base_manager.exclude(**{name: ""}).values_list(name, flat=True)
            found[(model, name)] = {crypto.decrypt(value) for value in values}
    return found


def test_every_kind_of_secret_decrypts_after_rotation_and_removing_the_old_key(tenant, other_tenant, settings, capsys):
    expected = store_every_kind_of_secret(tenant)
    for key, values in store_every_kind_of_secret(other_tenant).items():
        expected[key] |= values
    # The test knows every registered kind: a new encrypted column needs a secret here too.
    assert {(model, name) for model, names in crypto.encrypted_fields() for name in names} == KINDS
    old_key = settings.ENCRYPTION_KEYS[0]
    new_key = Fernet.generate_key().decode()
    settings.ENCRYPTION_KEYS = [new_key, old_key]

    call_command("rotate_encryption_keys")

    out = capsys.readouterr().out
    assert "agentops_providersecret: 4 re-encrypted, 0 already on the newest key" in out
    tables = ("runs_webhooktool", "evals_evaluator", "jobs_computebackend", "jobs_jobsecret", "billing_budget")
    for table in (*tables, "evals_exportdestination"):
        assert f"{table}: 2 re-encrypted, 0 already on the newest key" in out, out
    assert "Re-encrypted 16 secret(s)" in out
    settings.ENCRYPTION_KEYS = [new_key]  # the old key is retired, as docs/operations.md says
    assert _plaintexts() == expected
    # And the code that uses them reads them.
    with organization_scope(tenant.organization):
        assert provider_credentials(organization=tenant.organization, provider="mistral")[0] == "mistral-key-acme"
        assert backend_for(ComputeBackend.objects.get(name="hub"))._token == "hf_token_acme"
        lake = ExportDestination.objects.get(name="lake")
        assert credentials_of(lake)["secret_access_key"] == "s3-secret-acme"


def test_rotation_is_idempotent(tenant, settings):
    store_every_kind_of_secret(tenant)
    settings.ENCRYPTION_KEYS = [Fernet.generate_key().decode(), settings.ENCRYPTION_KEYS[0]]
    first = {table.table: (table.rotated, table.current) for table in encryption_rotate()}
    with organization_scope(tenant.organization):
        before = list(JobSecret.objects.values_list("value_ciphertext", flat=True))
    second = {table.table: (table.rotated, table.current) for table in encryption_rotate()}

    assert first["jobs_jobsecret"] == (1, 0) and first["agentops_providersecret"] == (2, 0)
    assert all(rotated == 0 for rotated, _ in second.values())
    assert second["jobs_jobsecret"] == (0, 1) and second["agentops_providersecret"] == (0, 2)
    with organization_scope(tenant.organization):
        assert list(JobSecret.objects.values_list("value_ciphertext", flat=True)) == before


def test_a_secret_no_key_decrypts_is_reported_and_the_others_still_rotate(tenant, settings, capsys):
    store_every_kind_of_secret(tenant)
    stranger = Fernet(Fernet.generate_key()).encrypt(b"lost").decode()
    with organization_scope(tenant.organization):
        JobSecret.objects.create(organization=tenant.organization, name="LOST", value_ciphertext=stranger)
        lost = JobSecret.objects.get(name="LOST").pk
    old_key = settings.ENCRYPTION_KEYS[0]
    new_key = Fernet.generate_key().decode()
    settings.ENCRYPTION_KEYS = [new_key, old_key]

    with pytest.raises(CommandError, match="keep every old key"):
        call_command("rotate_encryption_keys")

    assert f"jobs_jobsecret: 1 re-encrypted, 0 already on the newest key, 1 unreadable (ids {lost})" in (
        capsys.readouterr().out
    )
    settings.ENCRYPTION_KEYS = [new_key]
    with organization_scope(tenant.organization):
        assert crypto.decrypt(JobSecret.objects.get(name="OPENAI_API_KEY").value_ciphertext) == "sk-job-acme"
        assert JobSecret.objects.get(name="LOST").value_ciphertext == stranger
