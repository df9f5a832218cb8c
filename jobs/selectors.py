"""Reads of GPU jobs, always scoped to the project (or to the organization, for the
compute backends it owns). Shared by the MCP server's tools; the REST API's views build
the same querysets."""

from __future__ import annotations

from django.db.models import QuerySet

from agentops.api.lookup import by_name_or_id
from agentops.errors import NotFound
from jobs.models import ComputeBackend, Job, JobLogLine

LOG_PAGE = 1000


def job_list(*, project, status: str = "") -> QuerySet[Job]:
    """The project's jobs, newest first, optionally of one status."""
    queryset = (
        Job.objects.filter(project=project)
        .select_related("backend", "project__organization", "experiment")
        .prefetch_related("events")
        .order_by("-created_at", "-id")
    )
    if status:
        queryset = queryset.filter(status=status)
    return queryset


def job_detail(*, project, job_id: int) -> Job:
    """One job of the project; NotFound otherwise (another tenant's job included)."""
    job = job_list(project=project).filter(pk=job_id).first()
    if job is None:
        raise NotFound("job not found")
    return job


def job_log_page(*, job: Job, after: int = 0, limit: int = LOG_PAGE) -> dict:
    """The job's log lines after line ``after``, at most ``limit``:
    ``{"lines": [{"number", "text", "at"}], "next_after": n, "ended": bool}``."""
    lines = list(
        JobLogLine.objects.filter(job=job, number__gt=after).order_by("number").values("number", "text", "at")[:limit]
    )
    return {
        "lines": lines,
        "next_after": lines[-1]["number"] if lines else after,
        "ended": job.ended and (not lines or lines[-1]["number"] >= job.log_line_count),
    }


def backend_lookup(*, organization, value) -> ComputeBackend:
    """The organization's compute backend named ``value`` (or with id ``value``)."""
    return by_name_or_id(ComputeBackend.objects.filter(organization=organization), value, "backend")
