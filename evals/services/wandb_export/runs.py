"""Every ended run of a project whose W&B logging is "runs", logged as a W&B run, and
logged again when a score of it lands later (the same W&B run's summary is updated).

How runs get here, without ever slowing ingestion:

- a run the platform executes: the ``runs.signals.run_ended`` receiver (``on_run_ended``)
  queues it after its transaction commits;
- a run ingested from outside (ingest sends no signal: a receiver per run is what the
  ingest path at thousands of runs a second must not pay): the sweep (``sweep``, every
  30 s from ``evals.tasks.sweep_wandb``) reads each such project's runs that ended since
  its cursor, and the scores created since, in bounded batches.

Both claim a run by inserting its ``WandbExport`` row (``ON CONFLICT DO NOTHING``), so a
run is queued once; a score landing after a run was logged moves its row from
``logged`` back to ``queued`` with a conditional update. ``log_runs`` (the task
``evals.tasks.log_runs_to_wandb``, up to ``BATCH`` runs per task) logs them; it is safe
to run twice (the W&B run id is derived from ours, ``resume="allow"``).
"""

from __future__ import annotations

import logging
from datetime import datetime, timedelta
from functools import cache

from django.db import connection, transaction
from django.db.models import Exists, OuterRef
from django.utils import timezone

from agentops.models import ProviderSecret
from agentops.scoping import check_scope, dangerously_unscoped, organization_scope
from evals.models import Score, WandbCursor, WandbExport
from evals.services.wandb_export.client import Mode, WandbRefused, credentials, record, start_run
from evals.tasks import log_runs_to_wandb
from runs.models import IngestSettings, Run

logger = logging.getLogger(__name__)

ENDED = Run.ENDED
Provider = ProviderSecret.Provider
# Rows stamped this long before a cursor are looked at again: a row's timestamp is set
# before its transaction commits, so a scan may miss it the first time.
OVERLAP = timedelta(minutes=2)
# A score stamped up to this long before a run's logging read the scores may not have
# been committed yet then: such a run is logged once more.
SCORE_MARGIN = timedelta(seconds=30)
MAX_RUNS_PER_SWEEP = 2000
BATCH = 50


def run_payload(run: Run, scores: dict[str, float]) -> tuple[dict, dict]:
    """The W&B run's config (what ran) and summary (how it went, and its scores)."""
    version = run.executed_version
    config = {
        "agentops_run": run.pk,
        "trace_id": run.trace_id,
        "agent": run.agent_name,
        "agent_version": run.agent_version or (f"v{version.number}" if version else ""),
        "model": version.model if version else ", ".join(run.models_used),
        "parameters": (version.parameters if version else None) or {},
        "environment": run.environment,
        "release": run.release,
        "tags": list(run.tags),
    }
    summary = {
        "status": run.status,
        "input_tokens": run.input_tokens,
        "cached_input_tokens": run.cached_input_tokens,
        "output_tokens": run.output_tokens,
        "tokens": run.input_tokens + run.output_tokens,
        "cost": float(run.total_cost),
        "latency_ms": run.latency_ms,
        "steps": run.step_count,
        "errors": run.error_count,
        "llm_calls": run.llm_call_count,
        **{f"scores/{name}": value for name, value in scores.items()},
    }
    return config, summary


def run_scores(run_id: int) -> dict[str, float]:
    """Each metric's mean score of the run (several people may score the same metric)."""
    values: dict[str, list[float]] = {}
    for name, value in Score.objects.filter(run_id=run_id, value__isnull=False).values_list("name", "value"):
        values.setdefault(name, []).append(value)
    return {name: sum(found) / len(found) for name, found in sorted(values.items())}


# --- Queueing ---------------------------------------------------------------------------------


def on_run_ended(sender, run: Run, status: str, **kwargs) -> None:
    """``runs.signals.run_ended`` receiver: queue the run after its end commits."""
    organization_id, project_id, run_id = run.organization_id, run.project_id, run.pk

    def queue() -> None:
        try:
            with organization_scope(organization_id):
                if _wants_runs(organization_id, project_id):
                    enqueue_runs(organization_id, _claim(organization_id, project_id, [run_id]))
        except Exception:  # noqa: BLE001 - W&B must never fail the run; the sweep tries again
            logger.exception("run %s: queueing it for W&B failed", run_id)

    transaction.on_commit(queue)


