"""The rule evaluators (``evals.scoring.rules``): every kind passes and fails, and says why."""

from __future__ import annotations

from decimal import Decimal

import pytest

from agentops.errors import InvalidRequest
from evals.scoring.registry import evaluate, validate_config
from tests.evals.scoring_helpers import score, subject

# --- Every rule: a pass and a fail ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "config", "good", "bad"),
    [
        ("exact_match", {}, subject(" Paris ", "Paris"), subject("Lyon", "Paris")),
        ("exact_match", {"case_sensitive": False}, subject("PARIS", "paris"), subject("PARIS!", "paris")),
        ("exact_match", {"field": "answer"}, subject({"answer": 42}, {"answer": 42}), subject({"answer": 41}, 42)),
        ("exact_match", {"expected": {"a": 1}}, subject('{"a": 1.0}'), subject('{"a": 2}')),
        ("contains", {"value": ["refund", "order"]}, subject("Your order refund is done"), subject("order only")),
        ("contains", {"case_sensitive": False}, subject("It is PARIS.", "paris"), subject("It is Lyon.", "paris")),
        ("regex", {"pattern": r"^ORD-\d{3}$", "flags": "m"}, subject("x\nORD-123\n"), subject("ORD-12")),
        ("json_valid", {}, subject('{"ok": true}'), subject("{ok: true}")),
        ("json_valid", {}, subject({"ok": True}), subject(None)),
        (
            "json_schema",
            {"schema": {"type": "object", "required": ["answer"]}},
            subject({"answer": "x"}),
            subject({"other": 1}),
        ),
        (
            "json_field",
            {"path": "order.status"},
            subject({"order": {"status": "refunded"}}, {"order": {"status": "refunded"}}),
            subject({"order": {"status": "open"}}, {"order": {"status": "refunded"}}),
        ),
        ("json_field", {"path": "items[1]", "value": "b"}, subject('{"items": ["a", "b"]}'), subject({"items": ["a"]})),
        ("numeric", {"tolerance": 0.5}, subject("10.4", 10), subject("10.6", 10)),
        (
            "numeric",
            {"tolerance": 0.1, "relative": True, "field": "total"},
            subject({"total": 105}, {"total": 100}),
            subject({"total": 111}, {"total": 100}),
        ),
        ("cost_limit", {"max_cost": 0.01}, subject(cost=Decimal("0.01")), subject(cost=Decimal("0.010000001"))),
        ("latency_limit", {"max_ms": 1000}, subject(latency_ms=1000), subject(latency_ms=1001)),
    ],
)
def test_rule_passes_and_fails(kind, config, good, bad):
    passing, failing = score(kind, config, good), score(kind, config, bad)
    assert (passing.value, passing.error) == (1.0, ""), passing
    assert (failing.value, failing.error) == (0.0, ""), failing
    assert failing.reasoning


def test_failures_say_what_was_wrong():
    assert score("exact_match", {}, subject("Lyon", "Paris")).reasoning == 'got "Lyon", expected "Paris"'
    missing = score("contains", {"value": ["refund", "sorry"]}, subject("a refund"))
    assert missing.reasoning == 'missing: "sorry"' and missing.details == {"missing": ["sorry"]}
    schema = score("json_schema", {"schema": {"properties": {"n": {"type": "integer"}}}}, subject({"n": "x"}))
    assert schema.reasoning == "n: 'x' is not of type 'integer'"
    assert score("numeric", {}, subject("about ten", 10)).reasoning == '"about ten" is not a number'
    assert (
        score("json_field", {"path": "a.b", "value": 1}, subject({"a": {}})).reasoning == "the output has no field a.b"
    )


def test_comparisons_with_no_expected_output_cannot_score():
    for kind in ("exact_match", "contains", "numeric"):
        outcome = score(kind, {}, subject("anything"))
        assert outcome.value is None and "nothing to compare with" in outcome.error
    outcome = score("json_field", {"path": "a"}, subject({"a": 1}, expected={"b": 2}))
    assert outcome.value is None and "the expected output has no field a" in outcome.error


def test_unknown_cost_or_latency_cannot_score():
    assert score("cost_limit", {"max_cost": 1}, subject()).error == "the run's cost is not known"
    assert score("latency_limit", {"max_ms": 1}, subject()).error == "the run's latency is not known"


def test_catastrophic_patterns_are_refused_when_saved():
    with pytest.raises(InvalidRequest, match="catastrophic backtracking"):
        validate_config("regex", {"pattern": r"^(a+)+$"})


def test_a_pattern_that_runs_out_of_time_gives_no_score():
    # Saving refuses this pattern now; one saved before the check still runs. It needs
    # about 2^5000 steps on this output (each digit doubles the ways to try), so the
    # budget trips on any machine.
    config = {"pattern": r"^(\d|[0-9])+$", "flags": ""}
    spec = {"id": None, "name": "metric", "kind": "regex", "config": config, "threshold": 0.5}
    outcome = evaluate(spec, subject("1" * 5000 + "!"), organization=None)
    assert outcome.value is None and outcome.error == "the pattern took too long on this output"
