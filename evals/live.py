"""Live updates of an experiment's page: after each scored item, the progress block
(counts, running means) and the item's row; when it ends, the progress block with the
final numbers. Sent only while a page of the project is open; pages that reconnect
re-render from PostgreSQL."""

from __future__ import annotations

import logging

from django.template.loader import render_to_string

from agentops import live
from evals import selectors
from evals.models import Experiment, ExperimentResult

logger = logging.getLogger(__name__)

EVENT = "experiment.progress"


def _context(experiment: Experiment) -> dict:
    project = experiment.project
    return {
        "organization": project.organization,
        "project": project,
        "experiment": experiment,
        "metric_names": selectors.metric_names(experiment),
        "means": selectors.running_means(experiment),
        "oob": True,
    }


def announce_result(*, experiment_id: int, result_id: int) -> None:
    """Send the progress block and the row of result ``result_id`` (organization in scope)."""
    experiment = Experiment.objects.select_related("project__organization").filter(pk=experiment_id).first()
    if experiment is None or not live.has_listeners(project=experiment.project):
        return
    try:
        result = ExperimentResult.objects.select_related("item").get(pk=result_id)
        context = _context(experiment)
        html = render_to_string("evals/_experiment_progress.html", context) + render_to_string(
            "evals/_experiment_result_row.html", {**context, "result": result}
        )
    except Exception:  # noqa: BLE001 - live updates are best effort; the page re-renders from the database
        logger.warning("could not render experiment %s progress", experiment_id, exc_info=True)
        return
    live.announce(project=experiment.project, event=EVENT, html=html, data={"experiment": experiment_id})


def announce_started(*, experiment_id: int, result_ids: list[int]) -> None:
    """Send the rows of items that just started (shown as running)."""
    experiment = Experiment.objects.select_related("project__organization").filter(pk=experiment_id).first()
    if experiment is None or not result_ids or not live.has_listeners(project=experiment.project):
        return
    try:
        context = _context(experiment)
        html = render_to_string("evals/_experiment_progress.html", context) + "".join(
            render_to_string("evals/_experiment_result_row.html", {**context, "result": result})
            for result in ExperimentResult.objects.select_related("item").filter(pk__in=result_ids).order_by("id")
        )
    except Exception:  # noqa: BLE001 - best effort, as above
        logger.warning("could not render experiment %s rows", experiment_id, exc_info=True)
        return
    live.announce(project=experiment.project, event=EVENT, html=html, data={"experiment": experiment_id})


def announce_ended(*, experiment_id: int) -> None:
    experiment = Experiment.objects.select_related("project__organization").filter(pk=experiment_id).first()
    if experiment is None or not live.has_listeners(project=experiment.project):
        return
    try:
        html = render_to_string("evals/_experiment_progress.html", _context(experiment))
    except Exception:  # noqa: BLE001 - best effort, as above
        logger.warning("could not render experiment %s end", experiment_id, exc_info=True)
        return
    live.announce(
        project=experiment.project,
        event="experiment.ended",
        html=html,
        data={"experiment": experiment_id, "status": experiment.status},
    )
