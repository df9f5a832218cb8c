"""Experiments of executed agents: items run with a concurrency limit, scores and
totals, intervals, cancellation, recovery, budgets (results reported from outside:
test_experiments_external.py)."""

from decimal import Decimal

import pytest

from agentops.errors import InvalidRequest, PaymentRequired
from agentops.scoping import organization_scope
from billing.budgets import budget_create, utc_today
from billing.models import UsageDaily
from evals.models import Experiment, ExperimentResult, Score
from evals.services.experiments import (
    experiment_advance,
    experiment_cancel,
    experiment_start,
    on_run_ended,
    score_result,
    stalled_work,
)
from runs.execution import run_execute
from runs.models import Run
from runs.services.agents import agent_create
from tests.evals.factories import drive, experiment_setup, make_evaluator


@pytest.fixture
def setup(tenant):
    return experiment_setup(tenant)


def _start(tenant, setup, **kwargs):
    agent, dataset, evaluators = setup
    fields = {"agent": agent, "evaluators": evaluators, "concurrency": 3, **kwargs}
    return experiment_start(project=tenant.project, actor=tenant.member, dataset=dataset, **fields)


def test_an_executed_experiment_scores_every_item_and_aggregates(tenant, setup):
    with organization_scope(tenant.organization):
        experiment = drive(_start(tenant, setup))
        results = list(ExperimentResult.objects.filter(experiment=experiment).order_by("item_key"))
        scores = Score.objects.filter(result__experiment=experiment)
        runs = Run.objects.filter(pk__in=[r.run_id for r in results])
        assert scores.count() == 20 and runs.count() == 10
        assert set(runs.values_list("environment", flat=True)) == {"experiment"}
    assert experiment.status == "succeeded"
    assert experiment.completed_count == 10 and experiment.error_count == 0
    assert {r.item_key: r.scores["mentions"] for r in results} == {f"q{i}": float(i % 2 == 0) for i in range(10)}
    mentions = experiment.summary["metrics"]["mentions"]
    assert mentions["mean"] == 0.5 and mentions["n"] == 10 and mentions["pass_rate"] == 0.5
    assert 0 < mentions["ci_low"] < 0.5 < mentions["ci_high"] < 1
    assert experiment.summary["metrics"]["fast"]["mean"] == 1.0
    assert experiment.summary["pass_rate"] == 0.5
    assert experiment.summary["latency_ms"]["p50"] is not None
    assert all(r.output.startswith("[offline model]") for r in results)


def test_no_more_items_run_at_once_than_the_concurrency(tenant, setup):
    with organization_scope(tenant.organization):
        experiment = _start(tenant, setup, concurrency=3)
        experiment_advance(experiment_id=experiment.pk)
        experiment_advance(experiment_id=experiment.pk)  # twice: idempotent
        running = ExperimentResult.objects.filter(experiment=experiment, status="running")
        assert running.count() == 3
        first = running.order_by("id").first()
        run_execute(run_id=first.run_id)
        assert ExperimentResult.objects.get(pk=first.pk).status == "scoring"
        score_result(result_id=first.pk)
        # The freed slot started the next item.
        assert ExperimentResult.objects.filter(experiment=experiment, status="running").count() == 3
        assert ExperimentResult.objects.filter(experiment=experiment, status="done").count() == 1


def test_scoring_an_item_stores_it_and_starts_the_next_in_one_transaction(
    tenant, setup, django_assert_max_num_queries, django_capture_on_commit_callbacks
):
    """The item's scores, result and the experiment's totals are stored and the freed slot
    starts the next item in one transaction, in a bounded number of statements; the
    result is exactly as scored, the totals count it once."""
    with organization_scope(tenant.organization):
        experiment = _start(tenant, setup, concurrency=1)
        experiment_advance(experiment_id=experiment.pk)
        first = ExperimentResult.objects.get(experiment=experiment, status="running")
        run_execute(run_id=first.run_id)  # scored inline: outside a task, queued instead
        with django_capture_on_commit_callbacks(execute=False) as callbacks:
            # The result read with its run, the UPDATE that stores it, its scores (delete,
            # insert), the experiment's lock and totals, in flight, next pending, the next
            # run (redaction settings, ingest's five, its executor fields), its result: 16,
            # and the savepoint of the test's own transaction (two).
            with django_assert_max_num_queries(18):
                score_result(result_id=first.pk)
        assert len(callbacks) == 4  # the result announced; the next run announced, sent; the item announced
        first.refresh_from_db()
        run = Run.objects.get(pk=first.run_id)
        experiment.refresh_from_db()
        scores = dict(Score.objects.filter(result=first).values_list("name", "value"))
        started = ExperimentResult.objects.get(experiment=experiment, status="running")
    assert first.status == "done" and first.ended_at is not None and first.updated_at == first.ended_at
    assert first.scores == scores and set(scores) == {"mentions", "fast"}
    assert first.output == run.output and first.cost == run.total_cost and first.latency_ms == run.latency_ms
    assert first.tokens == run.input_tokens + run.output_tokens
    assert experiment.completed_count == 1 and experiment.error_count == 0 and experiment.total_cost == first.cost
    assert started.run_id is not None and started.pk != first.pk
    with organization_scope(tenant.organization):
        score_result(result_id=first.pk)  # again: nothing changes
        experiment.refresh_from_db()
    assert experiment.completed_count == 1


