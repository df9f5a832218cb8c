"""Encryption at rest for every stored secret (MultiFernet over ``ENCRYPTION_KEYS``).

The first key encrypts; every key decrypts, so a new key is added in front, the
``rotate_encryption_keys`` command re-encrypts every ciphertext with it, and the old
key can then be removed.

Every column that holds a ciphertext is an ``EncryptedTextField``: that is the one
registry of encrypted data (``encrypted_fields()``), which key rotation walks. A column
encrypted with ``encrypt()`` but declared as a plain ``TextField`` would be skipped by
rotation and lost with the old key; tests/agentops/test_crypto.py fails when one exists.
"""

from __future__ import annotations

import json

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured
from django.db import models


class DecryptionError(RuntimeError):
    """A ciphertext could not be decrypted with any configured key."""


def _fernet() -> MultiFernet:
    try:
        return MultiFernet([Fernet(key.encode()) for key in settings.ENCRYPTION_KEYS])
    except (ValueError, TypeError) as exc:
        raise ImproperlyConfigured(
            "ENCRYPTION_KEYS must be comma-separated Fernet keys (python manage.py generate_encryption_key makes one)"
        ) from exc


def encrypt(plaintext: str) -> str:
    """Encrypt ``plaintext`` with the newest key."""
    return _fernet().encrypt(plaintext.encode()).decode()


def decrypt(ciphertext: str) -> str:
    """Decrypt ``ciphertext`` with whichever configured key made it."""
    try:
        return _fernet().decrypt(ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise DecryptionError("no configured encryption key decrypts this secret") from exc


def encrypt_json(value: dict) -> str:
    """A dict of credentials, encrypted as JSON; "" for none (nothing stored)."""
    return encrypt(json.dumps(value)) if value else ""


def decrypt_json(ciphertext: str) -> dict:
    """The dict ``encrypt_json`` stored; {} for "" (none stored)."""
    return json.loads(decrypt(ciphertext)) if ciphertext else {}


def is_current(ciphertext: str) -> bool:
    """Whether the newest key (the first) decrypts ``ciphertext``: rotation leaves it as is."""
    try:
        Fernet(settings.ENCRYPTION_KEYS[0].encode()).decrypt(ciphertext.encode())
    except InvalidToken:
        return False
    return True


def rotate(ciphertext: str) -> str:
    """Re-encrypt ``ciphertext`` with the newest key."""
    try:
        return _fernet().rotate(ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise DecryptionError("no configured encryption key decrypts this secret") from exc


def generate_key() -> str:
    return Fernet.generate_key().decode()


class EncryptedTextField(models.TextField):
    """A text column holding a ciphertext made by ``encrypt()``.

    Code still encrypts and decrypts explicitly (a secret is decrypted only by the code
    that sends it); the type marks the column so that key rotation finds it. It is stored
    as plain text, so migrations see a ``TextField``: marking a column changes no schema
    and adds no migration.
    """

    def deconstruct(self):
        name, _path, args, kwargs = super().deconstruct()
        return name, "django.db.models.TextField", args, kwargs


def encrypted_fields() -> list[tuple[type[models.Model], tuple[str, ...]]]:
    """Every model with encrypted columns, and those columns' names: the registry key
    rotation walks. Read from the installed models, so a new ``EncryptedTextField`` is in
    it without being listed anywhere else (and the core app imports no higher app)."""
    from django.apps import apps

    registry = []
    for model in apps.get_models():
        names = tuple(field.name for field in model._meta.concrete_fields if isinstance(field, EncryptedTextField))
        if names:
            registry.append((model, names))
    return sorted(registry, key=lambda entry: entry[0]._meta.db_table)
