"""Rows and drivers for evaluation tests: datasets and evaluators written directly, and
an experiment driven to its end in this process (the same service calls the Celery
tasks make, without a worker)."""

from __future__ import annotations

from evals.models import Dataset, DatasetItem, DatasetVersion, Evaluator, Experiment


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


def drive(experiment: Experiment) -> Experiment:
    """Run an executed experiment to its end in this process (organization in scope)."""
    from evals.services.experiments import experiment_run_here

    return experiment_run_here(experiment_id=experiment.pk)
