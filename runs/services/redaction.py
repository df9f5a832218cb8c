"""PII redaction applied to payloads before they are stored (per-project rules)."""

from __future__ import annotations

import logging
import re
from collections.abc import Callable
from functools import cache, lru_cache
from typing import Any

import regex
from django.db import connection

from agentops.scoping import organization_id_for_sql
from runs.models import IngestSettings
from runs.services.backtracking import catastrophic_backtracking

REPLACEMENT = "[REDACTED]"
BUILTIN_PATTERNS = {
    # The local part is at most 64 characters (RFC 5321): unbounded, every position of a
    # long run of letters rescanned the rest of it, and one 256 KiB string held the
    # worker (and the GIL) for a minute. Bounded, the work is linear in the text.
    IngestSettings.Redaction.EMAIL: r"[A-Za-z0-9._%+-]{1,64}@[A-Za-z0-9.-]+\.[A-Za-z]{2,}",
    IngestSettings.Redaction.API_KEY: (
        r"\b(?:sk|pk|rk|ao|ghp|gho|ghs|xoxb|xoxp|hf)[-_][A-Za-z0-9_\-]{16,}\b"
        r"|\bAKIA[0-9A-Z]{16}\b"
        r"|(?i:bearer)\s+[A-Za-z0-9._~+/\-]{16,}=*"
    ),
    # Payment cards start with 2 to 6: millisecond and nanosecond timestamps and
    # snowflake ids (which start with 1) would otherwise pass the Luhn check one time in ten.
    IngestSettings.Redaction.CARD: r"\b[2-6](?:[ -]?\d){12,18}\b",
    # A candidate only: _phone_ok() decides. Not inside a word, a number, a path or an id
    # ("-" and "/" before it: the tail of a UUID, a URL segment); a sentence's full stop
    # may follow it, a decimal part may not.
    IngestSettings.Redaction.PHONE: (
        r"(?<![\w.+/-])(?:\+\d{1,3}[\s.-]?)?(?:\(\d{1,4}\)[\s.-]?)?\d(?:[\s.-]?\d){5,13}(?!\w|\.\d)"
    ),
}
MAX_CUSTOM_PATTERN_LENGTH = 500
# Custom patterns are written by tenants and may backtrack catastrophically ("(a+)+$"):
# one with the shapes that backtrack catastrophically is refused when it is saved
# (runs.services.backtracking reads the pattern; no timing). What is left runs on the
# `regex` engine with a time budget per string: a pattern that needs longer gets the
# whole string replaced (never store what might have matched).
CUSTOM_PATTERN_TIMEOUT_SECONDS = 0.05
logger = logging.getLogger(__name__)

_NON_DIGITS = re.compile(r"\D")
_DATE = re.compile(r"(?:(?:19|20)\d\d[-.]\d{1,2}[-.]\d{1,2}|\d{1,2}[-.]\d{1,2}[-.](?:19|20)\d\d)(?!\d)")
_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")
_DECIMAL = re.compile(r"\d+\.\d+")
# A bare run of digits is an id or a timestamp unless it is shaped like a phone number:
# a national number with its trunk 0, or a North American number (with or without its 1).
_BARE_PHONE = re.compile(r"0\d{7,14}|1?[2-9]\d\d[2-9]\d{6}")


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


def _card_ok(text: str) -> bool:
    """Only digit runs that pass the Luhn check are card numbers."""
    return _luhn_ok(_NON_DIGITS.sub("", text))


def _phone_ok(text: str) -> bool:
    """Whether a candidate is a phone number rather than a date, a time stamp, an IP
    address, a decimal number or an id."""
    digits = _NON_DIGITS.sub("", text)
    if not 8 <= len(digits) <= 15:
        return False
    if text.startswith("+"):
        return True
    if _DATE.match(text) or _IPV4.fullmatch(text) or _DECIMAL.fullmatch(text):
        return False
    if digits == text:
        return _BARE_PHONE.fullmatch(text) is not None
    return True


def _replacer(check: Callable[[str], bool] | None) -> Callable[[re.Match], str]:
    def replace(match: re.Match) -> str:
        text = match.group()
        # An empty match (a custom pattern such as "x*") replaces nothing: otherwise
        # the replacement would be inserted between every two characters.
        if not text or (check is not None and not check(text)):
            return text
        return REPLACEMENT

    return replace