def test_an_ended_run_brings_its_item_to_scoring_in_one_statement(
    tenant, setup, django_assert_num_queries, django_capture_on_commit_callbacks
):
    """The executor tells evals of every run's end: an item's run (and any other run)
    costs one statement there; the item is then being scored, and only its own."""
    with organization_scope(tenant.organization):
        experiment = _start(tenant, setup, concurrency=2)
        experiment_advance(experiment_id=experiment.pk)
        first, second = ExperimentResult.objects.filter(experiment=experiment, status="running").order_by("id")
        run = Run.objects.get(pk=first.run_id)
        with django_capture_on_commit_callbacks(), django_assert_num_queries(1):
            on_run_ended(sender=Run, run=run, status="succeeded")
        statuses = dict(ExperimentResult.objects.filter(pk__in=[first.pk, second.pk]).values_list("pk", "status"))
    assert statuses == {first.pk: "scoring", second.pk: "running"}


def test_cancel_stops_new_items_and_keeps_scored_ones(tenant, setup):
    with organization_scope(tenant.organization):
        experiment = _start(tenant, setup, concurrency=2)
        experiment_advance(experiment_id=experiment.pk)
        first = ExperimentResult.objects.filter(experiment=experiment, status="running").order_by("id").first()
        run_execute(run_id=first.run_id)
        score_result(result_id=first.pk)
        experiment_cancel(experiment=experiment, actor=tenant.member)
        # The running items' runs were cancelled; their results are scored as errors.
        for result in ExperimentResult.objects.filter(experiment=experiment, status="scoring"):
            score_result(result_id=result.pk)
        experiment.refresh_from_db()
        statuses = sorted(ExperimentResult.objects.filter(experiment=experiment).values_list("status", flat=True))
    assert experiment.status == "cancelled"
    assert statuses.count("done") == 1 and statuses.count("error") == 2 and statuses.count("pending") == 7
    assert experiment.summary["completion"] == 0.3


def test_a_failing_agent_fails_the_experiment_with_the_reason(tenant, setup):
    agent, dataset, evaluators = setup
    with organization_scope(tenant.organization):
        broken = agent_create(project=tenant.project, actor=tenant.member, name="broken", model="mistral-small-latest")
        experiment = drive(
            experiment_start(
                project=tenant.project, actor=tenant.member, dataset=dataset, agent=broken, evaluators=evaluators
            )
        )
    assert experiment.status == "failed"
    assert "no Mistral API key" in experiment.error
    assert experiment.error_count == 10


def test_bad_starts_are_refused_with_a_reason(tenant, setup):
    agent, dataset, evaluators = setup
    human = make_evaluator(tenant.project, "helpful", "human", {"scale": "1-5"})
    with organization_scope(tenant.organization):
        with pytest.raises(InvalidRequest, match="scored by people"):
            _start(tenant, setup, evaluators=[human])
        with pytest.raises(InvalidRequest, match="at least one evaluator"):
            _start(tenant, setup, evaluators=[])
        with pytest.raises(InvalidRequest, match="concurrency"):
            _start(tenant, setup, concurrency=0)
        with pytest.raises(InvalidRequest, match="no version 7"):
            _start(tenant, setup, dataset_version_number=7)
        with pytest.raises(InvalidRequest, match="needs an agent"):
            _start(tenant, setup, agent=None)
        approval = agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="careful",
            model="offline",
            tools=["calculator"],
            approval_tools=["calculator"],
        )
        with pytest.raises(InvalidRequest, match="unattended"):
            _start(tenant, setup, agent=approval)
        assert Experiment.objects.count() == 0


def test_a_spent_hard_budget_refuses_an_experiment(tenant, setup):
    with organization_scope(tenant.organization):
        budget_create(organization=tenant.organization, actor=tenant.owner, name="cap", amount="1", hard_limit=True)
        UsageDaily.dangerously_unscoped_objects.create(
            organization=tenant.organization, project=tenant.project, day=utc_today(), model="m", cost=Decimal("1")
        )
        with pytest.raises(PaymentRequired) as caught:
            _start(tenant, setup)
        assert "experiments" in caught.value.message
        assert Experiment.objects.count() == 0


def test_recovery_scores_a_result_whose_run_ended_unnoticed(tenant, setup):
    with organization_scope(tenant.organization):
        experiment = _start(tenant, setup)
        experiment_advance(experiment_id=experiment.pk)
        result = ExperimentResult.objects.filter(experiment=experiment, status="running").first()
        run_execute(run_id=result.run_id)
        # As if the worker died between ending the run and marking its result.
        ExperimentResult.objects.filter(pk=result.pk).update(status="running")
    experiments, results = stalled_work()
    assert (tenant.organization.pk, result.pk) in results
    assert (tenant.organization.pk, experiment.pk) in experiments
    with organization_scope(tenant.organization):
        score_result(result_id=result.pk)
        assert ExperimentResult.objects.get(pk=result.pk).status == "done"


def test_items_of_an_experiment_whose_agent_was_deleted_end_with_the_reason(tenant, setup):
    """The experiment read under its lock without an agent version (deleted: the outer
    join finds none) starts no run; each item ends in error, and the experiment fails."""
    agent, _, _ = setup
    with organization_scope(tenant.organization):
        experiment = _start(tenant, setup)
        agent.delete()
        for _ in range(5):  # each step ends as many items as the concurrency takes
            experiment_advance(experiment_id=experiment.pk)
        experiment.refresh_from_db()
        errors = set(ExperimentResult.objects.filter(experiment=experiment).values_list("error", flat=True))
    assert experiment.agent_version_id is None
    assert errors == {"the experiment's agent version no longer exists"}
    assert experiment.status == "failed" and experiment.error_count == 10
