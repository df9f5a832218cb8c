"""Results reported from outside, for experiments of kind ``external``: a harness posts
each item's output (and its own scores, cost, latency, tokens, steps) with
``results_report``; the experiment's evaluators then score the outputs on a worker, as
for items the platform ran (``item_scoring``).

A request is all or nothing: every entry is checked first (``REPORTED_FIELDS``, listed in
docs/evaluations.md) and one bad entry refuses the whole request with a 400 naming it.
Reporting an item again replaces it (a harness may retry): it leaves the running totals
and is scored anew. The experiment ends when every item is reported and scored, or when
its harness completes it (``ending``).
"""

from __future__ import annotations

from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest
from agentops.jsonsafe import MAX_BIGINT, MAX_MONEY, storage_problem, unknown_fields
from evals.models import Experiment, ExperimentResult
from evals.services.evaluators import RESERVED_NAMES
from evals.services.experiments.item_scoring import enqueue_scoring
from evals.services.experiments.totals import uncount_finished

MAX_REPORTED_RESULTS = 1000


@dataclass
class Reported:
    key: str
    output: Any
    scores: dict[str, float]
    cost: Decimal
    latency_ms: int | None
    tokens: int
    error: str
    steps: list | None
    tool_calls: list | None


def results_report(*, experiment: Experiment, results: list[dict]) -> int:
    """Store outputs an outside harness reports for items of an external experiment
    (all or none: any bad entry refuses the whole request, naming it), then score them
    with the experiment's evaluators on a worker. Reporting an item again replaces it
    (a harness may retry). The experiment ends when every item is reported, or with
    ``experiment_complete``."""
    if experiment.kind != Experiment.Kind.EXTERNAL:
        raise InvalidRequest("results are reported only to external experiments; this one runs its agent itself")
    if not isinstance(results, list) or not results:
        raise InvalidRequest("send a non-empty list of results")
    if len(results) > MAX_REPORTED_RESULTS:
        raise InvalidRequest(f"send at most {MAX_REPORTED_RESULTS} results per request")
    parsed = [_parse_reported(index, entry) for index, entry in enumerate(results)]
    keys = [entry.key for entry in parsed]
    if len(set(keys)) != len(keys):
        raise InvalidRequest("an item is reported twice in one request")
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if experiment.ended:
            raise Conflict(f"the experiment already {experiment.status}; it takes no more results")
        rows = {
            row.item_key: row
            for row in ExperimentResult.objects.select_for_update().filter(experiment=experiment, item_key__in=keys)
        }
        unknown = [key for key in keys if key not in rows]
        if unknown:
            raise InvalidRequest(
                f"not items of this experiment's dataset version: {', '.join(unknown[:10])}",
                details={"unknown": unknown},
            )
        if experiment.status == Experiment.Status.QUEUED:
            experiment.status = Experiment.Status.RUNNING
            experiment.started_at = timezone.now()
            experiment.save(update_fields=["status", "started_at", "updated_at"])
        now = timezone.now()
        to_score = []
        for entry in parsed:
            row = rows[entry.key]
            if row.status in (ExperimentResult.Status.DONE, ExperimentResult.Status.ERROR):
                uncount_finished(experiment, row)
            row.output = entry.output
            row.cost = entry.cost
            row.latency_ms = entry.latency_ms
            row.tokens = entry.tokens
            row.error = entry.error
            row.reported = {"scores": entry.scores, "steps": entry.steps, "tool_calls": entry.tool_calls}
            row.status = ExperimentResult.Status.SCORING
            row.started_at = row.started_at or now
            row.ended_at = None
            row.updated_at = now
            to_score.append(row)
        ExperimentResult.objects.bulk_update(
            to_score,
            [
                "output",
                "cost",
                "latency_ms",
                "tokens",
                "error",
                "reported",
                "status",
                "started_at",
                "ended_at",
                "updated_at",
            ],
        )
        ids = [row.pk for row in to_score]
        organization_id = experiment.organization_id
        transaction.on_commit(lambda: enqueue_scoring(organization_id, ids))
    return len(parsed)


# The fields of one reported result (docs/evaluations.md).
REPORTED_FIELDS = ("item", "output", "scores", "cost", "latency_ms", "tokens", "error", "steps", "tool_calls")


def _parse_reported(index: int, entry: Any) -> Reported:
    where = f"results[{index}]"
    if not isinstance(entry, dict):
        raise InvalidRequest(f"{where} must be an object")
    if problem := unknown_fields(entry, REPORTED_FIELDS):
        raise InvalidRequest(f"{where}: {problem}")
    key = entry.get("item")
    if not isinstance(key, str) or not key:
        raise InvalidRequest(f"{where}.item must be the item's key (a string)")
    if "output" not in entry and not entry.get("error"):
        raise InvalidRequest(f"{where} needs an output (or an error)")
    scores = entry.get("scores") or {}
    if not isinstance(scores, dict):
        raise InvalidRequest(f"{where}.scores must be an object of metric: score")
    for name, value in scores.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
            raise InvalidRequest(f"{where}.scores.{name} must be a number from 0 to 1")
        if not isinstance(name, str) or not 0 < len(name) <= 64:
            raise InvalidRequest(f"{where}.scores: metric names are 1 to 64 characters")
        if name in RESERVED_NAMES:
            raise InvalidRequest(f"{where}.scores: {name!r} is the name of an experiment-wide metric")
    try:
        cost = Decimal(str(entry.get("cost", 0) or 0))
    except InvalidOperation as exc:
        raise InvalidRequest(f"{where}.cost must be a number") from exc
    if not cost.is_finite() or not 0 <= cost < MAX_MONEY:
        raise InvalidRequest(f"{where}.cost must be a number from 0 to under {MAX_MONEY:,} (US dollars)")
    latency = entry.get("latency_ms")
    if latency is not None and (
        not isinstance(latency, int) or isinstance(latency, bool) or not 0 <= latency <= MAX_BIGINT
    ):
        raise InvalidRequest(f"{where}.latency_ms must be a whole number of at least 0")
    tokens = entry.get("tokens", 0) or 0
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not 0 <= tokens <= MAX_BIGINT:
        raise InvalidRequest(f"{where}.tokens must be a whole number of at least 0")
    for field in ("output", "error", "steps", "tool_calls", "scores"):
        if problem := storage_problem(entry.get(field)):
            raise InvalidRequest(f"{where}.{field} cannot be stored: {problem}")
    error = entry.get("error") or ""
    if not isinstance(error, str):
        raise InvalidRequest(f"{where}.error must be a string")
    steps, tool_calls = entry.get("steps"), entry.get("tool_calls")
    for field, value in (("steps", steps), ("tool_calls", tool_calls)):
        if value is not None and not isinstance(value, list):
            raise InvalidRequest(f"{where}.{field} must be a list")
    return Reported(key, entry.get("output"), scores, cost, latency, tokens, error[:5000], steps, tool_calls)
