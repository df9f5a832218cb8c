"""A person's retry of a run or experiment whose W&B logging failed: its ``WandbExport``
row goes back to ``queued`` and the task that logs it runs again (``log_runs_to_wandb``
for a run, ``experiment_ended`` for an experiment), the same task the receiver, the
sweep and an experiment's end queue, with its own retries."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agentops.errors import Conflict
from agentops.models import ProviderSecret
from agentops.services.audit import audit_record
from evals.models import WandbExport
from evals.services.wandb_export.client import Mode, logging_mode
from evals.tasks import experiment_ended, log_runs_to_wandb


def wandb_retry(*, export: WandbExport, actor, ip=None) -> WandbExport:
    """Queue a failed W&B logging again (409 when it has not failed, or when a setting
    must change first: no W&B key, or the project no longer logs it)."""
    if export.status != WandbExport.Status.FAILED:
        raise Conflict(f"only a failed W&B logging can be retried; this one is {export.status}")
    if not ProviderSecret.objects.filter(
        organization_id=export.organization_id, provider=ProviderSecret.Provider.WANDB
    ).exists():
        raise Conflict("no W&B key is saved: save one on the Secrets page, then retry")
    mode = logging_mode(export.project)
    if mode == Mode.OFF or (export.run_id and mode != Mode.RUNS):
        what = "runs" if export.run_id else "experiments"
        raise Conflict(f"this project no longer logs {what} to W&B (runs settings): turn it on, then retry")
    organization_id, run_id, experiment_id = export.organization_id, export.run_id, export.experiment_id
    with transaction.atomic():
        # Conditional: of two retries at once, one queues it and the other is told.
        if not WandbExport.objects.filter(pk=export.pk, status=WandbExport.Status.FAILED).update(
            status=WandbExport.Status.QUEUED, updated_at=timezone.now()
        ):
            export.refresh_from_db()
            raise Conflict(f"only a failed W&B logging can be retried; this one is {export.status}")
        audit_record(
            organization=export.organization,
            actor=actor,
            action="wandb.retry",
            target=export,
            data={"run": run_id} if run_id else {"experiment": experiment_id},
            ip=ip,
        )
        if run_id:
            transaction.on_commit(lambda: log_runs_to_wandb.delay(organization_id, [run_id]))
        else:
            transaction.on_commit(lambda: experiment_ended.delay(organization_id, experiment_id))
    export.refresh_from_db()
    return export
