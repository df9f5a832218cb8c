"""The human evaluator kind: people score runs in annotation queues, on the evaluator's
scale ("0-1", "pass-fail" or "1-5"), and ``normalise_human`` turns their score into
0..1. Machines never score it: ``evaluate`` gives no score and says so.
"""

from __future__ import annotations

from typing import Any

from agentops.errors import InvalidRequest
from evals.scoring.config import ConfigReader
from evals.scoring.registry import EvaluatorKind, register
from evals.scoring.subject import Outcome, Subject
from evals.scoring.values import number_in

HUMAN_SCALES = ("0-1", "pass-fail", "1-5")
NOT_RUN_BY_MACHINES = "scored by people"


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
    number = number_in(raw)
    if scale == "1-5":
        if number is None or number != int(number) or not 1 <= number <= 5:
            raise InvalidRequest("a score on the 1-5 scale is a whole number from 1 to 5")
        return (number - 1) / 4
    if number is None or not 0 <= number <= 1:
        raise InvalidRequest("a score is a number from 0 to 1")
    return number


@register
class Human(EvaluatorKind):
    name = "human"
    settings = ("scale", "instructions")
    help = "People score runs in annotation queues, on a 0-1, pass/fail or 1-5 scale."
    example = {"scale": "1-5", "instructions": "How helpful was the answer?"}

    def clean(self, c: ConfigReader) -> None:
        scale = c.raw.get("scale", "0-1")
        if scale not in HUMAN_SCALES:
            raise InvalidRequest(f"scale must be one of {', '.join(HUMAN_SCALES)}")
        c.cleaned["scale"] = scale
        c.text("instructions", max_length=10_000)

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        return Outcome(value=None, error=NOT_RUN_BY_MACHINES)
