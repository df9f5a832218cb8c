"""The numbers of an ended experiment, from its result rows: each metric's mean with a
95% bootstrap interval (``evals.stats``, seeded by the experiment, so the same results
always give the same interval) and pass rate, the pass rate over every evaluator,
latency percentiles, cost and error rate. Pure: it reads and writes nothing."""

from __future__ import annotations

from decimal import Decimal

from evals import stats
from evals.models import ExperimentResult


def summarize(specs: list[dict], results: list[dict], *, seed: int = 0) -> dict:
    """Each metric's mean with its 95% interval and pass rate, the share of items that
    passed every evaluator, latency percentiles, cost and error rate, from result rows
    (``status``, ``scores``, ``latency_ms``, ``cost``).

    An item whose evaluator could not score (value None) is left out of that metric's
    mean and counted in ``unscored``; an item whose run failed is scored like any other
    (rules give it 0), so failures pull the numbers down rather than vanish."""
    finished = [
        row for row in results if row["status"] in (ExperimentResult.Status.DONE, ExperimentResult.Status.ERROR)
    ]
    metrics: dict[str, dict] = {}
    thresholds = {spec["name"]: spec.get("threshold", 0.5) for spec in specs}
    names = list(thresholds)
    for row in finished:  # reported scores with no evaluator of that name
        for name in row["scores"] or {}:
            if name not in thresholds:
                thresholds[name] = None
                names.append(name)
    for index, name in enumerate(names):
        values = [row["scores"][name] for row in finished if (row["scores"] or {}).get(name) is not None]
        estimate = stats.bootstrap_mean([float(v) for v in values], seed=seed * 1000 + index)
        threshold = thresholds[name]
        metrics[name] = {
            **estimate.as_dict(),
            "pass_rate": (sum(1 for v in values if v >= threshold) / len(values))
            if values and threshold is not None
            else None,
            "threshold": threshold,
            "unscored": len(finished) - len(values),
        }
    gated = [name for name in names if thresholds[name] is not None]
    # An item counts toward the pass rate only when every gated metric scored it: a rate
    # over items nobody could score would be a number made of no data.
    every = [
        all(row["scores"][name] >= thresholds[name] for name in gated)
        for row in finished
        if all((row["scores"] or {}).get(name) is not None for name in gated)
    ]
    latencies = sorted(row["latency_ms"] for row in finished if row["latency_ms"] is not None)
    cost = sum((Decimal(row["cost"] or 0) for row in finished), Decimal(0))
    return {
        "metrics": metrics,
        "items": len(finished),
        "pass_rate": (sum(every) / len(every)) if every and gated else None,
        "error_rate": (sum(1 for row in finished if row["status"] == ExperimentResult.Status.ERROR) / len(finished))
        if finished
        else None,
        "latency_ms": {
            "p50": stats.percentile(latencies, 0.5),
            "p95": stats.percentile(latencies, 0.95),
            "mean": (sum(latencies) / len(latencies)) if latencies else None,
        },
        "completion": (len(finished) / len(results)) if results else None,
        "cost": str(cost),
        "cost_per_item": str((cost / len(finished)).quantize(Decimal("0.000000001"))) if finished else None,
    }
