"""Evaluation demo data: a small dataset of sums for the offline demo calculator, two
rule evaluators, and two experiments of the agent over it (run here, before any worker
starts), so a new user finds a leaderboard, an experiment's results and a comparison."""

from __future__ import annotations

from evals.models import Dataset, Evaluator
from evals.services.datasets import dataset_create, items_add
from evals.services.evaluators import evaluator_create
from evals.services.experiments import experiment_run_here, experiment_start
from runs.models import Agent
from runs.services.demo import DEMO_AGENT

DEMO_DATASET = "calculator-qa"
SUMS = [
    ("What is 19 + 23?", 42),
    ("What is (7 * 6) - 2?", 40),
    ("What is 144 / 12?", 12),
    ("What is 2 ** 10?", 1024),
    ("What is (3 + 4) * 5?", 35),
    ("What is 1000 - 1?", 999),
    ("What is 17 * 3?", 51),
    ("What is 81 / 9 + 1?", 10),
]


def demo_evals_seed(*, project, actor=None) -> int:
    """Create the demo dataset, evaluators and experiments unless the dataset exists;
    return how many experiments were run."""
    agent = Agent.objects.filter(project=project, name=DEMO_AGENT).first()
    if agent is None or Dataset.objects.filter(project=project, name=DEMO_DATASET).exists():
        return 0
    dataset = dataset_create(
        project=project, actor=actor, name=DEMO_DATASET, description="Sums the demo calculator should get right."
    )
    items_add(
        dataset=dataset,
        actor=actor,
        items=[
            {"key": f"sum-{n + 1}", "input": question, "expected": str(answer), "metadata": {"topic": "arithmetic"}}
            for n, (question, answer) in enumerate(SUMS)
        ],
        note="demo items",
    )
    evaluators = [
        evaluator_create(
            project=project,
            actor=actor,
            name="correct",
            kind=Evaluator.Kind.CONTAINS,
            description="The answer holds the expected number.",
        )[0],
        evaluator_create(
            project=project,
            actor=actor,
            name="used-calculator",
            kind=Evaluator.Kind.TRAJECTORY,
            config={"tool": "calculator", "max_steps": 8},
            description="Called the calculator, in at most 8 steps.",
        )[0],
    ]
    for branch, concurrency in (("main", 2), ("feature-demo", 4)):
        experiment = experiment_start(
            project=project,
            actor=actor,
            dataset=dataset,
            agent=agent,
            evaluators=evaluators,
            concurrency=concurrency,
            branch=branch,
            name=f"{DEMO_AGENT} on {DEMO_DATASET} ({branch})",
        )
        experiment_run_here(experiment_id=experiment.pk)
    return 2
