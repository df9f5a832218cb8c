"""Secrets out of text shown to people: a backend's error, a log line, a Hub's refusal."""

from __future__ import annotations

from collections.abc import Iterable


def redact_secrets(text: str, secrets: Iterable[str], mask: str = "[redacted]") -> str:
    """``text`` with every secret of four characters or more replaced by ``mask``, the
    longest first (so a secret inside another leaves no part of the longer one)."""
    for secret in sorted({value for value in secrets if value and len(value) >= 4}, key=len, reverse=True):
        text = text.replace(secret, mask)
    return text
