"""Rows and drivers for evaluation tests: datasets and evaluators written directly, and
an experiment driven to its end in this process (the same service calls the Celery
tasks make, without a worker)."""

from __future__ import annotations

from agentops.scoping import organization_scope
from evals.models import Dataset, DatasetItem, DatasetVersion, Evaluator, Experiment
from runs.services.agents import agent_create


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


def echo_items(n: int) -> list[dict]:
    # The offline model answers "[offline model] You said: <input>": even items expect
    # words the answer holds, odd items words it does not.
    return [
        {"key": f"q{i}", "input": f"question {i}", "expected": f"question {i}" if i % 2 == 0 else "something else"}
        for i in range(n)
    ]


def experiment_setup(tenant):
    """An agent on the offline model, a dataset of ten ``echo_items`` and two evaluators
    (``mentions``: contains; ``fast``: latency limit), for experiments' tests."""
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
    dataset = make_dataset(tenant.project, echo_items(10))
    contains = make_evaluator(tenant.project, "mentions", "contains")
    fast = make_evaluator(tenant.project, "fast", "latency_limit", {"max_ms": 60_000})
    return agent, dataset, [contains, fast]
