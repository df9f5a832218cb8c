"""Online evaluation: rules score a sampled share of the project's ended runs in the
background, deterministically (a second scan picks the same runs), once per run, with
filters, a cursor with an overlap, bounded work per call, and each organization's rules
in its own scope."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.errors import InvalidRequest, NotFound
from agentops.models import AuditEvent
from agentops.scoping import organization_scope
from evals.models import ExperimentResult, OnlineRule, Score
from evals.services import online
from evals.services.online import rule_create, rule_delete, rule_update, sample_point, score_recent_runs
from runs.models import Run
from tests.evals.factories import make_dataset, make_evaluator


def make_run(tenant, index: int, **fields) -> Run:
    values = {
        "status": Run.Status.SUCCEEDED,
        "output": '{"ok": true}' if index % 2 == 0 else "not json",
        "updated_at": timezone.now(),
        **fields,
    }
    return Run.dangerously_unscoped_objects.create(
        organization=tenant.organization,
        project=tenant.project,
        trace_id=f"trace-{tenant.organization.slug}-{index}",
        input=f"question {index}",
        **values,
    )


@pytest.fixture
def evaluator(tenant):
    return make_evaluator(tenant.project, "valid_json", "json_valid")


def make_rule(tenant, evaluator, **fields) -> OnlineRule:
    with organization_scope(tenant.organization):
        rule = rule_create(project=tenant.project, actor=tenant.member, evaluator=evaluator.pk, **fields)
    # Start the cursor in the past, so runs made by the test count as incoming.
    OnlineRule.dangerously_unscoped_objects.filter(pk=rule.pk).update(cursor_at=timezone.now() - timedelta(hours=1))
    rule.refresh_from_db()
    return rule


def online_scores(tenant):
    return Score.dangerously_unscoped_objects.filter(project=tenant.project, source=Score.Source.ONLINE)


def test_a_rule_scores_ended_runs_with_its_evaluator(tenant, evaluator):
    rule = make_rule(tenant, evaluator)
    good, bad = make_run(tenant, 0), make_run(tenant, 1)
    running = make_run(tenant, 2, status=Run.Status.RUNNING)
    assert score_recent_runs() == 2
    scores = {score.run_id: score for score in online_scores(tenant)}
    assert set(scores) == {good.pk, bad.pk} and running.pk not in scores
    assert scores[good.pk].value == 1.0 and scores[good.pk].passed is True
    assert scores[bad.pk].value == 0.0 and scores[bad.pk].passed is False
    for score in scores.values():
        assert score.name == "valid_json" and score.evaluator_id == evaluator.pk and score.author_id is None
        assert score.organization_id == tenant.organization.pk and score.details["rule"] == rule.pk
    rule.refresh_from_db()
    assert rule.scored_count == 2
    assert score_recent_runs() == 0  # nothing new


def test_sampling_is_deterministic_and_a_second_scan_scores_no_more(tenant, evaluator):
    rule = make_rule(tenant, evaluator, sampling_rate=0.5)
    runs = [make_run(tenant, index) for index in range(200)]
    first = score_recent_runs()
    assert 70 <= first <= 130
    expected = {run.pk for run in runs if sample_point(rule.pk, run.pk) < 0.5}
    assert set(online_scores(tenant).values_list("run_id", flat=True)) == expected
    # The database and Python agree on the choice, and a re-scan changes nothing.
    OnlineRule.dangerously_unscoped_objects.filter(pk=rule.pk).update(cursor_at=timezone.now() - timedelta(hours=1))
    assert score_recent_runs() == 0
    rule.refresh_from_db()
    assert rule.scored_count == first


def test_rate_zero_scores_nothing_and_rate_one_everything(tenant, evaluator):
    none = make_rule(tenant, evaluator, sampling_rate=0)
    for index in range(10):
        make_run(tenant, index)
    assert score_recent_runs() == 0
    with organization_scope(tenant.organization):
        rule_delete(rule=none, actor=tenant.member)
    make_rule(tenant, evaluator, sampling_rate=1)
    assert score_recent_runs() == 10


def test_filters_pick_the_runs_a_rule_scores(tenant, evaluator):
    make_rule(tenant, evaluator, filters={"agent_name": "support", "environment": "production", "tag": "vip"})
    match = make_run(tenant, 0, agent_name="support", environment="production", tags=["vip", "eu"])
    make_run(tenant, 1, agent_name="support", environment="staging", tags=["vip"])
    make_run(tenant, 2, agent_name="sales", environment="production", tags=["vip"])
    make_run(tenant, 3, agent_name="support", environment="production", tags=["eu"])
    assert score_recent_runs() == 1
    assert list(online_scores(tenant).values_list("run_id", flat=True)) == [match.pk]


def test_runs_that_ended_before_the_rule_existed_are_not_scored(tenant, evaluator):
    old = make_run(tenant, 0, updated_at=timezone.now() - timedelta(hours=1))
    with organization_scope(tenant.organization):
        rule_create(project=tenant.project, actor=tenant.member, evaluator="valid_json")
    new = make_run(tenant, 1)
    assert score_recent_runs() == 1
    assert list(online_scores(tenant).values_list("run_id", flat=True)) == [new.pk]
    assert old.pk != new.pk


def test_a_run_that_ends_after_a_scan_is_scored_by_the_next(tenant, evaluator):
    rule = make_rule(tenant, evaluator)
    run = make_run(tenant, 0, status=Run.Status.RUNNING)
    assert score_recent_runs() == 0
    rule.refresh_from_db()
    assert rule.cursor_at >= run.updated_at
    Run.dangerously_unscoped_objects.filter(pk=run.pk).update(status=Run.Status.FAILED, updated_at=timezone.now())
    assert score_recent_runs() == 1


def test_the_overlap_catches_a_run_stamped_just_before_the_cursor(tenant, evaluator):
    rule = make_rule(tenant, evaluator)
    assert score_recent_runs() == 0
    rule.refresh_from_db()
    # Its transaction committed after the scan, with a time a little before the cursor.
    late = make_run(tenant, 0, updated_at=rule.cursor_at - timedelta(seconds=30))
    too_late = make_run(tenant, 1, updated_at=rule.cursor_at - online.OVERLAP - timedelta(seconds=30))
    assert score_recent_runs() == 1
    assert list(online_scores(tenant).values_list("run_id", flat=True)) == [late.pk]
    assert too_late.pk != late.pk


def test_work_per_call_is_bounded_and_a_backlog_drains(tenant, evaluator, monkeypatch):
    monkeypatch.setattr(online, "MAX_RUNS_PER_RULE", 4)
    make_rule(tenant, evaluator)
    stamp = timezone.now()
    for index in range(10):
        make_run(tenant, index, updated_at=stamp)  # the same time: the cursor alone cannot separate them
    assert [score_recent_runs() for _ in range(4)] == [4, 4, 2, 0]
    assert online_scores(tenant).count() == 10


def test_experiment_runs_are_not_scored_online(tenant, evaluator):
    make_rule(tenant, evaluator)
    production = make_run(tenant, 0)
    from_experiment = make_run(tenant, 1)
    dataset = make_dataset(tenant.project, [{"key": "a", "input": "question"}])
    with organization_scope(tenant.organization):
        from evals.models import DatasetItem, Experiment

        experiment = Experiment.objects.create(
            organization=tenant.organization,
            project=tenant.project,
            dataset=dataset,
            dataset_version=dataset.versions.get(),
            name="baseline",
        )
        ExperimentResult.objects.create(
            organization=tenant.organization,
            project=tenant.project,
            experiment=experiment,
            item=DatasetItem.objects.get(dataset=dataset),
            item_key="a",
            run=from_experiment,
        )
    assert score_recent_runs() == 1
    assert list(online_scores(tenant).values_list("run_id", flat=True)) == [production.pk]


def test_two_rules_with_one_evaluator_score_a_run_once(tenant, evaluator):
    make_rule(tenant, evaluator)
    make_rule(tenant, evaluator, filters={"environment": "production"})
    make_run(tenant, 0, environment="production")
    assert score_recent_runs() == 1
    assert online_scores(tenant).count() == 1


def test_a_disabled_rule_scores_nothing_and_restarts_from_now(tenant, evaluator):
    rule = make_rule(tenant, evaluator)
    with organization_scope(tenant.organization):
        rule_update(rule=rule, actor=tenant.member, enabled=False)
    make_run(tenant, 0, updated_at=timezone.now() - timedelta(minutes=10))
    assert score_recent_runs() == 0
    with organization_scope(tenant.organization):
        rule = rule_update(rule=rule, actor=tenant.member, enabled=True)
    assert rule.cursor_at > timezone.now() - timedelta(minutes=1)
    assert score_recent_runs() == 0  # ended while the rule was off
    make_run(tenant, 1)
    assert score_recent_runs() == 1


def test_every_organizations_rules_are_scanned_in_their_own_scope(tenant, other_tenant, evaluator):
    other_evaluator = make_evaluator(other_tenant.project, "valid_json", "json_valid")
    make_rule(tenant, evaluator)
    make_rule(other_tenant, other_evaluator)
    mine, theirs = make_run(tenant, 0), make_run(other_tenant, 0)
    assert score_recent_runs() == 2
    assert list(online_scores(tenant).values_list("run_id", flat=True)) == [mine.pk]
    assert list(online_scores(other_tenant).values_list("run_id", flat=True)) == [theirs.pk]
    assert online_scores(other_tenant).get().organization_id == other_tenant.organization.pk


def test_rules_need_an_automatic_evaluator_of_the_project_and_valid_settings(tenant, other_tenant, evaluator):
    make_evaluator(tenant.project, "helpful", "human", {"scale": "1-5"})
    foreign = make_evaluator(other_tenant.project, "theirs", "json_valid")
    with organization_scope(tenant.organization):
        create = dict(project=tenant.project, actor=tenant.member)
        with pytest.raises(InvalidRequest, match="people"):
            rule_create(**create, evaluator="helpful")
        with pytest.raises(NotFound):
            rule_create(**create, evaluator=foreign.pk)
        for rate in (-0.1, 1.5, "lots", True):
            with pytest.raises(InvalidRequest, match="sampling_rate"):
                rule_create(**create, evaluator=evaluator.pk, sampling_rate=rate)
        with pytest.raises(InvalidRequest, match="model"):
            rule_create(**create, evaluator=evaluator.pk, filters={"model": "x"})
        rule = rule_create(
            **create, evaluator="valid_json", sampling_rate=0.25, filters={"tag": " vip ", "environment": ""}
        )
        assert rule.filters == {"tag": "vip"} and rule.sampling_rate == 0.25
        updated = rule_update(rule=rule, actor=tenant.member, sampling_rate=0.75, filters={})
        assert updated.sampling_rate == 0.75 and updated.filters == {}
        actions = set(AuditEvent.objects.filter(target_id=str(rule.pk)).values_list("action", flat=True))
        assert actions == {"online_rule.create", "online_rule.update"}


def test_runs_seen_at_rate_zero_are_not_scored_when_the_rate_goes_up(tenant, evaluator):
    rule = make_rule(tenant, evaluator, sampling_rate=0)
    make_run(tenant, 0, updated_at=timezone.now() - timedelta(minutes=10))
    assert score_recent_runs() == 0
    with organization_scope(tenant.organization):
        rule_update(rule=rule, actor=tenant.member, sampling_rate=1)
    assert score_recent_runs() == 0
    make_run(tenant, 1)
    assert score_recent_runs() == 1
