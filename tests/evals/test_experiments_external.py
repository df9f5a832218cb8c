"""Experiments whose results are reported from outside (evals/services/experiments/
external.py): reported outputs scored by the platform's evaluators beside the harness's
own scores, requests all or nothing, completion by the harness."""

from decimal import Decimal

import pytest

from agentops.errors import InvalidRequest
from agentops.scoping import organization_scope
from evals.models import ExperimentResult
from evals.services.experiments import experiment_complete, experiment_start, results_report, score_result
from tests.evals.factories import experiment_setup


@pytest.fixture
def setup(tenant):
    return experiment_setup(tenant)


def test_external_results_are_scored_and_end_the_experiment(tenant, setup):
    agent, dataset, evaluators = setup
    with organization_scope(tenant.organization):
        experiment = experiment_start(
            project=tenant.project, actor=tenant.member, dataset=dataset, evaluators=evaluators[:1], kind="external"
        )
        reported = [
            {
                "item": f"q{i}",
                "output": f"answer to question {i}",
                "latency_ms": 100 + i,
                "cost": "0.001",
                "scores": {"harness_accuracy": 1.0 if i < 8 else 0.0},
            }
            for i in range(10)
        ]
        assert results_report(experiment=experiment, results=reported[:6]) == 6
        for result in ExperimentResult.objects.filter(experiment=experiment, status="scoring"):
            score_result(result_id=result.pk)
        experiment.refresh_from_db()
        assert experiment.status == "running" and experiment.completed_count == 6
        results_report(experiment=experiment, results=reported[6:])
        for result in ExperimentResult.objects.filter(experiment=experiment, status="scoring"):
            score_result(result_id=result.pk)
        experiment.refresh_from_db()
    assert experiment.status == "succeeded"
    assert experiment.summary["metrics"]["harness_accuracy"]["mean"] == 0.8
    assert experiment.summary["metrics"]["mentions"]["mean"] == 0.5  # the platform's evaluator, on the outputs
    assert experiment.total_cost == Decimal("0.010")
    assert experiment.summary["latency_ms"]["p50"] == 104.5


def test_reported_results_are_all_or_nothing(tenant, setup):
    agent, dataset, evaluators = setup
    with organization_scope(tenant.organization):
        experiment = experiment_start(
            project=tenant.project, actor=tenant.member, dataset=dataset, evaluators=evaluators, kind="external"
        )
        for bad, message in [
            ([{"item": "q1", "output": "x"}, {"item": "nope", "output": "y"}], "not items of this experiment"),
            ([{"item": "q1", "output": "x", "scores": {"a": 1.5}}], "from 0 to 1"),
            ([{"item": "q1", "output": "x", "cost": "abc"}], "cost must be a number"),
            ([{"item": "q1"}], "needs an output"),
            ([{"item": "q1", "output": "x"}, {"item": "q1", "output": "y"}], "twice"),
        ]:
            with pytest.raises(InvalidRequest, match=message):
                results_report(experiment=experiment, results=bad)
        assert not ExperimentResult.objects.filter(experiment=experiment).exclude(status="pending").exists()


def test_completing_an_external_experiment_leaves_unreported_items_out(tenant, setup):
    agent, dataset, evaluators = setup
    with organization_scope(tenant.organization):
        experiment = experiment_start(
            project=tenant.project, actor=tenant.member, dataset=dataset, evaluators=evaluators[:1], kind="external"
        )
        results_report(experiment=experiment, results=[{"item": "q0", "output": "question 0"}])
        score_result(result_id=ExperimentResult.objects.get(experiment=experiment, item_key="q0").pk)
        experiment = experiment_complete(experiment=experiment, actor=tenant.member)
    assert experiment.status == "succeeded"
    assert experiment.summary["completion"] == 0.1
    assert experiment.summary["metrics"]["mentions"]["n"] == 1
