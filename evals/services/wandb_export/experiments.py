"""An ended experiment's metrics logged to Weights & Biases: the W&B project is the
AgentOps project's slug, the run (id ``agentops-experiment-<id>``) is named after the
experiment and grouped by dataset."""

from __future__ import annotations

import logging

from django.utils import timezone

from evals.models import Experiment, ExperimentResult, WandbExport
from evals.services.wandb_export.client import Mode, WandbRefused, credentials, logging_mode, record, start_run

logger = logging.getLogger(__name__)


def wandb_payload(experiment: Experiment) -> tuple[dict, dict]:
    """The run's config and summary: each metric's mean, interval and pass rate, and
    the experiment's pass rate, error rate, cost and latency."""
    config = {
        "agentops_experiment": experiment.pk,
        "dataset": experiment.dataset.name,
        "dataset_version": experiment.dataset_version.number,
        "agent": experiment.agent_name,
        "agent_version": experiment.agent_version_label,
        "model": experiment.model,
        "parameters": experiment.parameters,
        "evaluators": [spec["name"] for spec in experiment.evaluators],
        "branch": experiment.branch,
        "commit": experiment.commit,
    }
    summary: dict = {}
    for name, metric in experiment.summary.get("metrics", {}).items():
        for field in ("mean", "ci_low", "ci_high", "pass_rate", "n"):
            if metric.get(field) is not None:
                summary[f"{name}/{field}"] = metric[field]
    for field in ("pass_rate", "error_rate", "completion"):
        if experiment.summary.get(field) is not None:
            summary[field] = experiment.summary[field]
    latency = experiment.summary.get("latency_ms") or {}
    for field in ("p50", "p95"):
        if latency.get(field) is not None:
            summary[f"latency_ms/{field}"] = latency[field]
    summary["cost"] = float(experiment.total_cost)
    summary["items"] = experiment.item_count
    return config, summary


def log_experiment(*, experiment_id: int, final: bool = True) -> bool:
    """Log the ended experiment to W&B if the organization has a key and the project logs
    experiments; True when logged. A failure is recorded on its ``WandbExport`` row (final
    when ``final``, else the task retries) and raised, except a refused setting, which no
    retry fixes."""
    experiment = (
        Experiment.objects.select_related("project__organization", "dataset", "dataset_version")
        .filter(pk=experiment_id)
        .first()
    )
    if experiment is None or not experiment.ended:
        return False
    if logging_mode(experiment.project) == Mode.OFF:
        return False
    try:
        saved = credentials(experiment.project.organization)
    except WandbRefused as exc:
        logger.error("experiment %s: not logged to W&B: %s", experiment_id, exc)
        record(
            project=experiment.project, experiment_id=experiment.pk, status=WandbExport.Status.FAILED, error=str(exc)
        )
        return False
    if saved is None:
        return False
    started = timezone.now()
    try:
        _log(experiment, saved)
    except Exception as exc:
        status = WandbExport.Status.FAILED if final else WandbExport.Status.QUEUED
        record(
            project=experiment.project, experiment_id=experiment.pk, status=status, error=f"{type(exc).__name__}: {exc}"
        )
        raise
    record(project=experiment.project, experiment_id=experiment.pk, status=WandbExport.Status.LOGGED, logged_at=started)
    return True


def _log(experiment: Experiment, saved: tuple[str, str]) -> None:
    import wandb

    config, summary = wandb_payload(experiment)
    run = start_run(
        credentials=saved,
        run_id=f"agentops-experiment-{experiment.pk}",
        project=experiment.project.slug,
        name=experiment.name,
        group=experiment.dataset.name,
        job_type="evaluation",
        config=config,
    )
    try:
        names = [spec["name"] for spec in experiment.evaluators]
        rows = ExperimentResult.objects.filter(experiment=experiment).order_by("id").values_list("item_key", "scores")
        table = wandb.Table(columns=["item", *names])
        for key, scores in rows[:10_000]:
            table.add_data(key, *[(scores or {}).get(name) for name in names])
        run.log({"results": table})
        run.summary.update(summary)
    finally:
        run.finish()
