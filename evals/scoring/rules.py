"""Rules: evaluator kinds that check the final output, its cost or its latency with no
model and no outside call (exact_match, contains, regex, json_valid, json_schema,
json_field, numeric, cost_limit, latency_limit).

A rule scores 1 or 0: an output that fails it scores 0 with the reason in words. A
comparison with nothing to compare against (no expected output and no setting that
gives one), or a run whose cost or latency is unknown, gives no score and says why.
Patterns run on the `regex` engine with a time budget (``REGEX_TIMEOUT_SECONDS``).
"""

from __future__ import annotations

import json
from typing import Any

import jsonschema
import regex

from agentops.errors import InvalidRequest
from evals.scoring.config import ConfigReader, check_pattern
from evals.scoring.registry import EvaluatorKind, register
from evals.scoring.subject import Outcome, Subject
from evals.scoring.values import (
    MISSING,
    REGEX_TIMEOUT_SECONDS,
    as_text,
    decimal_or_none,
    expected_at,
    loads,
    number_in,
    parse_path,
    regex_flags,
    resolve_path,
    same,
    short,
)


def _no_expected(setting: str) -> Outcome:
    return Outcome(
        value=None,
        error=f'nothing to compare with: the item has no expected output and the configuration no "{setting}"',
    )


def _score(ok: bool, reasoning: str, **details) -> Outcome:
    return Outcome(value=1.0 if ok else 0.0, reasoning=reasoning, details=details)


def _json_output(output: Any) -> tuple[bool, Any]:
    if isinstance(output, str):
        return loads(output)
    return output is not None, output


@register
class ExactMatch(EvaluatorKind):
    name = "exact_match"
    reads_trajectory = False
    settings = ("field", "case_sensitive", "strip", "expected")
    help = "The output (or one field of it) equals the item's expected output."
    example = {"field": "answer", "case_sensitive": False, "strip": True}

    def clean(self, c: ConfigReader) -> None:
        c.path("field")
        c.boolean("case_sensitive", True)
        c.boolean("strip", True)
        c.keep("expected")

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        parts = parse_path(config.get("field", ""))
        expected = config["expected"] if "expected" in config else expected_at(subject.expected, parts)
        if expected is None:
            return _no_expected("expected")
        actual = resolve_path(subject.output, parts)
        if actual is MISSING:
            return _score(False, f"the output has no field {config['field']}")
        ok = same(actual, expected, case_sensitive=config.get("case_sensitive", True), strip=config.get("strip", True))
        if ok:
            return _score(True, "matches the expected output")
        return _score(False, f"got {short(actual)}, expected {short(expected)}")


@register
class Contains(EvaluatorKind):
    name = "contains"
    reads_trajectory = False
    settings = ("value", "case_sensitive")
    help = "The output contains every given text (by default the expected output)."
    example = {"value": ["refund", "order number"], "case_sensitive": False}

    def clean(self, c: ConfigReader) -> None:
        value = c.raw.get("value")
        if value is not None:
            values = [value] if isinstance(value, str) else value
            if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
                raise InvalidRequest("value must be a text or a list of texts that must all appear")
            c.cleaned["value"] = value
        c.boolean("case_sensitive", True)

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        wanted = config["value"] if "value" in config else subject.expected
        if wanted is None:
            return _no_expected("value")
        values = wanted if isinstance(wanted, list) else [wanted]
        if not all(isinstance(value, str | int | float) and not isinstance(value, bool) for value in values):
            return Outcome(
                value=None, error='contains needs texts: set "value" or give the items a text expected output'
            )
        text = as_text(subject.output)
        case_sensitive = config.get("case_sensitive", True)
        haystack = text if case_sensitive else text.casefold()
        missing = [
            str(value) for value in values if (str(value) if case_sensitive else str(value).casefold()) not in haystack
        ]
        if missing:
            return _score(False, "missing: " + ", ".join(short(value, 80) for value in missing), missing=missing)
        return _score(True, f"contains all {len(values)} expected text{'s' if len(values) != 1 else ''}")


