"""Scoring one run (or one reported output) with one evaluator: the ``Subject`` an
evaluator looks at, the ``Outcome`` it gives, and every kind of evaluator.

An evaluator is applied through its *spec*, ``{"id", "name", "kind", "config",
"threshold"}`` (``spec_of``): experiments store the specs they started with, so a
later edit of an evaluator does not change how an experiment scores.

``evaluate`` never raises for a bad output: an output that fails a rule scores 0, and
an evaluator that cannot score at all (no expected output to compare with, a judge
that answered nonsense, a webhook that timed out) gives ``Outcome(value=None,
error=...)``. Configurations are checked when an evaluator is saved
(``validate_config``); docs/evaluations.md describes every kind.
"""

from __future__ import annotations

import json
import logging
import math
import re
import secrets as secret_tokens
import time
from collections import Counter
from dataclasses import asdict, dataclass, field
from decimal import Decimal, InvalidOperation
from typing import Any

import jsonschema
import regex
import requests

from agentops.errors import InvalidRequest
from agentops.jsonsafe import finite_number, storable_lossy, storage_problem
from agentops.netguard import UnsafeUrlError, check_outbound_url

logger = logging.getLogger(__name__)

# Patterns are written by people and may backtrack catastrophically ("(a+)+$"): they run
# on the `regex` engine with a time budget per text (probed when saved, see redaction).
REGEX_TIMEOUT_SECONDS = 0.1
JUDGE_DEFAULT_MODEL = "mistral-small-latest"
JUDGE_TIMEOUT_MS = 120_000
JUDGE_FIELD_CHARS = 20_000  # input, expected and final output, each, in the judge's prompt
WEBHOOK_RESPONSE_MAX_BYTES = 200_000
HUMAN_SCALES = ("0-1", "pass-fail", "1-5")
NOT_RUN_BY_MACHINES = "scored by people"


# --- What an evaluator looks at ------------------------------------------------------------------


@dataclass
class StepView:
    """One step of the trajectory, in run order (started_at, id)."""

    kind: str
    name: str
    status: str
    model: str
    input: Any
    output: Any
    error: str
    latency_ms: int | None


@dataclass
class ToolCallView:
    name: str
    arguments: Any
    result: Any
    error: str


def _item_fields(item) -> tuple[Any, Any, dict]:
    """(input, expected, metadata) of a dataset item, a dict with those keys, or None."""
    if item is None:
        return None, None, {}
    if isinstance(item, dict):
        metadata = item.get("metadata")
        return item.get("input"), item.get("expected"), metadata if isinstance(metadata, dict) else {}
    metadata = getattr(item, "metadata", None)
    return item.input, item.expected, metadata if isinstance(metadata, dict) else {}


def _step_view(step: StepView | dict) -> StepView:
    if isinstance(step, StepView):
        return step
    latency = step.get("latency_ms")
    return StepView(
        kind=str(step.get("kind") or "custom"),
        name=str(step.get("name") or ""),
        status=str(step.get("status") or ""),
        model=str(step.get("model") or ""),
        input=step.get("input"),
        output=step.get("output"),
        error=str(step.get("error") or ""),
        latency_ms=int(latency) if isinstance(latency, int | float) and not isinstance(latency, bool) else None,
    )


def _tool_call_view(call: ToolCallView | dict) -> ToolCallView:
    if isinstance(call, ToolCallView):
        return call
    return ToolCallView(
        name=str(call.get("name") or call.get("tool_name") or ""),
        arguments=call.get("arguments"),
        result=call.get("result"),
        error=str(call.get("error") or ""),
    )


def _calls_from_steps(steps: list[StepView]) -> list[ToolCallView]:
    """Tool calls read from tool steps, for trajectories that only have steps."""
    return [
        ToolCallView(name=step.name, arguments=step.input, result=step.output, error=step.error)
        for step in steps
        if step.kind == "tool"
    ]


@dataclass
class Subject:
    """What an evaluator looks at: the item (input, expected, metadata), the final output,
    the run's cost, latency and tokens, and its trajectory."""

    input: Any
    expected: Any
    metadata: dict
    output: Any
    cost: Decimal | None
    latency_ms: int | None
    tokens: int
    steps: list[StepView] = field(default_factory=list)
    tool_calls: list[ToolCallView] = field(default_factory=list)
    run_id: int | None = None
    run_status: str = ""

    @classmethod
    def from_run(cls, run, *, item=None) -> Subject:
        """The run's output and trajectory (two queries: steps, tool calls); the item,
        when given, supplies input, expected and metadata (else the run's input and
        metadata, and no expected output). Needs the run's organization in scope."""
        from runs.models import Step, ToolCall

        rows = (
            Step.objects.filter(run=run)
            .order_by("started_at", "id")
            .only("kind", "name", "status", "model", "input", "output", "error", "duration_ms", "started_at")
        )
        steps = [
            StepView(
                kind=row.kind,
                name=row.name,
                status=row.status,
                model=row.model,
                input=row.input,
                output=row.output,
                error=row.error,
                latency_ms=round(row.duration_ms) if row.duration_ms is not None else None,
            )
            for row in rows
        ]
        calls = [
            ToolCallView(name=row.tool_name, arguments=row.arguments, result=row.result, error=row.error)
            for row in ToolCall.objects.filter(run=run)
            .order_by("started_at", "id")
            .only("tool_name", "arguments", "result", "error", "started_at")
        ]
        if item is not None:
            item_input, expected, metadata = _item_fields(item)
        else:
            item_input, expected = run.input, None
            metadata = run.metadata if isinstance(run.metadata, dict) else {}
        return cls(
            input=item_input,
            expected=expected,
            metadata=dict(metadata),
            output=run.output,
            cost=run.total_cost,
            latency_ms=run.latency_ms,
            tokens=(run.input_tokens or 0) + (run.output_tokens or 0),
            steps=steps,
            tool_calls=calls or _calls_from_steps(steps),
            run_id=run.pk,
            run_status=run.status,
        )

    @classmethod
    def reported(
        cls,
        *,
        item,
        output,
        cost=None,
        latency_ms: int | None = None,
        tokens: int = 0,
        steps: list | None = None,
        tool_calls: list | None = None,
    ) -> Subject:
        """An output reported from outside (no run). ``item`` is a dataset item, a dict
        ``{input, expected, metadata}`` or None; steps and tool calls may be views or
        plain dicts, and with steps but no tool calls, the tool steps are the calls."""
        item_input, expected, metadata = _item_fields(item)
        step_views = [_step_view(step) for step in steps or [] if isinstance(step, StepView | dict)]
        if tool_calls is None:
            call_views = _calls_from_steps(step_views)
        else:
            call_views = [_tool_call_view(call) for call in tool_calls if isinstance(call, ToolCallView | dict)]
        return cls(
            input=item_input,
            expected=expected,
            metadata=dict(metadata),
            output=output,
            cost=_decimal(cost),
            latency_ms=latency_ms,
            tokens=tokens or 0,
            steps=step_views,
            tool_calls=call_views,
        )


