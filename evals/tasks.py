"""Celery entry points of evaluations: thin, each calls a service and is safe to run twice."""

import logging

from celery import shared_task

from agentops.scoping import organization_scope

logger = logging.getLogger(__name__)

# W&B logging retries after 30 s, 60 s, 120 s... (a W&B outage, a slow network).
WANDB_RETRY_SECONDS = 30


@shared_task(ignore_result=True)  # nobody reads it: no result written to Redis per item
def advance_experiment(organization_id: int, experiment_id: int) -> None:
    """Start the next items of an experiment, or finish it."""
    from evals.services.experiments import experiment_advance

    with organization_scope(organization_id):
        experiment_advance(experiment_id=experiment_id)


@shared_task(ignore_result=True)  # nobody reads it: no result written to Redis per item
def score_result(organization_id: int, result_id: int) -> None:
    """Score one item of an experiment whose run ended (or whose output was reported)."""
    from evals.services.experiments import score_result as score

    with organization_scope(organization_id):
        score(result_id=result_id)


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=3)
def experiment_ended(self, organization_id: int, experiment_id: int) -> None:
    """After an experiment ends: log its metrics to Weights & Biases when the
    organization configured a key (a failure is retried, then recorded)."""
    from evals.services.wandb_export import log_experiment

    final = self.request.retries >= self.max_retries
    with organization_scope(organization_id):
        try:
            log_experiment(experiment_id=experiment_id, final=final)
        except Exception as exc:
            if final:
                raise
            raise self.retry(exc=exc, countdown=WANDB_RETRY_SECONDS * 2**self.request.retries) from exc


@shared_task
def recover_experiments() -> int:
    """Pick up what a dead worker dropped (every minute): results to score again, and
    every unfinished experiment advanced (idempotent)."""
    from evals.services.experiments import stalled_work

    experiments, results = stalled_work()
    for organization_id, result_id in results:
        score_result.delay(organization_id, result_id)
    for organization_id, experiment_id in experiments:
        advance_experiment.delay(organization_id, experiment_id)
    return len(results)


@shared_task
def score_online_runs() -> int:
    """Score the sampled share of recently ended runs for every online rule (every 30 s)."""
    from evals.services.online import score_recent_runs

    return score_recent_runs()


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=5)
def log_runs_to_wandb(self, organization_id: int, run_ids: list[int]) -> int:
    """Log ended runs to Weights & Biases (queued by the run_ended receiver and the sweep);
    the runs that failed are retried alone, and recorded as failed once retries are spent."""
    from evals.services.wandb_export import log_runs

    final = self.request.retries >= self.max_retries
    with organization_scope(organization_id):
        failed = log_runs(run_ids=run_ids, final=final)
    if failed and not final:
        raise self.retry(args=(organization_id, failed), countdown=WANDB_RETRY_SECONDS * 2**self.request.retries)
    return len(run_ids) - len(failed)


@shared_task
def sweep_wandb() -> int:
    """Queue for W&B the ended runs and the newly scored runs of every project that logs
    runs (every 30 s): ingested runs send no signal. And send again the loggings whose
    message was lost (the broker down when they were queued, a dead worker)."""
    from evals.services.wandb_export import send_lost_exports, sweep

    send_lost_exports()
    return sweep()


@shared_task
def run_export(organization_id: int, export_id: int) -> str | None:
    """Run one export job (bulk Parquet export...): claims it, so a second delivery of
    the same task does nothing while the first runs."""
    from evals.bulk_export.runner import export_run

    with organization_scope(organization_id):
        return export_run(export_id=export_id, worker=run_export.request.hostname or "")


@shared_task
def start_due_exports() -> int:
    """Queue the exports of schedules whose period has ended (every minute)."""
    from evals.bulk_export.services import start_due_exports as start

    return start()


@shared_task
def recover_exports() -> int:
    """Send again the exports no worker is on (every minute): queued ones whose message
    was lost (the broker was down when they were created or retried), running ones whose
    worker died."""
    from evals.bulk_export.services import exports_to_recover

    lost = exports_to_recover()
    for organization_id, export_id in lost:
        run_export.delay(organization_id, export_id)
    return len(lost)
