"""Live updates of an experiment's page: after each scored item, the progress block
(counts, running means) and the item's row; when it ends, the progress block with the
final numbers. The block goes to the experiment's topic and each row to its result's,
so a page gets only the rows it shows, and only while such a page is open; pages that
reconnect re-render from PostgreSQL."""

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


def _wanted(experiment_id: int, result_ids: list[int], progress: bool) -> list[str]:
    wanted = [live.topic("experiment-result", pk) for pk in result_ids]
    if progress:
        wanted.append(live.topic("experiment", experiment_id))
    return wanted


def _nobody_listens(project_id: int | None, experiment_id: int, result_ids: list[int], progress: bool) -> bool:
    """Whether no open page shows the progress block or the rows (asked of Redis by the
    project's id, so an experiment nobody watches is not even read from the database)."""
    if project_id is None:
        return False
    groups = [
        live.group_name(project_id=project_id, topic=name) for name in _wanted(experiment_id, result_ids, progress)
    ]
    return not live.listening(groups)


def _send(experiment: Experiment, *, event: str, progress: bool, result_ids: list[int], data: dict) -> None:
    """Render and send the progress block (topic ``experiment:<id>``) and the rows of
    ``result_ids`` (each to ``experiment-result:<id>``, the pages showing that row), each
    only when an open page shows it."""
    project = experiment.project
    listening = live.listening_topics(project=project, topics=_wanted(experiment.pk, result_ids, progress))
    if not listening:
        return
    try:
        context = _context(experiment)
        messages = []
        if live.topic("experiment", experiment.pk) in listening:
            messages.append(
                (live.topic("experiment", experiment.pk), render_to_string("evals/_experiment_progress.html", context))
            )
        shown = [pk for pk in result_ids if live.topic("experiment-result", pk) in listening]
        for result in ExperimentResult.objects.select_related("item").filter(pk__in=shown).order_by("id"):
            html = render_to_string("evals/_experiment_result_row.html", {**context, "result": result})
            messages.append((live.topic("experiment-result", result.pk), html))
    except Exception:  # noqa: BLE001 - live updates are best effort; the page re-renders from the database
        logger.warning("could not render experiment %s progress", experiment.pk, exc_info=True)
        return
    for topic, html in messages:
        live.announce(project=project, topic=topic, event=event, html=html, data=data)


def _experiment(experiment_id: int) -> Experiment | None:
    return Experiment.objects.select_related("project__organization").filter(pk=experiment_id).first()


def announce_result(*, experiment_id: int, result_id: int, project_id: int | None = None) -> None:
    """Send the progress block and the row of result ``result_id`` (organization in scope).
    With the experiment's ``project_id``, nothing is read when no page shows either."""
    if _nobody_listens(project_id, experiment_id, [result_id], progress=True):
        return
    experiment = _experiment(experiment_id)
    if experiment is not None:
        _send(experiment, event=EVENT, progress=True, result_ids=[result_id], data={"experiment": experiment_id})


def announce_started(*, experiment_id: int, result_ids: list[int], project_id: int | None = None) -> None:
    """Send the rows of items that just started (shown as running); with ``project_id``,
    nothing is read when no page shows them."""
    if not result_ids or _nobody_listens(project_id, experiment_id, result_ids, progress=True):
        return
    experiment = _experiment(experiment_id)
    if experiment is not None and result_ids:
        _send(experiment, event=EVENT, progress=True, result_ids=result_ids, data={"experiment": experiment_id})


def announce_ended(*, experiment_id: int) -> None:
    experiment = _experiment(experiment_id)
    if experiment is not None:
        _send(
            experiment,
            event="experiment.ended",
            progress=True,
            result_ids=[],
            data={"experiment": experiment_id, "status": experiment.status},
        )