@dataclass
class Outcome:
    value: float | None  # 0..1; None when the evaluator could not score (error says why)
    reasoning: str = ""
    details: dict = field(default_factory=dict)
    error: str = ""


def spec_of(evaluator) -> dict:
    """What an experiment stores of an evaluator, so later edits do not change it."""
    return {
        "id": evaluator.pk,
        "name": evaluator.name,
        "kind": evaluator.kind,
        "config": dict(evaluator.config or {}),
        "threshold": evaluator.pass_threshold,
    }


def passed(spec: dict, value: float | None) -> bool | None:
    """Whether a score passes the evaluator's threshold (None when there is no score)."""
    if value is None:
        return None
    return value >= float(spec.get("threshold", 0.5))


def evaluate(spec: dict, subject: Subject, *, organization) -> Outcome:
    """Score ``subject`` with the evaluator ``spec``. Never raises for bad output."""
    kind = spec.get("kind")
    scorer = SCORERS.get(kind)
    if scorer is None:
        return Outcome(value=None, error=f"unknown evaluator kind {kind!r}")
    config = spec.get("config") or {}
    try:
        outcome = scorer(spec, config, subject, organization)
    except InvalidRequest as exc:  # e.g. no Mistral key for the judge
        return Outcome(value=None, error=exc.message)
    except Exception as exc:  # noqa: BLE001 - one evaluator's failure must not stop an experiment
        logger.exception("evaluator %s (%s) failed", spec.get("name"), kind)
        return Outcome(value=None, error=f"the evaluator failed: {type(exc).__name__}: {str(exc)[:300]}")
    # A judge's or a webhook's answer is stored as given: nothing in it may be unstorable.
    return Outcome(
        value=outcome.value,
        reasoning=storable_lossy(outcome.reasoning or ""),
        details=storable_lossy(outcome.details or {}),
        error=storable_lossy(outcome.error or ""),
    )


# --- Small helpers: JSON paths, values as text, comparisons ----------------------------------------

_PATH = re.compile(r"(?:[^.\[\]]+|\[\s*-?\d+\s*\])(?:\.[^.\[\]]+|\[\s*-?\d+\s*\])*")
_PATH_PART = re.compile(r"([^.\[\]]+)|\[\s*(-?\d+)\s*\]")
_MISSING = object()


def parse_path(path: str) -> list[str | int]:
    """``"a.b[0].c"`` -> ``["a", "b", 0, "c"]``; ``""`` -> ``[]`` (the whole value).
    Raises ValueError for a malformed path."""
    path = (path or "").strip()
    if not path:
        return []
    if not _PATH.fullmatch(path):
        raise ValueError(f"{path!r} is not a path such as answer.items[0].name")
    return [key if key else int(index) for key, index in _PATH_PART.findall(path)]


def resolve_path(value: Any, parts: list[str | int]) -> Any:
    """The value at ``parts`` in ``value`` (a JSON string is parsed first), or ``_MISSING``."""
    for part in parts:
        value = _loaded(value)
        if isinstance(part, str) and isinstance(value, dict):
            if part not in value:
                return _MISSING
            value = value[part]
        elif isinstance(value, list) and (isinstance(part, int) or part.lstrip("-").isdecimal()):
            index = int(part)
            if not -len(value) <= index < len(value):
                return _MISSING
            value = value[index]
        else:
            return _MISSING
    return value


def _loads(text: str) -> tuple[bool, Any]:
    try:
        return True, json.loads(text)
    except (TypeError, ValueError):
        return False, None


def _loaded(value: Any) -> Any:
    """A string holding a JSON object or array, parsed; anything else as it is."""
    if isinstance(value, str) and value.lstrip()[:1] in ("{", "["):
        ok, parsed = _loads(value)
        if ok:
            return parsed
    return value


def as_text(value: Any) -> str:
    """A value as the text rules read: strings as they are, the rest as JSON."""
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, sort_keys=True, default=str)


