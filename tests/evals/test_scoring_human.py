"""The human evaluator kind (``evals.scoring.human``): machines never score it, and
people's scores are normalised to 0..1."""

from __future__ import annotations

import pytest

from agentops.errors import InvalidRequest
from evals.scoring.human import normalise_human
from evals.scoring.subject import Outcome
from tests.evals.scoring_helpers import score, subject


def test_human_evaluators_are_not_run_by_evaluate():
    outcome = score("human", {"scale": "1-5"}, subject("x"))
    assert outcome == Outcome(value=None, error="scored by people")


def test_human_scores_are_normalised_to_0_1():
    assert normalise_human({"scale": "1-5"}, 1) == 0.0 and normalise_human({"scale": "1-5"}, "5") == 1.0
    assert normalise_human({"scale": "1-5"}, 4) == 0.75
    assert (
        normalise_human({"scale": "pass-fail"}, "pass") == 1.0 and normalise_human({"scale": "pass-fail"}, False) == 0
    )
    assert normalise_human({}, 0.3) == 0.3
    for config, raw in [({"scale": "1-5"}, 6), ({"scale": "1-5"}, 2.5), ({"scale": "pass-fail"}, "maybe"), ({}, 1.2)]:
        with pytest.raises(InvalidRequest):
            normalise_human(config, raw)
