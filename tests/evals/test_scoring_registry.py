"""The registry of evaluator kinds (``evals.scoring.registry``): configuration checks
of every kind, specs and thresholds."""

from __future__ import annotations

from collections import Counter

import pytest

from agentops.errors import InvalidRequest
from evals.models import Evaluator
from evals.scoring import EvaluatorKind, get_kind, kinds, passed, spec_of, validate_config
from evals.scoring.registry import register
from tests.evals.factories import make_evaluator

# --- Configuration checks ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("kind", "config", "message"),
    [
        ("exact_match", {"feild": "answer"}, "unknown setting 'feild' for exact_match evaluators"),
        ("exact_match", {"case_sensitive": "no"}, "case_sensitive must be true or false"),
        ("exact_match", {"field": "a..b"}, "field: 'a..b' is not a path"),
        ("contains", {"value": []}, "value must be a text or a list of texts"),
        ("regex", {}, "regex evaluators need pattern"),
        ("regex", {"pattern": "("}, "invalid regular expression"),
        ("regex", {"pattern": "a", "flags": "g"}, 'flags are letters among "imsx"'),
        ("json_valid", {"strict": True}, "they take no settings"),
        ("json_schema", {}, 'need "schema"'),
        ("json_schema", {"schema": {"type": "banana"}}, "the schema is not valid"),
        ("json_field", {}, "json_field evaluators need path"),
        ("numeric", {"tolerance": -1}, "tolerance must be at least 0"),
        ("numeric", {"expected": "ten"}, "expected must be a number"),
        ("cost_limit", {"max_cost": "lots"}, "need max_cost"),
        ("latency_limit", {"max_ms": 1.5}, "max_ms must be a whole number"),
        ("trajectory", {}, "need at least one check"),
        ("trajectory", {"arguments": {"a": 1}}, "name the tool too"),
        ("trajectory", {"tool": "x", "arguments": {"a": "(a+)+$"}}, "catastrophic"),
        ("trajectory", {"order": "search"}, "order must be a list of tool names"),
        ("llm_judge", {}, "llm_judge evaluators need rubric"),
        ("llm_judge", {"rubric": "x", "max_trajectory_chars": 10}, "max_trajectory_chars must be at least 1000"),
        ("webhook", {}, "webhook evaluators need url"),
        ("webhook", {"url": "ftp://x"}, "URL refused"),
        ("webhook", {"url": "https://x.example.com", "timeout_seconds": 90}, "timeout_seconds must be at most 60"),
        ("human", {"scale": "1-10"}, "scale must be one of 0-1, pass-fail, 1-5"),
        ("sentiment", {}, "unknown evaluator kind 'sentiment'"),
    ],
)
def test_bad_configurations_say_what_is_wrong(kind, config, message):
    with pytest.raises(InvalidRequest, match=message.replace("(", r"\(").replace("+", r"\+").replace("$", r"\$")):
        validate_config(kind, config)


def test_configurations_get_their_defaults_and_every_example_is_valid():
    assert validate_config("exact_match", {}) == {"case_sensitive": True, "strip": True}
    assert validate_config("llm_judge", {"rubric": "Be right."}) == {
        "model": "mistral-small-latest",
        "rubric": "Be right.",
        "include_trajectory": True,
        "max_trajectory_chars": 20000,
    }
    assert validate_config("webhook", {"url": "https://hooks.example.com/x"})["timeout_seconds"] == 10
    assert validate_config("human", {}) == {"scale": "0-1"}
    for kind in kinds():
        validate_config(kind.name, kind.example)


def test_passing_is_at_or_above_the_threshold(tenant):
    evaluator = make_evaluator(tenant.project, "correctness", "exact_match", {"strip": True}, threshold=0.8)
    spec = spec_of(evaluator)
    assert spec == {
        "id": evaluator.pk,
        "name": "correctness",
        "kind": "exact_match",
        "config": {"strip": True},
        "threshold": 0.8,
    }
    assert passed(spec, 0.8) is True and passed(spec, 0.79) is False and passed(spec, None) is None


# --- One object per kind ---------------------------------------------------------------------------


def test_every_kind_of_the_model_has_one_registered_object_whose_example_passes_its_cleaning():
    registered = Counter(kind.name for kind in kinds())
    assert registered == Counter(Evaluator.Kind.values)
    for name in Evaluator.Kind.values:
        kind = get_kind(name)
        assert kind.help, f"{name} has no help for the pages"
        assert set(kind.example) <= set(kind.settings), f"{name}'s example uses a setting it does not take"
        cleaned = validate_config(name, kind.example)
        assert validate_config(name, cleaned) == cleaned, f"{name}'s cleaned example does not clean to itself"


def test_a_kind_cannot_be_registered_twice():
    class Again(EvaluatorKind):
        name = "regex"

    with pytest.raises(ValueError, match="registered twice"):
        register(Again)
    assert type(get_kind("regex")).__name__ == "Regex"