def _short(value: Any, limit: int = 120) -> str:
    text = as_text(value) if not isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    return text if len(text) <= limit else text[: limit - 1] + "…"


def _json_equal(left: Any, right: Any) -> bool:
    """Equality as JSON means it: 1 == 1.0, but true is not 1."""
    if isinstance(left, bool) or isinstance(right, bool):
        return isinstance(left, bool) and isinstance(right, bool) and left == right
    if isinstance(left, int | float | Decimal) and isinstance(right, int | float | Decimal):
        return float(left) == float(right)
    if isinstance(left, dict) and isinstance(right, dict):
        return left.keys() == right.keys() and all(_json_equal(left[key], right[key]) for key in left)
    if isinstance(left, list | tuple) and isinstance(right, list | tuple):
        return len(left) == len(right) and all(_json_equal(a, b) for a, b in zip(left, right, strict=True))
    return left == right


def _same(actual: Any, expected: Any, *, case_sensitive: bool = True, strip: bool = True) -> bool:
    """Whether two values match: text with the text options, JSON as JSON, and a text
    against a JSON value either as the JSON it holds or as the value's text."""

    def norm(text: str) -> str:
        text = text.strip() if strip else text
        return text if case_sensitive else text.casefold()

    if isinstance(actual, str) and isinstance(expected, str):
        return norm(actual) == norm(expected)
    if not isinstance(actual, str) and not isinstance(expected, str):
        return _json_equal(actual, expected)
    text, other = (actual, expected) if isinstance(actual, str) else (expected, actual)
    ok, parsed = _loads(text)
    if ok and _json_equal(parsed, other):
        return True
    return norm(text) == norm(as_text(other))


def _number(value: Any) -> float | None:
    """A finite number from a number or a text holding one, else None."""
    if isinstance(value, bool) or value is None:
        return None
    if isinstance(value, int | float | Decimal):
        number = float(value)
    elif isinstance(value, str):
        try:
            number = float(value.strip())
        except ValueError:
            return None
    else:
        return None
    return number if math.isfinite(number) else None


def _decimal(value: Any) -> Decimal | None:
    if value is None or isinstance(value, bool):
        return None
    try:
        number = Decimal(str(value).strip())
    except (InvalidOperation, ValueError):
        return None
    return number if number.is_finite() else None


def _expected_at(expected: Any, parts: list[str | int]) -> Any:
    """The expected value for a field: the same path in the expected output when it is a
    JSON object or array holding it, else the expected output itself."""
    if parts and isinstance(_loaded(expected), dict | list):
        found = resolve_path(expected, parts)
        if found is not _MISSING:
            return found
    return expected


def _regex_flags(flags: str) -> str:
    return f"(?{flags})" if flags else ""


# --- Checking configurations ---------------------------------------------------------------------


class _Config:
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


def _pattern(text: str, flags: str = "") -> str:
    """A pattern people wrote, refused if it is not a valid regular expression or can
    backtrack catastrophically."""
    from runs.services.redaction import validate_custom_pattern

    try:
        validate_custom_pattern(_regex_flags(flags) + text)
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    return text


def _clean_exact_match(c: _Config) -> None:
    c.path("field")
    c.boolean("case_sensitive", True)
    c.boolean("strip", True)
    c.keep("expected")


def _clean_contains(c: _Config) -> None:
    value = c.raw.get("value")
    if value is not None:
        values = [value] if isinstance(value, str) else value
        if not isinstance(values, list) or not values or not all(isinstance(v, str) and v for v in values):
            raise InvalidRequest("value must be a text or a list of texts that must all appear")
        c.cleaned["value"] = value
    c.boolean("case_sensitive", True)


def _clean_regex(c: _Config) -> None:
    flags = c.text("flags", default="", max_length=10) or ""
    if any(flag not in "imsx" for flag in flags):
        raise InvalidRequest('flags are letters among "imsx" (ignore case, multi-line, dot matches all, verbose)')
    flags = "".join(sorted(set(flags)))
    c.cleaned["flags"] = flags
    pattern = c.text("pattern", required=True, max_length=500)
    _pattern(pattern, flags)


def _clean_json_valid(c: _Config) -> None:
    pass


def _clean_json_schema(c: _Config) -> None:
    schema = c.raw.get("schema")
    if not isinstance(schema, dict):
        raise InvalidRequest('json_schema evaluators need "schema": a JSON schema object')
    try:
        jsonschema.validators.validator_for(schema).check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(part) for part in exc.path)
        raise InvalidRequest(f"the schema is not valid{f' at {where}' if where else ''}: {exc.message}") from None
    c.cleaned["schema"] = schema


def _clean_json_field(c: _Config) -> None:
    c.path("path", required=True)
    c.keep("value")


def _clean_numeric(c: _Config) -> None:
    c.number("tolerance", default=0, low=0)
    c.boolean("relative", False)
    c.path("field")
    if c.given("expected"):
        if _number(c.raw["expected"]) is None:
            raise InvalidRequest("expected must be a number")
        c.keep("expected")


def _clean_cost_limit(c: _Config) -> None:
    value = c.raw.get("max_cost")
    amount = _decimal(value) if isinstance(value, int | float | str) else None
    if amount is None or amount < 0:
        raise InvalidRequest("cost_limit evaluators need max_cost: a number of dollars, 0 or more")
    c.cleaned["max_cost"] = value


def _clean_latency_limit(c: _Config) -> None:
    c.number("max_ms", required=True, low=0, whole=True)


