"""Moving experiments outside the usual chain of signals and tasks: ``stalled_work``
finds what a dead worker dropped (for the periodic ``evals.tasks.recover_experiments``),
and ``experiment_run_here`` runs a whole executed experiment in this process as the
workers would (to seed demo data before any worker runs, and in tests)."""

from __future__ import annotations

from datetime import timedelta

from django.utils import timezone

from agentops.scoping import dangerously_unscoped
from evals.models import Experiment, ExperimentResult
from evals.services.experiments.advance import experiment_advance
from evals.services.experiments.item_scoring import score_result
from runs.execution import run_execute
from runs.models import Run

# A result being scored for longer than this was dropped by a dead worker: score again.
SCORING_STALL = timedelta(minutes=10)


def experiment_run_here(*, experiment_id: int, max_rounds: int = 100_000) -> Experiment:
    """Run an executed experiment to its end in this process, as the workers would:
    execute each started run, score its result (which starts the next items). For
    seeding demo data before any worker runs, and for tests."""
    experiment_advance(experiment_id=experiment_id)
    for _ in range(max_rounds):
        experiment = Experiment.objects.get(pk=experiment_id)
        if experiment.ended:
            return experiment
        results = ExperimentResult.objects.filter(experiment=experiment)
        running = list(
            results.filter(status=ExperimentResult.Status.RUNNING)
            .exclude(run__status__in=Run.ENDED)
            .values_list("run_id", flat=True)
        )
        for run_id in running:
            run_execute(run_id=run_id)
        scoring = list(results.filter(status=ExperimentResult.Status.SCORING).values_list("id", flat=True))
        for result_id in scoring:
            score_result(result_id=result_id)
        if not running and not scoring:
            experiment_advance(experiment_id=experiment_id)
    raise RuntimeError(f"experiment {experiment_id} did not end in {max_rounds} rounds")


def stalled_work() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(experiments to advance, results to score again) across organizations: results
    whose run ended but were never queued for scoring (the worker died between the
    two), results stuck in scoring, and running experiments (advancing is idempotent)."""
    cutoff = timezone.now() - SCORING_STALL
    with dangerously_unscoped("recovery looks at every organization's experiments"):
        experiments = list(
            Experiment.objects.filter(status__in=(Experiment.Status.QUEUED, Experiment.Status.RUNNING)).values_list(
                "organization_id", "id"
            )
        )
        ended_runs = ExperimentResult.objects.filter(status=ExperimentResult.Status.RUNNING, run__status__in=Run.ENDED)
        stuck = ExperimentResult.objects.filter(status=ExperimentResult.Status.SCORING, updated_at__lt=cutoff)
        results = list(ended_runs.values_list("organization_id", "id")) + list(
            stuck.values_list("organization_id", "id")
        )
    if results:
        ExperimentResult.dangerously_unscoped_objects.filter(id__in=[rid for _, rid in results]).update(
            status=ExperimentResult.Status.SCORING, updated_at=timezone.now()
        )
    return experiments, results
