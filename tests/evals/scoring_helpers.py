"""Shared by the scoring tests: a subject built from fields, and scoring it with a kind
and a configuration that first passes ``validate_config`` (as saving an evaluator does)."""

from __future__ import annotations

from evals.scoring.registry import evaluate, validate_config
from evals.scoring.subject import Outcome, Subject


def subject(output=None, expected=None, **fields) -> Subject:
    values = {"input": "question", "metadata": {}, "cost": None, "latency_ms": None, "tokens": 0, **fields}
    return Subject(output=output, expected=expected, **values)


def score(kind: str, config: dict, subject: Subject, threshold: float = 0.5) -> Outcome:
    spec = {"id": None, "name": "metric", "kind": kind, "config": validate_config(kind, config), "threshold": threshold}
    return evaluate(spec, subject, organization=None)