def _clean_trajectory(c: _Config) -> None:
    tool = c.text("tool", max_length=200)
    if tool is not None:
        if not tool.strip():
            raise InvalidRequest("tool must name a tool")
        c.cleaned["tool"] = tool.strip()
    arguments = c.raw.get("arguments")
    if arguments is not None:
        if not tool:
            raise InvalidRequest("arguments apply to the calls of tool: name the tool too")
        if not isinstance(arguments, dict) or not arguments:
            raise InvalidRequest("arguments must be an object: {argument: value, or a pattern its text must match}")
        for key, expected in arguments.items():
            try:
                parse_path(key)
            except ValueError as exc:
                raise InvalidRequest(f"arguments: {exc}") from None
            if isinstance(expected, str):
                _pattern(expected)
        c.cleaned["arguments"] = arguments
    c.number("max_steps", low=1, whole=True)
    c.names("forbidden_tools")
    c.names("order")
    if not c.cleaned:
        raise InvalidRequest("trajectory evaluators need at least one check: tool, max_steps, forbidden_tools, order")


def _clean_llm_judge(c: _Config) -> None:
    model = c.text("model", default=JUDGE_DEFAULT_MODEL, max_length=200)
    c.cleaned["model"] = (model or "").strip() or JUDGE_DEFAULT_MODEL
    c.text("rubric", required=True, max_length=20_000)
    c.boolean("include_trajectory", True)
    c.number("max_trajectory_chars", default=20_000, low=1_000, high=200_000, whole=True)


def _clean_webhook(c: _Config) -> None:
    url = c.text("url", required=True, max_length=500).strip()
    try:
        check_outbound_url(url)
    except UnsafeUrlError as exc:
        raise InvalidRequest(f"URL refused: {exc}") from None
    c.cleaned["url"] = url
    c.number("timeout_seconds", default=10, low=1, high=60)


def _clean_human(c: _Config) -> None:
    scale = c.raw.get("scale", "0-1")
    if scale not in HUMAN_SCALES:
        raise InvalidRequest(f"scale must be one of {', '.join(HUMAN_SCALES)}")
    c.cleaned["scale"] = scale
    c.text("instructions", max_length=10_000)


CONFIGS = {
    "exact_match": (("field", "case_sensitive", "strip", "expected"), _clean_exact_match),
    "contains": (("value", "case_sensitive"), _clean_contains),
    "regex": (("pattern", "flags"), _clean_regex),
    "json_valid": ((), _clean_json_valid),
    "json_schema": (("schema",), _clean_json_schema),
    "json_field": (("path", "value"), _clean_json_field),
    "numeric": (("tolerance", "relative", "field", "expected"), _clean_numeric),
    "cost_limit": (("max_cost",), _clean_cost_limit),
    "latency_limit": (("max_ms",), _clean_latency_limit),
    "trajectory": (("tool", "arguments", "max_steps", "forbidden_tools", "order"), _clean_trajectory),
    "llm_judge": (("model", "rubric", "include_trajectory", "max_trajectory_chars"), _clean_llm_judge),
    "webhook": (("url", "timeout_seconds"), _clean_webhook),
    "human": (("scale", "instructions"), _clean_human),
}

# One example per kind: the create form shows them, and the docs.
EXAMPLES: dict[str, dict] = {
    "exact_match": {"field": "answer", "case_sensitive": False, "strip": True},
    "contains": {"value": ["refund", "order number"], "case_sensitive": False},
    "regex": {"pattern": r"^ORD-\d{6}$", "flags": "m"},
    "json_valid": {},
    "json_schema": {"schema": {"type": "object", "required": ["answer"], "properties": {"answer": {"type": "string"}}}},
    "json_field": {"path": "order.status", "value": "refunded"},
    "numeric": {"tolerance": 0.01, "relative": True, "field": "total"},
    "cost_limit": {"max_cost": 0.05},
    "latency_limit": {"max_ms": 10000},
    "trajectory": {
        "tool": "lookup_order",
        "arguments": {"order_id": r"ORD-\d+"},
        "max_steps": 8,
        "forbidden_tools": ["delete_order"],
        "order": ["lookup_order", "issue_refund"],
    },
    "llm_judge": {
        "model": JUDGE_DEFAULT_MODEL,
        "rubric": "Score 1 if the answer is correct, complete and polite; 0 if it is wrong or made up.",
        "include_trajectory": True,
        "max_trajectory_chars": 20000,
    },
    "webhook": {"url": "https://evals.example.com/score", "timeout_seconds": 10},
    "human": {"scale": "1-5", "instructions": "How helpful was the answer?"},
}


def validate_config(kind: str, config: dict) -> dict:
    """The cleaned configuration of a ``kind`` evaluator (defaults filled in), or
    InvalidRequest saying what is wrong."""
    if kind not in CONFIGS:
        raise InvalidRequest(f"unknown evaluator kind {kind!r}; use one of {', '.join(CONFIGS)}")
    if problem := storage_problem(config):
        raise InvalidRequest(f"the configuration cannot be stored: {problem}")
    allowed, clean = CONFIGS[kind]
    reader = _Config(kind, config, allowed)
    clean(reader)
    return reader.cleaned