@register
class Regex(EvaluatorKind):
    name = "regex"
    reads_trajectory = False
    settings = ("pattern", "flags")
    help = "The output matches a regular expression."
    example = {"pattern": r"^ORD-\d{6}$", "flags": "m"}

    def clean(self, c: ConfigReader) -> None:
        flags = c.text("flags", default="", max_length=10) or ""
        if any(flag not in "imsx" for flag in flags):
            raise InvalidRequest('flags are letters among "imsx" (ignore case, multi-line, dot matches all, verbose)')
        flags = "".join(sorted(set(flags)))
        c.cleaned["flags"] = flags
        pattern = c.text("pattern", required=True, max_length=500)
        check_pattern(pattern, flags)

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        pattern = regex.compile(regex_flags(config.get("flags", "")) + config["pattern"], regex.V0)
        try:
            match = pattern.search(as_text(subject.output), timeout=REGEX_TIMEOUT_SECONDS)
        except TimeoutError:
            return Outcome(value=None, error="the pattern took too long on this output")
        if match is None:
            return _score(False, f"no match for {config['pattern']!r}")
        return _score(True, f"matched {short(match.group(0), 80)}", match=match.group(0)[:500])


@register
class JsonValid(EvaluatorKind):
    name = "json_valid"
    reads_trajectory = False
    settings = ()
    help = "The output is valid JSON."
    example = {}

    def clean(self, c: ConfigReader) -> None:
        pass

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        output = subject.output
        if output is None:
            return _score(False, "there is no output")
        if isinstance(output, str):
            try:
                json.loads(output)
            except ValueError as exc:
                return _score(False, f"not valid JSON: {exc}")
            return _score(True, "the output text is valid JSON")
        return _score(True, "the output is JSON")


@register
class JsonSchema(EvaluatorKind):
    name = "json_schema"
    reads_trajectory = False
    settings = ("schema",)
    help = "The output is JSON that follows a JSON schema."
    example = {"schema": {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}}}

    def clean(self, c: ConfigReader) -> None:
        schema = c.raw.get("schema")
        if not isinstance(schema, dict):
            raise InvalidRequest('json_schema evaluators need "schema": a JSON schema object')
        try:
            jsonschema.validators.validator_for(schema).check_schema(schema)
        except jsonschema.SchemaError as exc:
            where = "/".join(str(part) for part in exc.path)
            raise InvalidRequest(f"the schema is not valid{f' at {where}' if where else ''}: {exc.message}") from None
        c.cleaned["schema"] = schema

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        ok, document = _json_output(subject.output)
        if not ok:
            return _score(False, "the output is not JSON")
        validator = jsonschema.validators.validator_for(config["schema"])(config["schema"])
        errors = sorted(validator.iter_errors(document), key=lambda error: list(error.absolute_path))
        if not errors:
            return _score(True, "the output matches the schema")
        messages = [
            f"{'/'.join(str(part) for part in error.absolute_path) or '(root)'}: {error.message[:200]}"
            for error in errors[:5]
        ]
        more = f" (and {len(errors) - 5} more)" if len(errors) > 5 else ""
        return _score(False, "; ".join(messages) + more, errors=messages, error_count=len(errors))


@register
class JsonField(EvaluatorKind):
    name = "json_field"
    reads_trajectory = False
    settings = ("path", "value")
    help = "One field of the JSON output equals a value (by default the same field of the expected output)."
    example = {"path": "order.status", "value": "refunded"}

    def clean(self, c: ConfigReader) -> None:
        c.path("path", required=True)
        c.keep("value")

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        parts = parse_path(config["path"])
        if "value" in config:
            expected = config["value"]
        else:
            expected = resolve_path(subject.expected, parts)
            if expected is MISSING:
                return Outcome(
                    value=None,
                    error=f'the expected output has no field {config["path"]} and the configuration no "value"',
                )
        actual = resolve_path(subject.output, parts)
        if actual is MISSING:
            return _score(False, f"the output has no field {config['path']}")
        if same(actual, expected):
            return _score(True, f"{config['path']} is {short(expected)}")
        return _score(False, f"{config['path']} is {short(actual)}, expected {short(expected)}")