def _wants_runs(organization_id: int, project_id: int) -> bool:
    """Whether the project logs its runs to W&B and its organization saved a W&B key.
    Asked at every executed run's end, so in one hand-written statement (two ORM queries
    cost about a millisecond of Python each)."""
    check_scope(organization_id)
    with connection.cursor() as cursor:
        cursor.execute(
            _wants_runs_sql(),
            {"organization": organization_id, "project": project_id, "runs": Mode.RUNS, "wandb": Provider.WANDB},
        )
        return cursor.fetchone()[0]


@cache
def _wants_runs_sql() -> str:
    quote = connection.ops.quote_name
    return (
        f"SELECT EXISTS (SELECT 1 FROM {quote(IngestSettings._meta.db_table)} "  # noqa: S608 - quoted names
        "WHERE project_id = %(project)s AND organization_id = %(organization)s AND wandb_logging = %(runs)s) "
        f"AND EXISTS (SELECT 1 FROM {quote(ProviderSecret._meta.db_table)} "
        "WHERE organization_id = %(organization)s AND provider = %(wandb)s)"
    )


def _claim(organization_id: int, project_id: int, run_ids: list[int]) -> list[int]:
    """Insert a ``queued`` row for each run that has none; the runs this call claimed."""
    if not run_ids:
        return []
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO evals_wandbexport (organization_id, project_id, run_id, status, attempts, error, updated_at) "
            "SELECT %s, %s, run_id, 'queued', 0, '', now() FROM unnest(%s::bigint[]) AS run_id "
            "ON CONFLICT (run_id) WHERE run_id IS NOT NULL DO NOTHING RETURNING run_id",
            [organization_id, project_id, run_ids],
        )
        return sorted(row[0] for row in cursor.fetchall())


def enqueue_runs(organization_id: int, run_ids: list[int]) -> None:
    """Send ``log_runs_to_wandb`` for ``run_ids``, ``BATCH`` runs per task."""
    for start in range(0, len(run_ids), BATCH):
        log_runs_to_wandb.delay(organization_id, run_ids[start : start + BATCH])


def sweep(now: datetime | None = None) -> int:
    """Queue, for every project logging runs to W&B whose organization saved a key, the
    runs that ended and the logged runs that got a score since its cursor. Returns how
    many runs were queued."""
    now = now or timezone.now()
    with dangerously_unscoped("the W&B sweep looks at every project that logs runs"):
        projects = list(
            IngestSettings.objects.filter(wandb_logging=Mode.RUNS)
            .filter(
                Exists(
                    ProviderSecret.objects.filter(
                        organization_id=OuterRef("organization_id"), provider=ProviderSecret.Provider.WANDB
                    )
                )
            )
            .order_by("project_id")
            .values_list("organization_id", "project_id")
        )
        # A project that stopped logging runs starts afresh if it turns it on again.
        WandbCursor.objects.exclude(project_id__in=[project_id for _, project_id in projects]).delete()
    queued = 0
    for organization_id, project_id in projects:
        with organization_scope(organization_id):
            try:
                queued += _sweep_project(organization_id, project_id, now)
            except Exception:  # noqa: BLE001 - one project's failure must not stop the others
                logger.exception("project %s: the W&B sweep failed", project_id)
    return queued