def normalise_human(config: dict, raw: Any) -> float:
    """A person's score on the evaluator's scale, as 0..1: "0-1" as it is, "pass-fail"
    (true/false, "pass"/"fail", 1/0) as 1 or 0, "1-5" as (score - 1) / 4."""
    scale = (config or {}).get("scale", "0-1")
    if scale == "pass-fail":
        if isinstance(raw, str) and raw.strip().lower() in ("pass", "fail", "true", "false"):
            return 1.0 if raw.strip().lower() in ("pass", "true") else 0.0
        if isinstance(raw, bool) or (isinstance(raw, int | float) and raw in (0, 1)):
            return float(raw)
        raise InvalidRequest('a pass-fail score is "pass" or "fail"')
    number = _number(raw)
    if scale == "1-5":
        if number is None or number != int(number) or not 1 <= number <= 5:
            raise InvalidRequest("a score on the 1-5 scale is a whole number from 1 to 5")
        return (number - 1) / 4
    if number is None or not 0 <= number <= 1:
        raise InvalidRequest("a score is a number from 0 to 1")
    return number


# --- Rules ---------------------------------------------------------------------------------------


def _no_expected(setting: str) -> Outcome:
    return Outcome(
        value=None,
        error=f'nothing to compare with: the item has no expected output and the configuration no "{setting}"',
    )


def _score(ok: bool, reasoning: str, **details) -> Outcome:
    return Outcome(value=1.0 if ok else 0.0, reasoning=reasoning, details=details)


def _exact_match(spec, config, subject: Subject, organization) -> Outcome:
    parts = parse_path(config.get("field", ""))
    expected = config["expected"] if "expected" in config else _expected_at(subject.expected, parts)
    if expected is None:
        return _no_expected("expected")
    actual = resolve_path(subject.output, parts)
    if actual is _MISSING:
        return _score(False, f"the output has no field {config['field']}")
    ok = _same(actual, expected, case_sensitive=config.get("case_sensitive", True), strip=config.get("strip", True))
    if ok:
        return _score(True, "matches the expected output")
    return _score(False, f"got {_short(actual)}, expected {_short(expected)}")


def _contains(spec, config, subject: Subject, organization) -> Outcome:
    wanted = config["value"] if "value" in config else subject.expected
    if wanted is None:
        return _no_expected("value")
    values = wanted if isinstance(wanted, list) else [wanted]
    if not all(isinstance(value, str | int | float) and not isinstance(value, bool) for value in values):
        return Outcome(value=None, error='contains needs texts: set "value" or give the items a text expected output')
    text = as_text(subject.output)
    case_sensitive = config.get("case_sensitive", True)
    haystack = text if case_sensitive else text.casefold()
    missing = [
        str(value) for value in values if (str(value) if case_sensitive else str(value).casefold()) not in haystack
    ]
    if missing:
        return _score(False, "missing: " + ", ".join(_short(value, 80) for value in missing), missing=missing)
    return _score(True, f"contains all {len(values)} expected text{'s' if len(values) != 1 else ''}")


def _regex(spec, config, subject: Subject, organization) -> Outcome:
    pattern = regex.compile(_regex_flags(config.get("flags", "")) + config["pattern"], regex.V0)
    try:
        match = pattern.search(as_text(subject.output), timeout=REGEX_TIMEOUT_SECONDS)
    except TimeoutError:
        return Outcome(value=None, error="the pattern took too long on this output")
    if match is None:
        return _score(False, f"no match for {config['pattern']!r}")
    return _score(True, f"matched {_short(match.group(0), 80)}", match=match.group(0)[:500])


def _json_valid(spec, config, subject: Subject, organization) -> Outcome:
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


def _json_output(output: Any) -> tuple[bool, Any]:
    if isinstance(output, str):
        return _loads(output)
    return output is not None, output


def _json_schema(spec, config, subject: Subject, organization) -> Outcome:
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


def _json_field(spec, config, subject: Subject, organization) -> Outcome:
    parts = parse_path(config["path"])
    if "value" in config:
        expected = config["value"]
    else:
        expected = resolve_path(subject.expected, parts)
        if expected is _MISSING:
            return Outcome(
                value=None, error=f'the expected output has no field {config["path"]} and the configuration no "value"'
            )
    actual = resolve_path(subject.output, parts)
    if actual is _MISSING:
        return _score(False, f"the output has no field {config['path']}")
    if _same(actual, expected):
        return _score(True, f"{config['path']} is {_short(expected)}")
    return _score(False, f"{config['path']} is {_short(actual)}, expected {_short(expected)}")


def _numeric(spec, config, subject: Subject, organization) -> Outcome:
    parts = parse_path(config.get("field", ""))
    raw_expected = config["expected"] if "expected" in config else _expected_at(subject.expected, parts)
    if raw_expected is None:
        return _no_expected("expected")
    expected = _number(raw_expected)
    if expected is None:
        return Outcome(value=None, error=f"the expected output {_short(raw_expected)} is not a number")
    raw = resolve_path(subject.output, parts)
    if raw is _MISSING:
        return _score(False, f"the output has no field {config['field']}")
    actual = _number(raw)
    if actual is None:
        return _score(False, f"{_short(raw)} is not a number")
    tolerance = float(config.get("tolerance", 0))
    allowed = tolerance * abs(expected) if config.get("relative") else tolerance
    difference = abs(actual - expected)
    details = {"actual": actual, "expected": expected, "difference": difference, "allowed": allowed}
    if difference <= allowed:
        return _score(True, f"{actual:g} is within {allowed:g} of {expected:g}", **details)
    return _score(False, f"{actual:g} is {difference:g} away from {expected:g} (allowed: {allowed:g})", **details)


