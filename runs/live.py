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
import time

from django.template.loader import render_to_string
from django.urls import reverse
from django.utils.html import escape

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


STREAM_EVENT = "runs.stream"


class TextStream:
    """The text of one model call of an executed run, sent to the open pages of the run
    as the model writes it (``write``), in pieces at most ``interval`` seconds apart so
    a fast model does not send a message per token; ``close`` sends the rest.

    The run page holds an empty, hidden ``#run-stream-<id>``. The first message replaces
    it with a box holding the text so far; later ones append their piece to the box's
    text, and every ``snapshot_every`` seconds one replaces the box with all the text
    again, so a page opened in the middle of a long answer catches up. Nothing is sent
    while no page of the project is open (asked at the start and then every
    ``snapshot_every`` seconds). The text is escaped: it
    is the model's, and must never become markup. Like every live update this is best
    effort; the stored ``llm`` step is the record."""

    def __init__(self, *, run, step: int, model: str, interval: float = 0.05, snapshot_every: float = 1.0):
        self.run, self.step, self.model = run, step, model
        self.interval, self.snapshot_every = interval, snapshot_every
        self.listening = live.has_listeners(project=run.project)
        self.checked = time.monotonic()
        self.text: list[str] = []
        self.unsent = 0  # how many of the last pieces of ``text`` no page has had yet
        self.last_sent = 0.0
        self.last_snapshot: float | None = None  # when the last whole box was sent

    def write(self, piece: str) -> None:
        if not piece:
            return
        self.text.append(piece)
        self.unsent += 1
        if not self.listening:
            # A page may open while the model writes: ask again now and then (its first
            # message is then a whole box, with the text so far).
            if time.monotonic() - self.checked < self.snapshot_every:
                return
            self.checked = time.monotonic()
            self.listening = live.has_listeners(project=self.run.project)
            if not self.listening:
                return
        if time.monotonic() - self.last_sent >= self.interval:
            self._send()

    def close(self) -> None:
        if self.unsent and self.listening:
            self._send()
        if self.last_snapshot is not None:
            html = (
                f'<span id="run-stream-state-{self.run.pk}" hx-swap-oob="true" class="muted">'
                f"answered (step {self.step})</span>"
            )
            live.announce(project=self.run.project, event=STREAM_EVENT, html=html, data={"run": self.run.pk})

    def _send(self) -> None:
        now = time.monotonic()
        if self.last_snapshot is None or now - self.last_snapshot >= self.snapshot_every:
            self.last_snapshot = now
            html = render_to_string(
                "runs/live/stream_box.html",
                {"run_id": self.run.pk, "step": self.step, "model": self.model, "text": escape("".join(self.text))},
            )
        else:
            piece = escape("".join(self.text[-self.unsent :]))
            html = f'<div id="run-stream-text-{self.run.pk}" hx-swap-oob="beforeend"><span>{piece}</span></div>'
        self.unsent = 0
        self.last_sent = now
        live.announce(project=self.run.project, event=STREAM_EVENT, html=html, data={"run": self.run.pk})