def _sweep_project(organization_id: int, project_id: int, now: datetime) -> int:
    cursor, _ = WandbCursor.objects.get_or_create(
        project_id=project_id,
        defaults={"organization_id": organization_id, "runs_seen_until": now, "scores_seen_until": now},
    )
    ended = list(
        Run.objects.filter(
            project_id=project_id,
            status__in=ENDED,
            updated_at__gte=cursor.runs_seen_until - OVERLAP,
            updated_at__lte=now,
        )
        .exclude(Exists(WandbExport.objects.filter(run_id=OuterRef("pk"))))
        .order_by("updated_at", "id")
        .values_list("pk", "updated_at")[:MAX_RUNS_PER_SWEEP]
    )
    claimed = _claim(organization_id, project_id, [pk for pk, _ in ended])
    # A backlog drains over several sweeps: the cursor moves only past runs handled.
    runs_until = ended[-1][1] if len(ended) == MAX_RUNS_PER_SWEEP else now

    scored = Score.objects.filter(
        project_id=project_id,
        run_id=OuterRef("run_id"),
        created_at__gte=cursor.scores_seen_until - OVERLAP,
        created_at__lte=now,
        created_at__gt=OuterRef("logged_at") - SCORE_MARGIN,
    )
    rescored = list(
        WandbExport.objects.filter(project_id=project_id, run__isnull=False, status=WandbExport.Status.LOGGED)
        .filter(Exists(scored))
        .values_list("pk", "run_id")[:MAX_RUNS_PER_SWEEP]
    )
    again: list[int] = []
    for export_id, run_id in rescored:
        # Nothing updated: a worker or another sweep got there first.
        if WandbExport.objects.filter(pk=export_id, status=WandbExport.Status.LOGGED).update(
            status=WandbExport.Status.QUEUED, updated_at=now
        ):
            again.append(run_id)
    scores_until = now if len(rescored) < MAX_RUNS_PER_SWEEP else cursor.scores_seen_until
    WandbCursor.objects.filter(pk=cursor.pk).update(runs_seen_until=runs_until, scores_seen_until=scores_until)
    enqueue_runs(organization_id, sorted(claimed + again))
    return len(claimed) + len(again)


# --- Logging ----------------------------------------------------------------------------------


def log_runs(*, run_ids: list[int], final: bool = False) -> list[int]:
    """Log these runs to W&B (organization in scope); returns the ids that failed and may
    be retried. Each outcome is recorded on the run's ``WandbExport`` row; ``final`` makes
    a failure final. Runs of a project that no longer logs runs are dropped."""
    runs = list(
        Run.objects.filter(pk__in=run_ids, status__in=ENDED)
        .select_related("project__organization", "executed_version")
        .order_by("id")
    )
    if not runs:
        return []
    organization = runs[0].project.organization
    try:
        saved = credentials(organization)
    except WandbRefused as exc:
        logger.error("runs %s: not logged to W&B: %s", run_ids, exc)
        for run in runs:
            record(project=run.project, run_id=run.pk, status=WandbExport.Status.FAILED, error=str(exc))
        return []
    failed: list[int] = []
    modes: dict[int, bool] = {}
    for run in runs:
        if run.project_id not in modes:
            modes[run.project_id] = saved is not None and _wants_runs(run.organization_id, run.project_id)
        if not modes[run.project_id]:
            # Turned off (or the key deleted) since it was queued: nothing to record.
            WandbExport.objects.filter(run_id=run.pk, status=WandbExport.Status.QUEUED).delete()
            continue
        started = timezone.now()
        try:
            _log(run, saved)
        except Exception as exc:  # noqa: BLE001 - recorded, retried by the task
            logger.warning("run %s: logging to W&B failed: %s", run.pk, exc)
            status = WandbExport.Status.FAILED if final else WandbExport.Status.QUEUED
            record(project=run.project, run_id=run.pk, status=status, error=f"{type(exc).__name__}: {exc}")
            failed.append(run.pk)
            continue
        record(project=run.project, run_id=run.pk, status=WandbExport.Status.LOGGED, logged_at=started)
    return failed


def _log(run: Run, saved: tuple[str, str]) -> None:
    config, summary = run_payload(run, run_scores(run.pk))
    wandb_run = start_run(
        credentials=saved,
        run_id=f"agentops-run-{run.pk}",
        project=run.project.slug,
        name=run.name or run.trace_id,
        group=run.agent_name or None,
        job_type="run",
        config=config,
    )
    try:
        # allow_val_change: a resumed run (a late score) may restate a changed value.
        wandb_run.config.update(config, allow_val_change=True)
        wandb_run.summary.update(summary)
    finally:
        wandb_run.finish()
