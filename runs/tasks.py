"""Celery tasks of runs: periodic work of the trace store, and executing runs.

Tasks are thin: they enter the organization's scope and call one service. Services
import this module at the top (to enqueue); tasks import services inside their
functions, so the two never import each other at module load (one rule in every app).
"""

from datetime import timedelta

from celery import shared_task
from django.db.models import Q
from django.utils import timezone

from agentops.scoping import dangerously_unscoped, organization_scope
from runs.models import IngestSettings, Run

PURGE_BATCH = 1000


@shared_task
def purge_expired_runs() -> int:
    """Delete runs older than their project's retention, in batches (nightly)."""
    with dangerously_unscoped("the nightly purge reads every project's retention"):
        policies = list(
            IngestSettings.objects.filter(retention_days__isnull=False).values_list(
                "organization_id", "project_id", "retention_days"
            )
        )
    deleted = 0
    for organization_id, project_id, days in policies:
        cutoff = timezone.now() - timedelta(days=days)
        with organization_scope(organization_id):
            while True:
                ids = list(
                    Run.objects.filter(project_id=project_id)
                    .filter(Q(started_at__lt=cutoff) | Q(started_at__isnull=True, created_at__lt=cutoff))
                    .values_list("id", flat=True)[:PURGE_BATCH]
                )
                if not ids:
                    break
                Run.objects.filter(id__in=ids).delete()
                deleted += len(ids)
    return deleted


@shared_task(ignore_result=True)  # nobody reads it: no result written to Redis per run
def execute_run(organization_id: int, run_id: int) -> None:
    """Execute one run the platform starts itself (runs.execution)."""
    from runs.execution import run_execute

    with organization_scope(organization_id):
        run_execute(run_id=run_id)


@shared_task
def recover_stalled_runs() -> int:
    """Hand runs whose worker died back to a worker (every minute): they resume, or fail
    once they lost RUN_MAX_ATTEMPTS workers; queued or waiting runs with a cancel pending
    end cancelled."""
    from runs.execution import stalled_run_ids

    stalled = stalled_run_ids()
    for organization_id, run_id in stalled:
        execute_run.delay(organization_id, run_id)
    return len(stalled)


@shared_task
def expire_approvals() -> int:
    """Expire approvals nobody answered in time; their runs continue (every minute)."""
    from runs.services.approvals import approvals_expire

    return approvals_expire()
