"""Rows and drivers for evaluation tests: datasets and evaluators written directly, and
an experiment driven to its end in this process (the same service calls the Celery
tasks make, without a worker)."""

from __future__ import annotations

from evals.models import Dataset, DatasetItem, DatasetVersion, Evaluator, Experiment, ExperimentResult
from runs.models import Run
from runs.services.execute import run_execute


def make_dataset(project, items: list[dict], *, name: str = "qa") -> Dataset:
    """A dataset at version 1 holding ``items`` ({key?, input, expected?, metadata?})."""
    dataset = Dataset.dangerously_unscoped_objects.create(
        organization=project.organization, project=project, name=name, latest_version=1
    )
    DatasetVersion.dangerously_unscoped_objects.create(
        organization=project.organization, project=project, dataset=dataset, number=1, item_count=len(items)
    )
    DatasetItem.dangerously_unscoped_objects.bulk_create(
        DatasetItem(
            organization=project.organization,
            project=project,
            dataset=dataset,
            key=item.get("key", f"item-{index}"),
            input=item["input"],
            expected=item.get("expected"),
            metadata=item.get("metadata", {}),
            added_in=1,
        )
        for index, item in enumerate(items)
    )
    return dataset


def make_evaluator(project, name: str, kind: str, config: dict | None = None, threshold: float = 0.5) -> Evaluator:
    return Evaluator.dangerously_unscoped_objects.create(
        organization=project.organization,
        project=project,
        name=name,
        kind=kind,
        config=config or {},
        pass_threshold=threshold,
    )


def drive(experiment: Experiment, *, max_rounds: int = 10_000) -> Experiment:
    """Run an executed experiment to its end in this process: execute each started
    run, score its result (which starts the next items). Organization in scope."""
    from evals.services.experiments import experiment_advance, score_result

    experiment_advance(experiment_id=experiment.pk)
    for _ in range(max_rounds):
        experiment.refresh_from_db()
        if experiment.ended:
            return experiment
        running = list(
            ExperimentResult.objects.filter(experiment=experiment, status=ExperimentResult.Status.RUNNING)
            .exclude(run__status__in=(Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED))
            .values_list("run_id", flat=True)
        )
        for run_id in running:
            run_execute(run_id=run_id)
        for result_id in ExperimentResult.objects.filter(
            experiment=experiment, status=ExperimentResult.Status.SCORING
        ).values_list("id", flat=True):
            score_result(result_id=result_id)
        if (
            not running
            and not ExperimentResult.objects.filter(
                experiment=experiment, status__in=(ExperimentResult.Status.SCORING,)
            ).exists()
        ):
            experiment_advance(experiment_id=experiment.pk)
    raise AssertionError("the experiment did not end")
