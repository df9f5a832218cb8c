"""Live updates of the runs pages, sent after each ingested batch.

After each batch, messages go to the topics the project's open pages show
(agentops/live.py), holding HTML fragments that htmx's ws extension swaps by id:

- ``runs``, the runs list that takes new runs (after ``#runs-head``, which only the
  unfiltered first page in the default order has, see ``runs.views.runs_list``): the new
  runs' rows, inserted at its top; the page then also follows those rows;
- ``runs-notice``, the lists that do not take new rows (filtered, sorted, paged): a
  notice offering a reload;
- ``run-row:<id>``, a list showing that run's row: the row, replacing ``#run-<id>``;
- ``run:<id>``, the run's page: a small element that makes the page fetch its header
  and open tab again (``#run-refresh-<id>``), so the fragment rendered here stays small
  however large the run, and only the pages that show the run do that work.

A page gets only what it has a place for, and nothing is rendered for a topic no page
shows. Everything in it is readable by every member of the project (runs are
``work:read`` for all roles). Rendering is best effort: the data is already stored, and
a page that reconnects re-renders from PostgreSQL.
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


def render_runs_ingested(*, project, runs: list[dict], listening: set[str] | None = None) -> list[tuple[str, str]]:
    """The messages announcing ``runs`` (``[{"id", "new"}]``, as ingest reports them)
    to the project's open pages, as ``(topic, html)`` pairs; only for the topics in
    ``listening`` when given. Call inside the project's organization scope.

    New rows travel inside a ``<table>`` (inserted after the list's ``<thead>``), a
    changed row as its ``<tbody id="run-<id>">`` (each run's row is its own tbody): how
    HTML parses table parts at the top of a fragment."""

    def wanted(topic: str) -> bool:
        return listening is None or topic in listening

    ids = [entry["id"] for entry in runs]
    new_ids = {entry["id"] for entry in runs if entry.get("new")}
    # New runs have the highest ids: take the newest of them first, then changed ones.
    new_wanted = sorted(new_ids, reverse=True)[:MAX_ROWS] if wanted(live.topic("runs")) else []
    changed_wanted = [pk for pk in ids if pk not in new_ids and wanted(live.topic("run-row", pk))][:MAX_ROWS]
    rows = {run.pk: run for run in selectors.run_list(project=project).filter(pk__in=new_wanted + changed_wanted)}
    context = {"organization": project.organization, "project": project}
    messages: list[tuple[str, str]] = []
    new_rows = [rows[pk] for pk in new_wanted if pk in rows]
    if new_rows:
        messages.append(
            (live.topic("runs"), render_to_string("runs/live/new_runs.html", {**context, "new_rows": new_rows}))
        )
    if new_ids and wanted(live.topic("runs-notice")):
        messages.append((live.topic("runs-notice"), render_to_string("runs/live/new_runs_notice.html", context)))
    for pk in changed_wanted:
        if pk in rows:
            html = render_to_string("runs/_run_row.html", {**context, "run": rows[pk], "oob": True})
            messages.append((live.topic("run-row", pk), html))
    detail_prefix = reverse(
        "runs:detail", kwargs={"org_slug": project.organization.slug, "project_slug": project.slug, "run_id": 0}
    ).removesuffix("0/")
    for pk in ids[:MAX_REFRESHES]:
        if pk not in new_ids and wanted(live.topic("run", pk)):
            html = render_to_string("runs/live/run_changed.html", {"run_id": pk, "detail_prefix": detail_prefix})
            messages.append((live.topic("run", pk), html))
    return [(topic, html.strip()) for topic, html in messages if html.strip()]


def announce_runs_ingested(*, project, runs: list[dict]) -> None:
    """Render and send the update for ``runs``; never raises (see the module docstring).
    Nothing is rendered for a topic no open page shows; a run stored for the first
    time has no page nor row open anywhere but the top of the runs list."""
    new_ids = {entry["id"] for entry in runs if entry.get("new")}
    topics = [live.topic("runs"), live.topic("runs-notice")] if new_ids else []
    for entry in runs[: max(MAX_REFRESHES, MAX_ROWS)]:
        if entry["id"] not in new_ids:
            topics += [live.topic("run-row", entry["id"]), live.topic("run", entry["id"])]
    listening = live.listening_topics(project=project, topics=topics) if topics else set()
    if not listening:
        return
    try:
        with organization_scope(project.organization_id):
            messages = render_runs_ingested(project=project, runs=runs, listening=listening)
    except Exception:  # noqa: BLE001 - a live update must never fail the ingest that stored the data
        logger.warning("could not render the live update of %d runs", len(runs), exc_info=True)
        return
    for topic, html in messages:
        # The rows just put at the top of the list are the list's to follow from now on.
        follow = [live.topic("run-row", pk) for pk in sorted(new_ids)[-MAX_ROWS:]] if topic == "runs" else []
        live.announce(project=project, topic=topic, event=EVENT, html=html, data={"runs": runs}, follow=follow)


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
        self.topic = live.topic("run", run.pk)
        self.listening = live.has_listeners(project=run.project, topic=self.topic)
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
            self.listening = live.has_listeners(project=self.run.project, topic=self.topic)
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
            live.announce(
                project=self.run.project, topic=self.topic, event=STREAM_EVENT, html=html, data={"run": self.run.pk}
            )

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
        live.announce(
            project=self.run.project, topic=self.topic, event=STREAM_EVENT, html=html, data={"run": self.run.pk}
        )
