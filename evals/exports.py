"""Leaderboards and experiment results as CSV and JSON Lines, written as they are read.

The pages (``evals.views.experiments``) and the API stream the same rows:

- ``experiment_results_rows(experiment)`` and ``leaderboard_rows(dataset, names, rows)``
  give one plain dict per line, nested the way JSON Lines shows it (``scores``,
  ``passed``, ``metrics``);
- ``write_jsonl(rows)`` and ``write_csv(rows, fieldnames)`` turn them into text lines;
  CSV flattens the nesting into dotted columns (``scores.correctness``,
  ``metrics.correctness.ci_low``) named by ``experiment_results_fieldnames`` and
  ``leaderboard_fieldnames``;
- ``streaming_response`` sends the lines, reading the database in batches inside the
  organization's scope (the body is consumed after the view has returned), through
  ``agentops.downloads``, the platform's one streamed download.

An experiment's results are read by id in batches of ``RESULTS_BATCH``, each batch its
own query, so a 50,000-item experiment never sits in memory and no database cursor
has to outlive a batch.
"""

from __future__ import annotations

from collections.abc import Iterable, Iterator
from typing import Any

from django.utils.text import slugify

from agentops.csvexport import csv_lines, plain_number, to_json
from agentops.downloads import streaming_download
from evals import selectors
from evals.models import Dataset, Experiment, ExperimentResult

RESULTS_BATCH = 500
FORMATS = {"csv": "text/csv; charset=utf-8", "jsonl": "application/x-ndjson"}
RESULT_COLUMNS_BEFORE = ["item_key", "status", "input", "expected", "output"]
RESULT_COLUMNS_AFTER = ["cost", "latency_ms", "tokens", "error", "run_id"]
LEADERBOARD_COLUMNS_BEFORE = [
    "experiment_id",
    "name",
    "status",
    "agent",
    "agent_version",
    "model",
    "branch",
    "commit",
    "dataset_version",
    "items",
]
LEADERBOARD_COLUMNS_AFTER = ["pass_rate", "cost", "cost_per_item", "latency_p50_ms", "latency_p95_ms", "created_at"]
METRIC_FIELDS = ("mean", "ci_low", "ci_high", "n", "pass_rate")


# -- rows ----------------------------------------------------------------------------------


def experiment_results_rows(experiment: Experiment, *, batch_size: int = RESULTS_BATCH) -> Iterator[dict[str, Any]]:
    """One dict per item of ``experiment``, in item order: key, status, input, expected,
    output, ``scores`` and ``passed`` per metric (None when not scored), cost (a decimal
    string), latency, tokens, error and run id. Call with the organization in scope."""
    names = selectors.metric_names(experiment)
    thresholds = {spec["name"]: spec.get("threshold") for spec in experiment.evaluators}
    last_id = 0
    while True:
        batch = list(
            ExperimentResult.objects.filter(experiment=experiment, pk__gt=last_id)
            .select_related("item")
            .order_by("id")[:batch_size]
        )
        if not batch:
            return
        for result in batch:
            scores = result.scores or {}
            yield {
                "item_key": result.item_key,
                "status": result.status,
                "input": result.item.input,
                "expected": result.item.expected,
                "output": result.output,
                "scores": {name: scores.get(name) for name in names},
                "passed": {name: score_passed(scores.get(name), thresholds.get(name)) for name in names},
                "cost": plain_number(result.cost),
                "latency_ms": result.latency_ms,
                "tokens": result.tokens,
                "error": result.error,
                "run_id": result.run_id,
            }
        if len(batch) < batch_size:
            return
        last_id = batch[-1].pk


def score_passed(value: float | None, threshold: float | None) -> bool | None:
    """Whether a score reaches its evaluator's threshold; None when unscored or when the
    metric has no threshold (a score reported from outside with no evaluator of its name)."""
    if value is None or threshold is None:
        return None
    return value >= threshold


def experiment_results_fieldnames(experiment: Experiment) -> list[str]:
    names = selectors.metric_names(experiment)
    return [
        *RESULT_COLUMNS_BEFORE,
        *(f"scores.{name}" for name in names),
        *(f"passed.{name}" for name in names),
        *RESULT_COLUMNS_AFTER,
    ]


