"""An ended experiment's metrics logged to Weights & Biases, when the organization
saved a W&B API key (Secrets page, provider "wandb"; its base URL, if any, points at a
self-hosted W&B server).

Uses the ``wandb`` SDK, a runtime requirement (imported here only, when an experiment
is logged: it is slow to import). The W&B project is the AgentOps project's slug, the run is named
after the experiment and grouped by dataset. ``settings.WANDB_MODE`` ("online" by
default; tests use "offline", which writes the run to disk through the real SDK).
"""

from __future__ import annotations

import logging

from django.conf import settings

from agentops.services.secrets import provider_credentials
from evals.models import Experiment, ExperimentResult

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


def log_experiment(*, experiment_id: int) -> bool:
    """Log the experiment to W&B if the organization has a key; True when logged."""
    experiment = (
        Experiment.objects.select_related("project__organization", "dataset", "dataset_version")
        .filter(pk=experiment_id)
        .first()
    )
    if experiment is None or not experiment.ended:
        return False
    credentials = provider_credentials(organization=experiment.project.organization, provider="wandb")
    if credentials is None:
        return False
    try:
        import wandb
    except ImportError:
        logger.error(
            "experiment %s: a W&B key is saved but the wandb package is missing: pip install -r requirements.txt",
            experiment_id,
        )
        return False
    api_key, base_url = credentials
    config, summary = wandb_payload(experiment)
    options = {"mode": settings.WANDB_MODE, "api_key": api_key, "silent": True}
    if base_url:
        options["base_url"] = base_url
    run = wandb.init(
        project=experiment.project.slug,
        name=experiment.name,
        group=experiment.dataset.name,
        job_type="evaluation",
        config=config,
        dir=str(settings.WANDB_DIR),
        settings=wandb.Settings(**options),
        reinit="create_new",
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
    return True
