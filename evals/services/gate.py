"""The quality gate CI pipelines call: conditions on an ended experiment's metrics,
absolute or relative to a baseline experiment (by id, or the latest on a branch)."""

from __future__ import annotations

import operator
from decimal import Decimal
from typing import Any

from agentops.errors import Conflict, InvalidRequest
from agentops.jsonsafe import finite_number, unknown_fields
from evals.models import Experiment

COMPARATORS = {
    ">=": operator.ge,
    ">": operator.gt,
    "<=": operator.le,
    "<": operator.lt,
    "==": operator.eq,
}
ALIASES = {"gte": ">=", "gt": ">", "lte": "<=", "lt": "<", "eq": "=="}
SUMMARY_METRICS = ("pass_rate", "error_rate", "completion", "cost", "cost_per_item", "latency_p50", "latency_p95")
MAX_CONDITIONS = 50


def metric_value(summary: dict, metric: str) -> float | None:
    """A metric of an experiment's summary: an evaluator's mean score, its pass rate
    (``<name>.pass_rate``), or one of SUMMARY_METRICS. KeyError when it has none."""
    metrics = summary.get("metrics", {})
    if metric in metrics:
        return metrics[metric]["mean"]
    if metric.endswith(".pass_rate") and metric.removesuffix(".pass_rate") in metrics:
        return metrics[metric.removesuffix(".pass_rate")]["pass_rate"]
    if metric in ("cost", "cost_per_item"):
        value = summary.get(metric)
        return float(Decimal(value)) if value is not None else None
    if metric in ("latency_p50", "latency_p95"):
        return (summary.get("latency_ms") or {}).get(metric.removeprefix("latency_"))
    if metric in ("pass_rate", "error_rate", "completion"):
        return summary.get(metric)
    raise KeyError(metric)


def known_metrics(summary: dict) -> list[str]:
    names = list(summary.get("metrics", {}))
    return names + [f"{name}.pass_rate" for name in names] + list(SUMMARY_METRICS)


def find_baseline(*, experiment: Experiment, baseline: dict | None) -> Experiment | None:
    """The experiment to compare with: ``{"experiment": id}`` (same project), or
    ``{"branch": "main"}``: the latest succeeded experiment on that branch over the same
    dataset, started before this one."""
    if not baseline:
        return None
    if not isinstance(baseline, dict):
        raise InvalidRequest('baseline must be {"experiment": <id>} or {"branch": "<name>"}')
    if problem := unknown_fields(baseline, ("experiment", "branch")):
        raise InvalidRequest(f"baseline: {problem}")
    if "experiment" in baseline:
        wanted = baseline["experiment"]
        if not isinstance(wanted, int) or isinstance(wanted, bool):
            raise InvalidRequest("baseline.experiment is an experiment's id (a number)")
        found = Experiment.objects.filter(project=experiment.project, pk=wanted).first()
        if found is None:
            raise InvalidRequest(f"baseline experiment {wanted} not found in this project")
        if found.pk == experiment.pk:
            raise InvalidRequest("an experiment cannot be its own baseline")
        if not found.ended:
            raise Conflict(f"the baseline experiment {wanted} is {found.status}; compare with one that has ended")
        if found.dataset_id != experiment.dataset_id:
            raise InvalidRequest(f"the baseline experiment {wanted} ran on another dataset")
        return found
    if "branch" in baseline:
        return (
            Experiment.objects.filter(
                project=experiment.project,
                dataset=experiment.dataset,
                branch=str(baseline["branch"]),
                status=Experiment.Status.SUCCEEDED,
                created_at__lt=experiment.created_at,
            )
            .exclude(pk=experiment.pk)
            .order_by("-created_at", "-id")
            .first()
        )
    raise InvalidRequest('baseline must be {"experiment": <id>} or {"branch": "<name>"}')


def gate_check(*, experiment: Experiment, conditions: list[dict], baseline: dict | None = None) -> dict[str, Any]:
    """Evaluate ``conditions`` (each {metric, comparator, threshold, relative?}) on an
    ended experiment. A relative condition compares (this − baseline) with its threshold.
    A condition whose value is missing (no scores) fails: a gate never passes on no data."""
    if not experiment.ended:
        raise Conflict(f"the experiment is {experiment.status}; call the gate once it has ended")
    if not isinstance(conditions, list) or not conditions:
        raise InvalidRequest("give at least one condition")
    if len(conditions) > MAX_CONDITIONS:
        raise InvalidRequest(f"at most {MAX_CONDITIONS} conditions")
    parsed = [_parse(index, condition) for index, condition in enumerate(conditions)]
    base = find_baseline(experiment=experiment, baseline=baseline)
    if any(condition["relative"] for condition in parsed) and base is None:
        raise InvalidRequest(
            "a relative condition needs a baseline, and none was found"
            + (f" (no succeeded experiment on branch {baseline['branch']!r} before this one)" if baseline else "")
        )
    answers = []
    for condition in parsed:
        metric = condition["metric"]
        try:
            actual = metric_value(experiment.summary, metric)
        except KeyError:
            raise InvalidRequest(
                f"unknown metric {metric!r}; this experiment has: {', '.join(known_metrics(experiment.summary))}"
            ) from None
        try:
            baseline_value = metric_value(base.summary, metric) if base is not None else None
        except KeyError:  # the baseline had no such metric: a relative condition on it fails
            baseline_value = None
        compared = actual
        if condition["relative"]:
            compared = None if actual is None or baseline_value is None else actual - baseline_value
        ok = compared is not None and COMPARATORS[condition["comparator"]](compared, condition["threshold"])
        answers.append(
            {
                "metric": metric,
                "comparator": condition["comparator"],
                "threshold": condition["threshold"],
                "relative": condition["relative"],
                "actual": compared,
                "value": actual,
                "baseline_value": baseline_value,
                "status": "passed" if ok else "failed",
            }
        )
    return {
        "status": "passed" if all(answer["status"] == "passed" for answer in answers) else "failed",
        "conditions": answers,
        "baseline": {"id": base.pk, "name": base.name, "branch": base.branch} if base is not None else None,
        "experiment": {"id": experiment.pk, "status": experiment.status},
    }


def _parse(index: int, condition: Any) -> dict:
    where = f"conditions[{index}]"
    if not isinstance(condition, dict):
        raise InvalidRequest(f"{where} must be an object with metric, comparator and threshold")
    if problem := unknown_fields(condition, ("metric", "comparator", "threshold", "relative")):
        raise InvalidRequest(f"{where}: {problem}")
    metric = condition.get("metric")
    if not isinstance(metric, str) or not metric:
        raise InvalidRequest(f"{where}.metric must be a metric's name")
    comparator = ALIASES.get(condition.get("comparator"), condition.get("comparator"))
    if comparator not in COMPARATORS:
        raise InvalidRequest(f"{where}.comparator must be one of {', '.join(COMPARATORS)} (or gte, gt, lte, lt, eq)")
    threshold = condition.get("threshold")
    if not isinstance(threshold, int | float) or isinstance(threshold, bool) or not finite_number(threshold):
        raise InvalidRequest(f"{where}.threshold must be a finite number")
    relative = condition.get("relative", False)
    if not isinstance(relative, bool):
        raise InvalidRequest(f"{where}.relative must be true or false")
    return {"metric": metric, "comparator": comparator, "threshold": float(threshold), "relative": relative}