class Redactor:
    """Replaces every match of the project's patterns in every string of a JSON value,
    object keys included."""

    def __init__(self, builtins: list[str], custom: list[str]):
        card, phone = IngestSettings.Redaction.CARD, IngestSettings.Redaction.PHONE
        self.rules: list[tuple[re.Pattern, Callable[[re.Match], str]]] = []
        # Cards first, phones after e-mail addresses: a number must not be taken for
        # something else, nor cut an address in two.
        if card in builtins:
            self.rules.append((re.compile(BUILTIN_PATTERNS[card]), _replacer(_card_ok)))
        plain = [BUILTIN_PATTERNS[name] for name in builtins if name not in (card, phone)]
        if plain:
            self.rules.append((re.compile("|".join(f"(?:{p})" for p in plain)), _replacer(None)))
        if phone in builtins:
            self.rules.append((re.compile(BUILTIN_PATTERNS[phone]), _replacer(_phone_ok)))
        # Each custom pattern on its own: inside one alternation an inline flag such as
        # "(?i)" is an error (no ingest at all), and group numbers (\1) would shift.
        self.custom = [regex.compile(pattern, regex.V0) for pattern in custom]
        # Read for every value ingest writes (five a step): a flag, not a property.
        self.active = bool(self.rules or self.custom)

    def _text(self, text: str) -> str:
        for pattern, replace in self.rules:
            text = pattern.sub(replace, text)
        for pattern in self.custom:
            try:
                text = pattern.sub(_custom_replacement, text, timeout=CUSTOM_PATTERN_TIMEOUT_SECONDS)
            except TimeoutError:
                logger.warning(
                    "custom redaction pattern %r ran out of time; the whole value was redacted", pattern.pattern
                )
                return REPLACEMENT
        return text

    def _key(self, key: Any, taken: dict) -> Any:
        if not isinstance(key, str):
            return key
        redacted = self._text(key)
        # Two keys redacted alike must not overwrite each other's values.
        if redacted != key and redacted in taken:
            redacted = f"{redacted} #{len(taken) + 1}"
        return redacted

    def apply(self, value: Any) -> Any:
        if not self.active or value is None:
            return value
        if isinstance(value, str):
            return self._text(value)
        if isinstance(value, dict):
            out: dict = {}
            for key, item in value.items():
                out[self._key(key, out)] = self.apply(item)
            return out
        if isinstance(value, list | tuple):
            return [self.apply(item) for item in value]
        return value


NO_REDACTION = Redactor([], [])


def redactor_for(project) -> Redactor:
    """The redactor of ``project``'s settings as they are now (none when it has no rules).

    Read for every run the executor starts and every batch an API receives, so by one
    hand-written statement (the ORM's query cost a millisecond of Python, PostgreSQL's
    work a few microseconds), filtered by the organization in scope as the manager's;
    the rules are read every time (a rule saved applies to the next batch), their
    compiled patterns kept per set of rules."""
    with connection.cursor() as cursor:
        cursor.execute(_rules_sql(), {"project": project.pk, "scope": organization_id_for_sql()})
        row = cursor.fetchone()
    if row is None:
        return NO_REDACTION
    return _redactor(tuple(row[0]), tuple(row[1]))


@cache
def _rules_sql() -> str:
    quote = connection.ops.quote_name
    return (
        f"SELECT redact, custom_patterns FROM {quote(IngestSettings._meta.db_table)} "  # noqa: S608 - quoted name
        "WHERE project_id = %(project)s AND (%(scope)s::bigint IS NULL OR organization_id = %(scope)s)"
    )


@lru_cache(maxsize=256)
def _redactor(builtins: tuple[str, ...], custom: tuple[str, ...]) -> Redactor:
    """One redactor per set of rules (it holds no state but its compiled patterns)."""
    if not (builtins or custom):
        return NO_REDACTION
    return Redactor(list(builtins), list(custom))


def _custom_replacement(match) -> str:
    # Empty matches replace nothing (a pattern like "x*" must not salt every string).
    return REPLACEMENT if match.group() else match.group()


def validate_custom_pattern(pattern: str) -> str:
    """The pattern if it compiles, is not too long and has none of the shapes that
    backtrack catastrophically, else ValueError with the reason."""
    if not pattern or len(pattern) > MAX_CUSTOM_PATTERN_LENGTH:
        raise ValueError(f"a pattern must be 1 to {MAX_CUSTOM_PATTERN_LENGTH} characters")
    # Read before it is compiled: compiling nested repetition alone can take seconds.
    reason = catastrophic_backtracking(pattern)
    if reason:
        raise ValueError(
            f"the pattern {pattern!r} can take too long on some text (catastrophic backtracking: {reason}); "
            "rewrite it without nested repetition such as (a+)+ or alternatives that start alike such as (a|ab)+"
        )
    try:
        regex.compile(pattern, regex.V0)
    except regex.error as exc:
        raise ValueError(f"invalid regular expression {pattern!r}: {exc}") from None
    return pattern
