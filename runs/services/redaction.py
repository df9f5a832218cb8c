"""PII redaction applied to payloads before they are stored (per-project rules)."""

from __future__ import annotations

import re
from typing import Any

from runs.models import IngestSettings

REPLACEMENT = "[REDACTED]"
BUILTIN_PATTERNS = {
    IngestSettings.Redaction.EMAIL: r"[A-Za-z0-9._%+-]+@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",
    IngestSettings.Redaction.API_KEY: (
        r"\b(?:sk|pk|rk|ao|ghp|gho|ghs|xoxb|xoxp|hf)[-_][A-Za-z0-9_\-]{16,}\b"
        r"|\bAKIA[0-9A-Z]{16}\b"
        r"|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{16,}=*"
    ),
    IngestSettings.Redaction.CARD: r"\b\d(?:[ -]?\d){12,18}\b",
    IngestSettings.Redaction.PHONE: r"(?<![\w.])\+?\d(?:[\s().-]?\d){7,14}(?![\w.])",
}
MAX_CUSTOM_PATTERN_LENGTH = 500


def _luhn_ok(digits: str) -> bool:
    total, parity = 0, len(digits) % 2
    for index, char in enumerate(digits):
        number = int(char)
        if index % 2 == parity:
            number *= 2
            if number > 9:
                number -= 9
        total += number
    return total % 10 == 0


class Redactor:
    """Replaces every match of the project's patterns in every string of a JSON value."""

    def __init__(self, builtins: list[str], custom: list[str]):
        self.card = IngestSettings.Redaction.CARD in builtins
        plain = [BUILTIN_PATTERNS[name] for name in builtins if name != IngestSettings.Redaction.CARD]
        plain += custom
        self.pattern = re.compile("|".join(f"(?:{p})" for p in plain)) if plain else None
        self.card_pattern = re.compile(BUILTIN_PATTERNS[IngestSettings.Redaction.CARD]) if self.card else None

    @property
    def active(self) -> bool:
        return self.pattern is not None or self.card_pattern is not None

    def _text(self, text: str) -> str:
        if self.card_pattern is not None:
            # Only digit runs that pass the Luhn check are card numbers.
            text = self.card_pattern.sub(
                lambda m: REPLACEMENT if _luhn_ok(re.sub(r"\D", "", m.group())) else m.group(), text
            )
        if self.pattern is not None:
            text = self.pattern.sub(REPLACEMENT, text)
        return text

    def apply(self, value: Any) -> Any:
        if not self.active or value is None:
            return value
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, dict):
            return {key: self.apply(item) for key, item in value.items()}
        if isinstance(value, list | tuple):
            return [self.apply(item) for item in value]
        return value


NO_REDACTION = Redactor([], [])


def redactor_for(project) -> Redactor:
    """The redactor of ``project``'s settings (none when it has no rules)."""
    settings = IngestSettings.objects.filter(project=project).first()
    if settings is None or not (settings.redact or settings.custom_patterns):
        return NO_REDACTION
    return Redactor(list(settings.redact), list(settings.custom_patterns))


def validate_custom_pattern(pattern: str) -> str:
    """The pattern if it compiles and is not too long, else ValueError with the reason."""
    if not pattern or len(pattern) > MAX_CUSTOM_PATTERN_LENGTH:
        raise ValueError(f"a pattern must be 1 to {MAX_CUSTOM_PATTERN_LENGTH} characters")
    try:
        re.compile(pattern)
    except re.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern
