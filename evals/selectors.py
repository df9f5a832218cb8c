"""Reads of evaluations, always scoped to the project: experiments, a dataset's
leaderboard, the running numbers of an experiment, and two experiments item by item."""

from __future__ import annotations

from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any

from django.db.models import QuerySet

from agentops.errors import NotFound
from evals import stats
from evals.models import Dataset, Experiment, ExperimentResult
from evals.services.gate import metric_value

LEADERBOARD_SORTS = {"created", "cost", "latency", "pass_rate", "name"}


def experiment_list(*, project, dataset_id: int | None = None, branch: str = "", status: str = "") -> QuerySet:
    queryset = Experiment.objects.filter(project=project).select_related("dataset", "dataset_version")
    if dataset_id is not None:
        queryset = queryset.filter(dataset_id=dataset_id)
    if branch:
        queryset = queryset.filter(branch=branch)
    if status:
        queryset = queryset.filter(status=status)
    return queryset


def experiment_detail(*, project, experiment_id: int) -> Experiment:
    experiment = (
        Experiment.objects.select_related("dataset", "dataset_version", "agent_version__agent")
        .filter(project=project, pk=experiment_id)
        .first()
    )
    if experiment is None:
        raise NotFound("experiment not found")
    return experiment


def dataset_detail(*, project, dataset_id: int) -> Dataset:
    dataset = Dataset.objects.filter(project=project, pk=dataset_id).first()
    if dataset is None:
        raise NotFound("dataset not found")
    return dataset


def result_list(*, experiment: Experiment) -> QuerySet[ExperimentResult]:
    return ExperimentResult.objects.filter(experiment=experiment).select_related("item").order_by("id")


def metric_names(experiment: Experiment) -> list[str]:
    names = [spec["name"] for spec in experiment.evaluators]
    names += [name for name in experiment.summary.get("metrics", {}) if name not in names]
    return names


def running_means(experiment: Experiment) -> dict[str, dict[str, Any]]:
    """Means and counts so far (no intervals: those come when the experiment ends)."""
    if experiment.ended and experiment.summary.get("metrics"):
        return experiment.summary["metrics"]
    rows = ExperimentResult.objects.filter(
        experiment=experiment, status__in=(ExperimentResult.Status.DONE, ExperimentResult.Status.ERROR)
    ).values_list("scores", flat=True)
    sums: dict[str, list[float]] = {name: [] for name in metric_names(experiment)}
    for scores in rows:
        for name, value in (scores or {}).items():
            if value is not None:
                sums.setdefault(name, []).append(float(value))
    return {
        name: {
            "mean": (sum(values) / len(values)) if values else None,
            "ci_low": None,
            "ci_high": None,
            "n": len(values),
        }
        for name, values in sums.items()
    }


@dataclass
class LeaderRow:
    experiment: Experiment
    metrics: dict[str, dict]
    pass_rate: float | None
    cost: Decimal
    latency_p50: float | None
    latency_p95: float | None


def leaderboard(
    *, dataset: Dataset, sort: str = "", metric: str = "", branch: str = "", agent: str = "", model: str = ""
) -> tuple[list[str], list[LeaderRow]]:
    """The dataset's ended experiments with each metric's mean and interval, pass rate,
    cost, latency and date, sorted by ``sort`` ("created", "cost", "latency", "pass_rate",
    "name") or by a metric's name (best first), filtered by branch, agent and model."""
    queryset = Experiment.objects.filter(
        dataset=dataset, status__in=(Experiment.Status.SUCCEEDED, Experiment.Status.CANCELLED)
    ).select_related("dataset_version")
    if branch:
        queryset = queryset.filter(branch=branch)
    if agent:
        queryset = queryset.filter(agent_name=agent)
    if model:
        queryset = queryset.filter(model=model)
    experiments = list(queryset.order_by("-created_at", "-id")[:500])
    # The evaluators' order as the experiments list them (a summary's jsonb keys come
    # back in PostgreSQL's order, shortest first), then any reported-only metrics.
    ordered = [spec["name"] for experiment in experiments for spec in experiment.evaluators]
    reported = [name for experiment in experiments for name in experiment.summary.get("metrics", {})]
    names = [name for name in dict.fromkeys([*ordered, *reported]) if name in set(reported)]
    rows = [
        LeaderRow(
            experiment=experiment,
            metrics=experiment.summary.get("metrics", {}),
            pass_rate=experiment.summary.get("pass_rate"),
            cost=experiment.total_cost,
            latency_p50=(experiment.summary.get("latency_ms") or {}).get("p50"),
            latency_p95=(experiment.summary.get("latency_ms") or {}).get("p95"),
        )
        for experiment in experiments
    ]
    key = sort or (metric if metric else "")
    if key in names and key not in LEADERBOARD_SORTS:  # the built-in columns keep their meaning
        rows.sort(key=lambda row: _none_last(row.metrics.get(key, {}).get("mean")), reverse=True)
    elif key == "pass_rate":
        rows.sort(key=lambda row: _none_last(row.pass_rate), reverse=True)
    elif key == "cost":
        rows.sort(key=lambda row: row.cost)
    elif key == "latency":
        rows.sort(key=lambda row: (row.latency_p50 is None, row.latency_p50 or 0))
    elif key == "name":
        rows.sort(key=lambda row: row.experiment.name.lower())
    return names, rows


def _none_last(value: float | None) -> float:
    return float("-inf") if value is None else value


@dataclass
class ItemChange:
    key: str
    input: Any
    a: ExperimentResult | None
    b: ExperimentResult | None
    deltas: dict[str, float | None] = field(default_factory=dict)
    change: str = "same"  # improved, regressed, mixed, same, only_a, only_b


@dataclass
class MetricChange:
    name: str
    a: float | None
    b: float | None
    difference: stats.Estimate
    significant: bool
    direction: str  # improved, regressed, unchanged


def compare_experiments(*, a: Experiment, b: Experiment) -> tuple[list[MetricChange], list[ItemChange]]:
    """Experiment ``b`` against ``a``: per metric, the difference of means with a 95%
    paired-bootstrap interval over the items both scored (matched by item key), called
    significant only when the interval leaves out zero; per item, each metric's change,
    regressions first."""
    results_a = {row.item_key: row for row in result_list(experiment=a)}
    results_b = {row.item_key: row for row in result_list(experiment=b)}
    names = [name for name in metric_names(b) if name in metric_names(a)]
    metrics = []
    for index, name in enumerate(names):
        pairs = [
            (results_a[key].scores[name], results_b[key].scores[name])
            for key in results_a.keys() & results_b.keys()
            if (results_a[key].scores or {}).get(name) is not None
            and (results_b[key].scores or {}).get(name) is not None
        ]
        pairs.sort()
        difference = stats.bootstrap_difference(
            [x for x, _ in pairs], [y for _, y in pairs], paired=True, seed=a.pk * 7919 + b.pk * 31 + index
        )
        is_significant = stats.significant(difference)
        direction = "unchanged"
        if is_significant:
            direction = "improved" if difference.mean > 0 else "regressed"
        metrics.append(
            MetricChange(
                name=name,
                a=metric_value(a.summary, name) if a.summary.get("metrics") else None,
                b=metric_value(b.summary, name) if b.summary.get("metrics") else None,
                difference=difference,
                significant=is_significant,
                direction=direction,
            )
        )
    items = []
    for key in list(dict.fromkeys([*results_a, *results_b])):
        row_a, row_b = results_a.get(key), results_b.get(key)
        change = ItemChange(key=key, input=(row_a or row_b).item.input, a=row_a, b=row_b)
        if row_a is None or row_b is None:
            change.change = "only_b" if row_a is None else "only_a"
        else:
            ups = downs = 0
            for name in names:
                x, y = (row_a.scores or {}).get(name), (row_b.scores or {}).get(name)
                change.deltas[name] = None if x is None or y is None else y - x
                if change.deltas[name]:
                    ups += change.deltas[name] > 0
                    downs += change.deltas[name] < 0
            change.change = "mixed" if ups and downs else "improved" if ups else "regressed" if downs else "same"
        items.append(change)
    order = {"regressed": 0, "mixed": 1, "improved": 2, "only_a": 3, "only_b": 4, "same": 5}
    items.sort(key=lambda change: order[change.change])
    return metrics, items


def dataset_lookup(*, project, value) -> Dataset:
    """The project's dataset named ``value`` (a text) or with id ``value`` (a number);
    NotFound otherwise."""
    from agentops.api.lookup import by_name_or_id

    return by_name_or_id(Dataset.objects.filter(project=project), value, "dataset")


def automatic_evaluators(*, project) -> QuerySet:
    """The project's evaluators in use that score without a person, by name: what an
    experiment, an evaluation job or an online rule may use (people score runs through
    annotation queues)."""
    from evals.models import Evaluator

    return Evaluator.objects.filter(project=project, archived=False).exclude(kind=Evaluator.Kind.HUMAN).order_by("name")


def evaluator_lookup(*, project, value):
    """The project's evaluator named ``value`` (or with id ``value``); NotFound otherwise."""
    from agentops.api.lookup import by_name_or_id
    from evals.models import Evaluator

    return by_name_or_id(Evaluator.objects.filter(project=project), value, "evaluator")


def dataset_item_count(*, dataset: Dataset, version_number: int | None = None) -> int:
    """How many items the dataset's version ``version_number`` (the latest by default) holds."""
    from evals.models import DatasetItem

    return DatasetItem.objects.filter(dataset=dataset).in_version(version_number or dataset.latest_version).count()
