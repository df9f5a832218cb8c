"""A person's retry of a run or experiment whose W&B logging failed: its ``WandbExport``
row goes back to ``queued`` and the task that logs it runs again (``log_runs_to_wandb``
for a run, ``experiment_ended`` for an experiment), the same task the receiver, the
sweep and an experiment's end queue, with its own retries.

And the rows whose message was lost (``lost_exports``): ``queued`` rows nobody has
touched for ``LOST_AFTER``, because the broker was down when they were queued (a retry,
a run's end, a sweep) or a worker died holding them past its retries. The beat's
``sweep_wandb`` sends them again; logging twice is harmless (the W&B run id is derived
from ours)."""

from __future__ import annotations

from datetime import datetime, timedelta

from django.db import transaction
from django.utils import timezone

from agentops.errors import Conflict
from agentops.models import ProviderSecret
from agentops.queueing import send_or_leave_to_sweeper
from agentops.scoping import dangerously_unscoped
from agentops.services.audit import audit_record
from evals.models import WandbExport
from evals.services.wandb_export.client import Mode, logging_mode
from evals.services.wandb_export.runs import enqueue_runs
from evals.tasks import WANDB_RETRY_SECONDS, experiment_ended, log_runs_to_wandb

# Longer than the longest wait between a logging task's attempts (its last retry's
# countdown, WANDB_RETRY_SECONDS * 2**4: 8 minutes), each of which stamps the row.
LOST_AFTER = timedelta(seconds=WANDB_RETRY_SECONDS * 2**4 * 2)
MAX_LOST_PER_SWEEP = 2000


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
        # While the broker is down the row stays queued and lost_exports finds it.
        if run_id:
            transaction.on_commit(lambda: send_or_leave_to_sweeper(log_runs_to_wandb, organization_id, [run_id]))
        else:
            transaction.on_commit(lambda: send_or_leave_to_sweeper(experiment_ended, organization_id, experiment_id))
    export.refresh_from_db()
    return export


def send_lost_exports(now: datetime | None = None) -> int:
    """Send again the loggings ``lost_exports`` finds; how many."""
    lost = lost_exports(now)
    runs: dict[int, list[int]] = {}
    for organization_id, run_id, experiment_id in lost:
        if run_id:
            runs.setdefault(organization_id, []).append(run_id)
        else:
            experiment_ended.delay(organization_id, experiment_id)
    for organization_id, run_ids in runs.items():
        enqueue_runs(organization_id, run_ids)
    return len(lost)


def lost_exports(now: datetime | None = None) -> list[tuple[int, int | None, int | None]]:
    """The ``queued`` rows untouched for ``LOST_AFTER``, as (organization id, run id,
    experiment id), each stamped now (a conditional update: two sweeps at once send it
    once, and it is not sent again before another ``LOST_AFTER``)."""
    now = now or timezone.now()
    lost = []
    with dangerously_unscoped("the W&B sweep sends again what every organization's broker lost"):
        stale = WandbExport.objects.filter(status=WandbExport.Status.QUEUED, updated_at__lt=now - LOST_AFTER)
        for pk, organization_id, run_id, experiment_id in stale.order_by("updated_at").values_list(
            "pk", "organization_id", "run_id", "experiment_id"
        )[:MAX_LOST_PER_SWEEP]:
            if stale.filter(pk=pk).update(updated_at=now):
                lost.append((organization_id, run_id, experiment_id))
    return lost
