"""The registry of encrypted columns (agentops/crypto.py): every column that holds a
ciphertext is in it, so key rotation re-encrypts it."""

from django.apps import apps
from django.db import models

from agentops import crypto
from tests.agentops.test_key_rotation import store_every_kind_of_secret

# Every Fernet token starts with its version byte 0x80 and a timestamp: "gAAAAA" in base64.
FERNET_PREFIX = "gAAAAA"


def _registered() -> set[tuple[str, str]]:
    return {(model._meta.label, name) for model, names in crypto.encrypted_fields() for name in names}


def test_every_column_that_holds_a_ciphertext_is_registered(tenant):
    """Save every kind of secret, then look in every text column of every model for a
    ciphertext: each one found must be in the registry key rotation walks."""
    store_every_kind_of_secret(tenant)
    holding = set()
    for model in apps.get_models():
        for field in model._meta.concrete_fields:
            if isinstance(field, models.CharField | models.TextField):
                if model._base_manager.filter(**{f"{field.name}__startswith": FERNET_PREFIX}).exists():
                    holding.add((model._meta.label, field.name))
    assert holding, "no ciphertext found: the search itself is broken"
    assert holding <= _registered(), (
        f"encrypted but not registered (use crypto.EncryptedTextField): {holding - _registered()}"
    )


def test_every_column_named_as_encrypted_is_an_encrypted_field():
    named = {
        (model._meta.label, field.name)
        for model in apps.get_models()
        for field in model._meta.concrete_fields
        if "ciphertext" in field.name or "encrypted" in field.name
    }
    assert named == _registered()


def test_marking_a_column_encrypted_changes_no_migration():
    """EncryptedTextField is stored as text: migrations see a TextField."""
    field = crypto.EncryptedTextField(blank=True)
    field.set_attributes_from_name("secret_ciphertext")
    _, path, _, kwargs = field.deconstruct()
    assert path == "django.db.models.TextField" and kwargs == {"blank": True}
