"""Celery entry points of jobs: the poller (each poll schedules the next) and a sweeper
that re-enqueues any job whose next look is overdue (a lost message, a restarted worker)."""

from celery import shared_task

from agentops.scoping import organization_scope

# A job whose next poll is this late was dropped by a worker: the sweeper picks it up.
OVERDUE_SECONDS = 20


@shared_task
def poll_job(organization_id: int, job_id: int, token: str | None = None) -> None:
    """One step of a job (submit, or status + logs + GPU samples), then the next poll,
    which carries the token of this chain (a newer chain makes this one stop)."""
    from jobs.services import job_poll

    with organization_scope(organization_id):
        following = job_poll(job_id=job_id, token=token)
    if following is not None:
        interval, next_token = following
        poll_job.apply_async((organization_id, job_id, next_token), countdown=interval)


@shared_task
def sweep_jobs() -> int:
    """Every 15 s: poll the unfinished jobs whose next look is overdue."""
    from jobs.services import due_job_ids

    due = due_job_ids(overdue_seconds=OVERDUE_SECONDS)
    for organization_id, job_id in due:
        poll_job.delay(organization_id, job_id)
    return len(due)