@register
class Numeric(EvaluatorKind):
    name = "numeric"
    reads_trajectory = False
    settings = ("tolerance", "relative", "field", "expected")
    help = "The output (or a field) is a number within a tolerance of the expected one."
    example = {"tolerance": 0.01, "relative": True, "field": "total"}

    def clean(self, c: ConfigReader) -> None:
        c.number("tolerance", default=0, low=0)
        c.boolean("relative", False)
        c.path("field")
        if c.given("expected"):
            if number_in(c.raw["expected"]) is None:
                raise InvalidRequest("expected must be a number")
            c.keep("expected")

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        parts = parse_path(config.get("field", ""))
        raw_expected = config["expected"] if "expected" in config else expected_at(subject.expected, parts)
        if raw_expected is None:
            return _no_expected("expected")
        expected = number_in(raw_expected)
        if expected is None:
            return Outcome(value=None, error=f"the expected output {short(raw_expected)} is not a number")
        raw = resolve_path(subject.output, parts)
        if raw is MISSING:
            return _score(False, f"the output has no field {config['field']}")
        actual = number_in(raw)
        if actual is None:
            return _score(False, f"{short(raw)} is not a number")
        tolerance = float(config.get("tolerance", 0))
        allowed = tolerance * abs(expected) if config.get("relative") else tolerance
        difference = abs(actual - expected)
        details = {"actual": actual, "expected": expected, "difference": difference, "allowed": allowed}
        if difference <= allowed:
            return _score(True, f"{actual:g} is within {allowed:g} of {expected:g}", **details)
        return _score(False, f"{actual:g} is {difference:g} away from {expected:g} (allowed: {allowed:g})", **details)


@register
class CostLimit(EvaluatorKind):
    name = "cost_limit"
    reads_trajectory = False
    settings = ("max_cost",)
    help = "The run cost at most a number of dollars."
    example = {"max_cost": 0.05}

    def clean(self, c: ConfigReader) -> None:
        value = c.raw.get("max_cost")
        amount = decimal_or_none(value) if isinstance(value, int | float | str) else None
        if amount is None or amount < 0:
            raise InvalidRequest("cost_limit evaluators need max_cost: a number of dollars, 0 or more")
        c.cleaned["max_cost"] = value

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        if subject.cost is None:
            return Outcome(value=None, error="the run's cost is not known")
        limit = decimal_or_none(config["max_cost"])
        details = {"cost": str(subject.cost), "max_cost": str(limit)}
        if subject.cost <= limit:
            return _score(True, f"cost ${subject.cost.normalize():f} is within ${limit.normalize():f}", **details)
        return _score(False, f"cost ${subject.cost.normalize():f} is over ${limit.normalize():f}", **details)


@register
class LatencyLimit(EvaluatorKind):
    name = "latency_limit"
    reads_trajectory = False
    settings = ("max_ms",)
    help = "The run took at most a number of milliseconds."
    example = {"max_ms": 10000}

    def clean(self, c: ConfigReader) -> None:
        c.number("max_ms", required=True, low=0, whole=True)

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        if subject.latency_ms is None:
            return Outcome(value=None, error="the run's latency is not known")
        limit = config["max_ms"]
        details = {"latency_ms": subject.latency_ms, "max_ms": limit}
        if subject.latency_ms <= limit:
            return _score(True, f"{subject.latency_ms} ms is within {limit} ms", **details)
        return _score(False, f"{subject.latency_ms} ms is over {limit} ms", **details)
