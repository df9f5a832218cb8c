"""Live updates of the job pages: a job's status block (status, timeline, cost, energy) when
it changes, and new log lines appended to its log tail as they arrive, sent to the job's
topic (``job:<id>``); and its row to the lists showing it (``job-row:<id>``). Each only
while such a page is open; a page that reconnects re-renders from PostgreSQL."""

from __future__ import annotations

import logging

from django.template.loader import render_to_string

from agentops import live
from billing.carbon import job_footprint
from jobs.models import Job, JobLogLine

logger = logging.getLogger(__name__)

MAX_LINES_PER_MESSAGE = 500


def _job(job_id: int, *topics: str) -> tuple[Job | None, set[str]]:
    """The job and which of its ``topics`` an open page shows (None when none does)."""
    job = Job.objects.select_related("project__organization", "backend").filter(pk=job_id).first()
    if job is None:
        return None, set()
    listening = live.listening_topics(project=job.project, topics=topics)
    return (job if listening else None), listening


def announce_job(*, job_id: int) -> None:
    """Send the job's status block to its page and its row to the lists showing it."""
    page, row = live.topic("job", job_id), live.topic("job-row", job_id)
    job, listening = _job(job_id, page, row)
    if job is None:
        return
    context = {"organization": job.project.organization, "project": job.project, "job": job, "oob": True}
    if job.ended and page in listening:
        context["footprint"] = job_footprint(job.pk)  # the energy estimate beside the cost
    try:
        messages = [(page, render_to_string("jobs/_status.html", context))] if page in listening else []
        if row in listening:
            messages.append((row, render_to_string("jobs/_row.html", context)))
    except Exception:  # noqa: BLE001 - best effort: the page re-renders from the database
        logger.warning("could not render job %s", job_id, exc_info=True)
        return
    for topic, html in messages:
        live.announce(
            project=job.project, topic=topic, event="job.status", html=html, data={"job": job_id, "status": job.status}
        )


def announce_log_lines(*, job_id: int, first: int, last: int) -> None:
    job, _ = _job(job_id, live.topic("job", job_id))
    if job is None:
        return
    lines = list(
        JobLogLine.objects.filter(job=job, number__gte=max(first, last - MAX_LINES_PER_MESSAGE + 1), number__lte=last)
    )
    try:
        html = render_to_string("jobs/_log_lines.html", {"job": job, "lines": lines, "oob": True})
    except Exception:  # noqa: BLE001 - best effort, as above
        logger.warning("could not render job %s log lines", job_id, exc_info=True)
        return
    live.announce(
        project=job.project,
        topic=live.topic("job", job_id),
        event="job.log",
        html=html,
        data={"job": job_id, "last": last},
    )
