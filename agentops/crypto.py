"""Encryption at rest for provider secrets (MultiFernet over ``ENCRYPTION_KEYS``).

The first key encrypts; every key decrypts, so a new key is added in front, the
``rotate_encryption_keys`` command re-encrypts every ciphertext with it, and the old
key can then be removed.
"""

from __future__ import annotations

from cryptography.fernet import Fernet, InvalidToken, MultiFernet
from django.conf import settings
from django.core.exceptions import ImproperlyConfigured


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


def rotate(ciphertext: str) -> str:
    """Re-encrypt ``ciphertext`` with the newest key."""
    try:
        return _fernet().rotate(ciphertext.encode()).decode()
    except InvalidToken as exc:
        raise DecryptionError("no configured encryption key decrypts this secret") from exc


def generate_key() -> str:
    return Fernet.generate_key().decode()