def _cost_limit(spec, config, subject: Subject, organization) -> Outcome:
    if subject.cost is None:
        return Outcome(value=None, error="the run's cost is not known")
    limit = _decimal(config["max_cost"])
    details = {"cost": str(subject.cost), "max_cost": str(limit)}
    if subject.cost <= limit:
        return _score(True, f"cost ${subject.cost.normalize():f} is within ${limit.normalize():f}", **details)
    return _score(False, f"cost ${subject.cost.normalize():f} is over ${limit.normalize():f}", **details)


def _latency_limit(spec, config, subject: Subject, organization) -> Outcome:
    if subject.latency_ms is None:
        return Outcome(value=None, error="the run's latency is not known")
    limit = config["max_ms"]
    details = {"latency_ms": subject.latency_ms, "max_ms": limit}
    if subject.latency_ms <= limit:
        return _score(True, f"{subject.latency_ms} ms is within {limit} ms", **details)
    return _score(False, f"{subject.latency_ms} ms is over {limit} ms", **details)


# --- Trajectory -----------------------------------------------------------------------------------


def _argument_matches(actual: Any, expected: Any) -> bool:
    """A configured string is a pattern the argument's whole text must match; any other
    value must equal the argument (as JSON)."""
    if actual is _MISSING:
        return False
    if isinstance(expected, str):
        try:
            return regex.fullmatch(expected, as_text(actual), regex.V0, timeout=REGEX_TIMEOUT_SECONDS) is not None
        except TimeoutError:
            return False
    return _json_equal(actual, expected)


def _call_matches(call: ToolCallView, arguments: dict) -> list[str]:
    """The arguments of ``call`` that do not match (empty: the call matches)."""
    given = _loaded(call.arguments)
    return [
        key
        for key, expected in arguments.items()
        if not _argument_matches(resolve_path(given, parse_path(key)), expected)
    ]


def counted_steps(subject: Subject) -> int:
    """The steps ``max_steps`` counts: model calls and tool calls. Wrapper spans (agent,
    chain...) depend on how an agent is instrumented, so they do not count; a reported
    trajectory with no steps counts its tool calls."""
    if not subject.steps:
        return len(subject.tool_calls)
    return sum(1 for step in subject.steps if step.kind in ("llm", "tool"))


def _is_subsequence(wanted: list[str], names: list[str]) -> bool:
    remaining = iter(names)
    return all(any(name == want for name in remaining) for want in wanted)


def _trajectory(spec, config, subject: Subject, organization) -> Outcome:
    names = [call.name for call in subject.tool_calls]
    checks: list[dict] = []
    if "tool" in config:
        tool = config["tool"]
        calls = [call for call in subject.tool_calls if call.name == tool]
        arguments = config.get("arguments") or {}
        if not calls:
            checks.append({"check": "tool", "passed": False, "detail": f"{tool} was never called"})
        elif not arguments:
            checks.append({"check": "tool", "passed": True, "detail": f"{tool} was called {len(calls)} time(s)"})
        else:
            mismatches = [_call_matches(call, arguments) for call in calls]
            if any(not mismatch for mismatch in mismatches):
                checks.append({"check": "tool", "passed": True, "detail": f"{tool} was called with matching arguments"})
            else:
                keys = sorted({key for mismatch in mismatches for key in mismatch})
                checks.append(
                    {
                        "check": "tool",
                        "passed": False,
                        "detail": f"{tool} was called {len(calls)} time(s), never with matching {', '.join(keys)}",
                    }
                )
    if "max_steps" in config:
        count = counted_steps(subject)
        ok = count <= config["max_steps"]
        checks.append(
            {
                "check": "max_steps",
                "passed": ok,
                "detail": f"{count} steps ({'within' if ok else 'over'} {config['max_steps']})",
            }
        )
    if "forbidden_tools" in config:
        used = sorted({name for name in names if name in config["forbidden_tools"]})
        checks.append(
            {
                "check": "forbidden_tools",
                "passed": not used,
                "detail": f"called {', '.join(used)}" if used else "no forbidden tool was called",
            }
        )
    if "order" in config:
        ok = _is_subsequence(config["order"], names)
        checks.append(
            {
                "check": "order",
                "passed": ok,
                "detail": ("called in order: " if ok else "not called in order ")
                + " → ".join(config["order"])
                + ("" if ok else f"; calls were: {' → '.join(names) or 'none'}"),
            }
        )
    if not checks:
        return Outcome(value=None, error="the trajectory evaluator has no checks configured")
    failed = [check for check in checks if not check["passed"]]
    value = (len(checks) - len(failed)) / len(checks)
    if failed:
        reasoning = "failed: " + "; ".join(f"{check['check']}: {check['detail']}" for check in failed)
    else:
        reasoning = f"all {len(checks)} checks passed"
    return Outcome(value=value, reasoning=reasoning, details={"checks": checks, "failed": [c["check"] for c in failed]})


# --- LLM judge ------------------------------------------------------------------------------------

JUDGE_SYSTEM_PROMPT = (
    "You grade the work of an AI agent against a rubric. You are given the task's input, the expected "
    "output when there is one, the agent's final output and, when available, its trajectory: every model "
    "call and tool call it made, with arguments and results. Judge by the rubric only; use the trajectory "
    "to check how the answer was reached (tools used, facts looked up, errors ignored).\n"
    'Answer with one JSON object and nothing else: {"score": <a number from 0 to 1>, "reasoning": "<a short '
    'paragraph saying why>"}.'
)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 0)
    return f"{text[:keep]}… [{len(text) - keep} characters cut]"