def leaderboard_rows(dataset: Dataset, names: list[str], rows: Iterable) -> Iterator[dict[str, Any]]:
    """One dict per experiment of a leaderboard (``selectors.leaderboard``'s rows, in
    their order): who ran what, each metric of ``names`` with its interval and pass
    rate, the pass rate over every evaluator, cost, latency and date."""
    for row in rows:
        experiment = row.experiment
        summary = experiment.summary or {}
        yield {
            "experiment_id": experiment.pk,
            "name": experiment.name,
            "status": experiment.status,
            "dataset": dataset.name,
            "agent": experiment.agent_name,
            "agent_version": experiment.agent_version_label,
            "model": experiment.model,
            "branch": experiment.branch,
            "commit": experiment.commit,
            "dataset_version": experiment.dataset_version.number,
            "items": summary.get("items", experiment.completed_count),
            "metrics": {
                name: {field: (row.metrics.get(name) or {}).get(field) for field in METRIC_FIELDS} for name in names
            },
            "pass_rate": row.pass_rate,
            "cost": plain_number(row.cost),
            "cost_per_item": summary.get("cost_per_item"),
            "latency_p50_ms": row.latency_p50,
            "latency_p95_ms": row.latency_p95,
            "created_at": experiment.created_at.isoformat(),
        }


def leaderboard_fieldnames(names: list[str]) -> list[str]:
    return [
        *LEADERBOARD_COLUMNS_BEFORE,
        *(f"metrics.{name}.{field}" for name in names for field in METRIC_FIELDS),
        *LEADERBOARD_COLUMNS_AFTER,
    ]


# -- writers ---------------------------------------------------------------------------------


def write_jsonl(rows: Iterable[dict]) -> Iterator[str]:
    """Each row as one line of JSON."""
    for row in rows:
        yield to_json(row) + "\n"


def _lookup(row: dict, column: str) -> Any:
    """The value of a dotted column in a nested row: ``metrics.a.b.mean`` finds the
    metric named "a.b" too (the longest key that matches wins at each level)."""
    value: Any = row
    rest = column
    while rest:
        if not isinstance(value, dict):
            return None
        if rest in value:
            return value[rest]
        parts = rest.split(".")
        for cut in range(len(parts) - 1, 0, -1):
            key = ".".join(parts[:cut])
            if key in value:
                value, rest = value[key], ".".join(parts[cut:])
                break
        else:
            return None
    return value


def write_csv(rows: Iterable[dict], fieldnames: list[str]) -> Iterator[str]:
    """A header line, then one line per row with the ``fieldnames`` columns (dotted
    names reach into nested values). JSON values that are not text (objects, lists) are
    written as JSON; booleans as true/false; None as an empty cell; text that a
    spreadsheet would run is neutralised (``agentops.csvexport``, the one CSV writer)."""
    return csv_lines(fieldnames, ([_lookup(row, column) for column in fieldnames] for row in rows))


# -- the response ------------------------------------------------------------------------------


def streaming_response(request, lines: Iterable[str], *, organization, format: str, filename: str):
    """A download of ``lines`` (``format`` "csv" or "jsonl") named ``filename``."""
    return streaming_download(
        request, lines, organization=organization, content_type=FORMATS[format], filename=filename
    )


def export_lines(rows: Iterable[dict], *, format: str, fieldnames: list[str]) -> Iterator[str]:
    """``rows`` written as ``format`` ("csv" or "jsonl")."""
    return write_csv(rows, fieldnames) if format == "csv" else write_jsonl(rows)


def experiment_download(request, experiment: Experiment, *, format: str, organization):
    """An experiment's results as a streamed ``format`` ("csv" or "jsonl") download."""
    lines = export_lines(
        experiment_results_rows(experiment), format=format, fieldnames=experiment_results_fieldnames(experiment)
    )
    return streaming_response(
        request,
        lines,
        organization=organization,
        format=format,
        filename=f"experiment-{experiment.pk}-results.{format}",
    )


def leaderboard_download(request, dataset: Dataset, names: list[str], rows: list, *, format: str, organization):
    """A leaderboard (``selectors.leaderboard``'s names and rows) as a streamed download."""
    lines = export_lines(
        leaderboard_rows(dataset, names, rows), format=format, fieldnames=leaderboard_fieldnames(names)
    )
    return streaming_response(
        request,
        lines,
        organization=organization,
        format=format,
        filename=f"leaderboard-{slugify(dataset.name) or dataset.pk}.{format}",
    )
