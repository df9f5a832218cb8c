"""Live updates of the runs pages, sent after each ingested batch.

After each batch, messages go to the project's group (every member's open pages of the
project), holding HTML fragments that htmx's ws extension swaps by id:

- new runs' rows, inserted at the top of the runs list (after ``#runs-head``, which only
  the unfiltered first page in the default order has, see ``runs.views.runs_list``);
- changed runs' rows, replacing ``#run-<id>`` wherever that row is shown;
- a notice on lists that do not take new rows (filtered, sorted, paged), offering a
  reload;
- for each run, a small element that makes an open page of that run fetch its header
  and open tab again (``#run-refresh-<id>``), so the fragment rendered here stays small
  however large the run, and only the pages that show the run do that work.

Everything in it is readable by every member of the project (runs are ``work:read``
for all roles). Rendering is best effort: the data is already stored, and a page that
reconnects re-renders from PostgreSQL.
"""

from __future__ import annotations

import logging

from django.template.loader import render_to_string
from django.urls import reverse

from agentops import live
from agentops.scoping import organization_scope
from runs import selectors

logger = logging.getLogger(__name__)

EVENT = "runs.ingested"
# A batch may touch thousands of runs; a page shows fifty.
MAX_ROWS = 50
MAX_REFRESHES = 200


def render_runs_ingested(*, project, runs: list[dict]) -> list[str]:
    """The messages announcing ``runs`` (``[{"id", "new"}]``, as ingest reports them)
    to the project's open pages. Call inside the project's organization scope.

    Two messages, because of how HTML parses table parts at the top of a fragment: new
    rows travel inside a ``<table>`` (inserted after the list's ``<thead>``), changed
    rows as ``<tbody id="run-<id>">`` elements (each run's row is its own tbody); a
    ``<tbody>`` after a ``<table>``, or a ``<tr>`` after a ``<tbody>``, would be
    re-parsed into something else."""
    ids = [entry["id"] for entry in runs]
    new_ids = {entry["id"] for entry in runs if entry.get("new")}
    # New runs have the highest ids: take the newest of them first, then changed ones.
    wanted = sorted(new_ids, reverse=True)[:MAX_ROWS] + [pk for pk in ids if pk not in new_ids][:MAX_ROWS]
    rows = list(selectors.run_list(project=project).filter(pk__in=wanted)) if wanted else []
    context = {
        "organization": project.organization,
        "project": project,
        "new_rows": [run for run in rows if run.pk in new_ids][:MAX_ROWS],
        "changed_rows": [run for run in rows if run.pk not in new_ids][:MAX_ROWS],
        "refresh_ids": ids[:MAX_REFRESHES],
        "detail_prefix": reverse(
            "runs:detail", kwargs={"org_slug": project.organization.slug, "project_slug": project.slug, "run_id": 0}
        ).removesuffix("0/"),
    }
    messages = []
    if context["new_rows"] or new_ids:
        messages.append(render_to_string("runs/live/new_runs.html", context))
    if context["changed_rows"] or context["refresh_ids"]:
        messages.append(render_to_string("runs/live/changed_runs.html", context))
    return [message.strip() for message in messages if message.strip()]


def announce_runs_ingested(*, project, runs: list[dict]) -> None:
    """Render and send the update for ``runs``; never raises (see the module docstring).
    Nothing is rendered when no page of the project is open."""
    if not live.has_listeners(project=project):
        return
    try:
        with organization_scope(project.organization_id):
            messages = render_runs_ingested(project=project, runs=runs)
    except Exception:  # noqa: BLE001 - a live update must never fail the ingest that stored the data
        logger.warning("could not render the live update of %d runs", len(runs), exc_info=True)
        return
    for html in messages:
        live.announce(project=project, event=EVENT, html=html, data={"runs": runs})