def _fair_share(lengths: list[int], budget: int) -> int:
    """The largest cap such that every field cut to it fits in ``budget`` in total:
    short fields stay whole, long ones share what is left equally."""
    if sum(lengths) <= budget:
        return max(lengths, default=0)
    low, high = 0, max(lengths)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(min(length, middle) for length in lengths) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def render_trajectory(subject: Subject, budget: int) -> tuple[str, bool]:
    """Every step (and every tool call not already shown as a tool step) as text for the
    judge, cut to ``budget`` characters: each step's fields get a fair share. Returns the
    text and whether anything was cut."""
    entries: list[tuple[str, list[tuple[str, str]]]] = []
    for number, step in enumerate(subject.steps, start=1):
        facts = [step.kind, repr(step.name) if step.name else ""]
        if step.model:
            facts.append(f"model={step.model}")
        if step.status:
            facts.append(f"status={step.status}")
        if step.latency_ms is not None:
            facts.append(f"{step.latency_ms} ms")
        fields = [("input", as_text(step.input)), ("output", as_text(step.output)), ("error", step.error)]
        entries.append((f"{number}. " + " ".join(fact for fact in facts if fact), [f for f in fields if f[1]]))
    shown = Counter(step.name for step in subject.steps if step.kind == "tool")
    extra = []
    for call in subject.tool_calls:
        if shown[call.name] > 0:
            shown[call.name] -= 1
        else:
            extra.append(call)
    for number, call in enumerate(extra, start=1):
        fields = [("arguments", as_text(call.arguments)), ("result", as_text(call.result)), ("error", call.error)]
        entries.append((f"tool call {number}: {call.name}", [f for f in fields if f[1]]))
    if not entries:
        return "(no steps recorded)", False
    overhead = sum(len(header) + 1 + sum(len(label) + 6 for label, _ in fields) for header, fields in entries)
    lengths = [len(text) for _, fields in entries for _, text in fields]
    cap = _fair_share(lengths, max(budget - overhead, len(lengths) * 50))
    cut = any(length > cap for length in lengths)
    lines = []
    for header, fields in entries:
        lines.append(header)
        lines.extend(f"   {label}: {_cut(text, cap)}" for label, text in fields)
    text = "\n".join(lines)
    if len(text) > budget:  # so many steps that their headers alone overflow
        half = budget // 2
        text = f"{text[:half]}\n… [{len(text) - 2 * half} characters of the trajectory cut] …\n{text[-half:]}"
        cut = True
    return text, cut


def judge_messages(config: dict, subject: Subject) -> tuple[list[dict], bool]:
    """The judge's conversation, and whether the trajectory was shortened to fit."""
    sections = [
        ("Rubric", config["rubric"]),
        ("Input", _cut(as_text(subject.input), JUDGE_FIELD_CHARS) or "(empty)"),
        (
            "Expected output",
            _cut(as_text(subject.expected), JUDGE_FIELD_CHARS) if subject.expected is not None else "(none given)",
        ),
        ("Final output of the agent", _cut(as_text(subject.output), JUDGE_FIELD_CHARS) or "(empty)"),
    ]
    truncated = False
    if config.get("include_trajectory", True):
        trajectory, truncated = render_trajectory(subject, config.get("max_trajectory_chars", 20_000))
        note = " (long values were shortened)" if truncated else ""
        sections.append(
            (f"Trajectory: {len(subject.steps)} steps, {len(subject.tool_calls)} tool calls{note}", trajectory)
        )
    if subject.run_status:
        sections.append(("Run status", subject.run_status))
    body = "\n\n".join(f"## {title}\n{text}" for title, text in sections)
    body += '\n\nGrade the final output by the rubric. Answer only with {"score": 0..1, "reasoning": "..."}.'
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": body}], truncated


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


def parse_judge_answer(text: str) -> tuple[float, str]:
    """(score, reasoning) from the judge's answer, or ValueError saying what was wrong."""
    candidate = _FENCE.sub("", (text or "").strip())
    ok, answer = _loads(candidate)
    if not ok:
        start, end = candidate.find("{"), candidate.rfind("}")
        ok, answer = _loads(candidate[start : end + 1]) if 0 <= start < end else (False, None)
    if not ok or not isinstance(answer, dict):
        raise ValueError(f"the judge did not answer with a JSON object: {_short(text, 200)}")
    if "score" not in answer:
        raise ValueError(f'the judge\'s answer has no "score": {_short(text, 200)}')
    score = _number(answer["score"])
    if score is None or not 0 <= score <= 1:
        raise ValueError(f"the judge's score {_short(answer['score'], 40)} is not a number from 0 to 1")
    reasoning = answer.get("reasoning", "")
    return score, reasoning if isinstance(reasoning, str) else as_text(reasoning)


