"""Reading an evaluator's configuration: ``ConfigReader`` refuses unknown settings and
wrong types with a message that names the setting, and keeps what it read, defaults
filled in, as the cleaned configuration that is stored. Every kind's ``clean`` reads
its settings through one (see ``evals.scoring.registry``).
"""

from __future__ import annotations

from typing import Any

from agentops.errors import InvalidRequest
from agentops.jsonsafe import finite_number
from evals.scoring.values import parse_path, regex_flags


class ConfigReader:
    """Reads one evaluator's configuration, refusing unknown settings and wrong types
    with a message that names the setting."""

    def __init__(self, kind: str, config: Any, allowed: tuple[str, ...]):
        if config is None:
            config = {}
        if not isinstance(config, dict):
            raise InvalidRequest(f"the configuration of {kind} evaluators is a JSON object")
        unknown = [key for key in config if key not in allowed]
        if unknown:
            known = ", ".join(allowed) if allowed else "no settings"
            raise InvalidRequest(f"unknown setting {unknown[0]!r} for {kind} evaluators; they take {known}")
        self.kind = kind
        self.raw = config
        self.cleaned: dict[str, Any] = {}

    def given(self, key: str) -> bool:
        return key in self.raw

    def boolean(self, key: str, default: bool) -> bool:
        value = self.raw.get(key, default)
        if not isinstance(value, bool):
            raise InvalidRequest(f"{key} must be true or false")
        self.cleaned[key] = value
        return value

    def text(self, key: str, *, required: bool = False, default: str | None = None, max_length: int = 10_000):
        value = self.raw.get(key, default)
        if value is None:
            if required:
                raise InvalidRequest(f"{self.kind} evaluators need {key}")
            return None
        if not isinstance(value, str):
            raise InvalidRequest(f"{key} must be text")
        if required and not value.strip():
            raise InvalidRequest(f"{self.kind} evaluators need {key}")
        if len(value) > max_length:
            raise InvalidRequest(f"{key} is longer than {max_length} characters")
        self.cleaned[key] = value
        return value

    def number(self, key: str, *, required=False, default=None, low=None, high=None, whole=False):
        value = self.raw.get(key, default)
        if value is None:
            if required:
                raise InvalidRequest(f"{self.kind} evaluators need {key}")
            return None
        kinds = int if whole else int | float
        if isinstance(value, bool) or not isinstance(value, kinds) or not finite_number(value):
            raise InvalidRequest(f"{key} must be a {'whole ' if whole else ''}number")
        if low is not None and value < low:
            raise InvalidRequest(f"{key} must be at least {low}")
        if high is not None and value > high:
            raise InvalidRequest(f"{key} must be at most {high}")
        self.cleaned[key] = value
        return value

    def path(self, key: str, *, required: bool = False) -> str | None:
        value = self.text(key, required=required, max_length=500)
        if value is None:
            return None
        try:
            parts = parse_path(value)
        except ValueError as exc:
            raise InvalidRequest(f"{key}: {exc}") from None
        if required and not parts:
            raise InvalidRequest(f"{self.kind} evaluators need {key}")
        self.cleaned[key] = value.strip()
        return value

    def names(self, key: str) -> list[str] | None:
        value = self.raw.get(key)
        if value is None:
            return None
        if not isinstance(value, list) or not value or not all(isinstance(v, str) and v.strip() for v in value):
            raise InvalidRequest(f"{key} must be a list of tool names")
        self.cleaned[key] = [name.strip() for name in value]
        return self.cleaned[key]

    def keep(self, key: str) -> None:
        if key in self.raw:
            self.cleaned[key] = self.raw[key]


def check_pattern(text: str, flags: str = "") -> str:
    """A pattern people wrote, refused if it is not a valid regular expression or can
    backtrack catastrophically."""
    from runs.services.redaction import validate_custom_pattern

    try:
        validate_custom_pattern(regex_flags(flags) + text)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    return text
