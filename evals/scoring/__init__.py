"""Scoring one run (or one reported output) with one evaluator.

- ``subject``: what an evaluator looks at (``Subject``) and what it gives (``Outcome``);
- ``registry``: ``EvaluatorKind``, one object per kind registered under the string
  stored in ``Evaluator.kind``, and ``validate_config``, ``evaluate``, ``spec_of``,
  ``passed``, which look kinds up there and nowhere else;
- ``config`` and ``values``: reading a configuration, and values as rules read them;
- the families of kinds: ``rules``, ``trajectory``, ``judge`` (an LLM), ``webhook``
  (the organization's own service), ``human`` (annotation queues).

Callers import from this package; importing it registers every kind.
"""

from evals.scoring import human, judge, rules, trajectory, webhook  # noqa: F401 - registers every kind
from evals.scoring.human import normalise_human
from evals.scoring.registry import (
    EvaluatorKind,
    evaluate,
    get_kind,
    kinds,
    passed,
    reads_trajectory,
    spec_of,
    validate_config,
)
from evals.scoring.subject import Outcome, StepView, Subject, ToolCallView
from evals.scoring.webhook import new_webhook_secret

__all__ = [
    "EvaluatorKind",
    "Outcome",
    "StepView",
    "Subject",
    "ToolCallView",
    "evaluate",
    "get_kind",
    "kinds",
    "new_webhook_secret",
    "normalise_human",
    "passed",
    "reads_trajectory",
    "spec_of",
    "validate_config",
]