def _llm_judge(spec, config, subject: Subject, organization) -> Outcome:
    from agentops.llm.base import ProviderError
    from agentops.llm.providers import provider_for
    from billing.services import price_for, tokens_cost

    model = config.get("model") or JUDGE_DEFAULT_MODEL
    messages, truncated = judge_messages(config, subject)
    provider = provider_for(organization=organization, model=model)
    try:
        result = provider.chat(
            model=model,
            messages=messages,
            tools=[],
            # Passed through to the provider's API: Mistral then answers with JSON only.
            parameters={"temperature": 0, "response_format": {"type": "json_object"}},
            timeout_ms=JUDGE_TIMEOUT_MS,
        )
    except ProviderError as exc:
        return Outcome(value=None, error=f"the judge could not be asked: {exc}", details={"judge_model": model})
    price = price_for(model=result.model or model, organization_id=organization.pk)
    cost = (
        tokens_cost(
            price=price,
            input_tokens=result.input_tokens,
            cached_input_tokens=result.cached_input_tokens,
            output_tokens=result.output_tokens,
        )
        if price is not None
        else None
    )
    details = {
        "judge_model": result.model or model,
        "input_tokens": result.input_tokens,
        "output_tokens": result.output_tokens,
        "cost": str(cost) if cost is not None else None,
        "trajectory_truncated": truncated,
    }
    try:
        score, reasoning = parse_judge_answer(result.content)
    except ValueError as exc:
        return Outcome(value=None, error=str(exc), details={**details, "answer": result.content[:2000]})
    return Outcome(value=score, reasoning=reasoning, details=details)


# --- Webhook --------------------------------------------------------------------------------------


def webhook_payload(spec: dict, subject: Subject) -> dict:
    """What a webhook evaluator receives (docs/evaluations.md shows it)."""
    return {
        "evaluator": spec.get("name", ""),
        "item": {"input": subject.input, "expected": subject.expected, "metadata": subject.metadata},
        "output": subject.output,
        "run": {
            "id": subject.run_id,
            "status": subject.run_status,
            "cost": str(subject.cost) if subject.cost is not None else None,
            "latency_ms": subject.latency_ms,
            "tokens": subject.tokens,
            "steps": [asdict(step) for step in subject.steps],
            "tool_calls": [asdict(call) for call in subject.tool_calls],
        },
    }


def new_webhook_secret() -> str:
    return "whsec_" + secret_tokens.token_urlsafe(32)


def _webhook_secret(spec: dict, organization) -> str | None:
    from agentops import crypto
    from evals.models import Evaluator

    if spec.get("id") is None:
        return None
    ciphertext = (
        Evaluator.objects.filter(pk=spec["id"], organization=organization)
        .values_list("secret_ciphertext", flat=True)
        .first()
    )
    return crypto.decrypt(ciphertext) if ciphertext else None


def _webhook(spec, config, subject: Subject, organization) -> Outcome:
    from runs.tools.webhook import signature

    url = config.get("url", "")
    timeout = float(config.get("timeout_seconds", 10))
    try:
        check_outbound_url(url)
    except UnsafeUrlError as exc:
        return Outcome(value=None, error=f"the webhook's URL is refused: {exc}")
    secret = _webhook_secret(spec, organization)
    if not secret:
        return Outcome(value=None, error="the webhook evaluator has no signing secret (save it first)")
    body = json.dumps(webhook_payload(spec, subject), separators=(",", ":"), default=str).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "AgentOps-Studio-Evaluator/1",
        "X-AgentOps-Timestamp": timestamp,
        "X-AgentOps-Signature": signature(secret, timestamp, body),
    }
    started = time.monotonic()
    try:
        with requests.post(
            url, data=body, headers=headers, timeout=timeout, stream=True, allow_redirects=False
        ) as response:
            raw = response.raw.read(WEBHOOK_RESPONSE_MAX_BYTES + 1, decode_content=True)
    except requests.Timeout:
        return Outcome(value=None, error=f"the webhook did not answer within {timeout:g} s")
    except requests.RequestException as exc:
        return Outcome(value=None, error=f"calling the webhook failed: {type(exc).__name__}")
    details = {"status_code": response.status_code, "elapsed_ms": round((time.monotonic() - started) * 1000)}
    if len(raw) > WEBHOOK_RESPONSE_MAX_BYTES:
        return Outcome(value=None, error=f"the webhook answered more than {WEBHOOK_RESPONSE_MAX_BYTES} bytes")
    text = raw.decode(response.encoding or "utf-8", errors="replace")
    if response.status_code >= 300:
        return Outcome(
            value=None, error=f"the webhook answered HTTP {response.status_code}: {text[:300]}", details=details
        )
    ok, answer = _loads(text)
    if not ok:
        return Outcome(value=None, error=f"the webhook's answer is not JSON: {_short(text, 200)}", details=details)
    if not isinstance(answer, dict) or "score" not in answer:
        return Outcome(
            value=None,
            error=f'the webhook must answer a JSON object with "score" from 0 to 1, not {_short(answer, 200)}',
            details=details,
        )
    score = answer["score"]
    if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
        return Outcome(
            value=None,
            error=f'the webhook\'s "score" must be a number from 0 to 1, not {_short(score, 40)}',
            details=details,
        )
    reasoning = answer.get("reasoning", "")
    if not isinstance(reasoning, str):
        return Outcome(value=None, error='the webhook\'s "reasoning" must be text', details=details)
    if isinstance(answer.get("details"), dict):
        details["details"] = answer["details"]
    return Outcome(value=float(score), reasoning=reasoning, details=details)


def _human(spec, config, subject: Subject, organization) -> Outcome:
    return Outcome(value=None, error=NOT_RUN_BY_MACHINES)


SCORERS = {
    "exact_match": _exact_match,
    "contains": _contains,
    "regex": _regex,
    "json_valid": _json_valid,
    "json_schema": _json_schema,
    "json_field": _json_field,
    "numeric": _numeric,
    "cost_limit": _cost_limit,
    "latency_limit": _latency_limit,
    "trajectory": _trajectory,
    "llm_judge": _llm_judge,
    "webhook": _webhook,
    "human": _human,
}
