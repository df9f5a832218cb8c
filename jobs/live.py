"""Live updates of the job pages: a job's status block (status, timeline, cost) when
it changes, and new log lines appended to its log tail as they arrive. Sent to the job's
topic (``job:<id>``) only while a page of the job is open; a page that reconnects
re-renders from PostgreSQL."""

from __future__ import annotations

import logging

from django.template.loader import render_to_string

from agentops import live
from jobs.models import Job, JobLogLine

logger = logging.getLogger(__name__)

MAX_LINES_PER_MESSAGE = 500


def _job(job_id: int) -> Job | None:
    job = Job.objects.select_related("project__organization", "backend").filter(pk=job_id).first()
    if job is None or not live.has_listeners(project=job.project, topic=live.topic("job", job_id)):
        return None
    return job


def announce_job(*, job_id: int) -> None:
    job = _job(job_id)
    if job is None:
        return
    try:
        html = render_to_string(
            "jobs/_status.html",
            {"organization": job.project.organization, "project": job.project, "job": job, "oob": True},
        )
    except Exception:  # noqa: BLE001 - best effort: the page re-renders from the database
        logger.warning("could not render job %s", job_id, exc_info=True)
        return
    live.announce(
        project=job.project,
        topic=live.topic("job", job_id),
        event="job.status",
        html=html,
        data={"job": job_id, "status": job.status},
    )


def announce_log_lines(*, job_id: int, first: int, last: int) -> None:
    job = _job(job_id)
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
