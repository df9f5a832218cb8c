"""Human scores: annotation queues (adding runs, the next run per reviewer, submitting,
replacing one's own score, skipping), the scales' normalisation, and scores given
straight from a run's page."""

from __future__ import annotations

import pytest

from agentops.errors import Conflict, Forbidden, InvalidRequest
from agentops.models import AuditEvent
from agentops.scoping import organization_scope
from evals.models import QueueEntry, Score
from evals.services.annotations import (
    next_entry,
    queue_add_runs,
    queue_create,
    queue_progress,
    skip_entry,
    submit_scores,
)
from runs.models import Run
from tests.evals.factories import make_evaluator


def make_runs(tenant, count: int, **fields) -> list[Run]:
    """Ended runs of the tenant's project, each with an input and an output."""
    start = Run.dangerously_unscoped_objects.filter(project=tenant.project).count()
    return [
        Run.dangerously_unscoped_objects.create(
            organization=tenant.organization,
            project=tenant.project,
            trace_id=f"trace-{tenant.organization.slug}-{start + index}",
            name=f"run {start + index}",
            status=fields.get("status", Run.Status.SUCCEEDED),
            input={"question": f"question {index}"},
            output=f"answer {index}",
        )
        for index in range(count)
    ]


@pytest.fixture
def evaluators(tenant):
    return {
        "helpful": make_evaluator(tenant.project, "helpful", "human", {"scale": "1-5"}, threshold=0.5),
        "correct": make_evaluator(tenant.project, "correct", "human", {"scale": "pass-fail"}),
        "tone": make_evaluator(tenant.project, "tone", "human", {"scale": "0-1"}, threshold=0.7),
        "auto": make_evaluator(tenant.project, "auto", "json_valid"),
    }


@pytest.fixture
def queue(tenant, evaluators):
    with organization_scope(tenant.organization):
        return queue_create(
            project=tenant.project,
            actor=tenant.member,
            name="Support answers",
            evaluator_ids=[evaluators["helpful"].pk, "correct"],
        )


def test_a_queue_is_scored_with_human_evaluators_only(tenant, evaluators, queue):
    with organization_scope(tenant.organization):
        assert sorted(queue.evaluators.values_list("name", flat=True)) == ["correct", "helpful"]
        with pytest.raises(InvalidRequest, match="auto"):
            queue_create(project=tenant.project, actor=tenant.member, name="x", evaluator_ids=["auto"])
        with pytest.raises(InvalidRequest, match="at least one"):
            queue_create(project=tenant.project, actor=tenant.member, name="x", evaluator_ids=[])
        with pytest.raises(Conflict):
            queue_create(project=tenant.project, actor=tenant.member, name="Support answers", evaluator_ids=["tone"])
        assert AuditEvent.objects.filter(action="annotation_queue.create", target_id=str(queue.pk)).exists()


def test_another_projects_evaluator_cannot_score_a_queue(tenant, other_tenant):
    foreign = make_evaluator(other_tenant.project, "helpful", "human", {"scale": "1-5"})
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match=str(foreign.pk)):
        queue_create(project=tenant.project, actor=tenant.member, name="x", evaluator_ids=[foreign.pk])


def test_adding_runs_ignores_duplicates_and_names_unknown_ids(tenant, other_tenant, queue):
    runs = make_runs(tenant, 3)
    foreign = make_runs(other_tenant, 1)[0]
    with organization_scope(tenant.organization):
        assert queue_add_runs(queue=queue, actor=tenant.member, run_ids=[runs[0].pk, runs[1].pk, runs[0].pk]) == 2
        assert queue_add_runs(queue=queue, actor=tenant.member, run_ids=[runs[1].pk, runs[2].pk]) == 1
        with pytest.raises(InvalidRequest) as refused:
            queue_add_runs(queue=queue, actor=tenant.member, run_ids=[runs[0].pk, foreign.pk, 999_999_999])
        assert str(foreign.pk) in refused.value.message and "999999999" in refused.value.message
        assert queue_progress(queue=queue) == {"total": 3, "done": 0, "skipped": 0, "pending": 3}


def test_reviewers_get_the_oldest_waiting_run_and_not_each_others(tenant, queue):
    runs = make_runs(tenant, 3)
    with organization_scope(tenant.organization):
        queue_add_runs(queue=queue, actor=tenant.member, run_ids=[run.pk for run in runs])
        first = next_entry(queue=queue, user=tenant.member)
        assert first.run_id == runs[0].pk
        # Asking again (reloading the page) gives the same run back.
        assert next_entry(queue=queue, user=tenant.member).pk == first.pk
        second = next_entry(queue=queue, user=tenant.admin)
        third = next_entry(queue=queue, user=tenant.owner)
        assert {first.run_id, second.run_id, third.run_id} == {run.pk for run in runs}
        # A fourth reviewer finds every waiting run taken.
        assert next_entry(queue=queue, user=tenant.viewer) is None


def test_submitting_scores_records_the_author_normalises_and_moves_on(tenant, queue, evaluators):
    runs = make_runs(tenant, 2)
    with organization_scope(tenant.organization):
        queue_add_runs(queue=queue, actor=tenant.member, run_ids=[run.pk for run in runs])
        entry = next_entry(queue=queue, user=tenant.member)
        saved = submit_scores(
            author=tenant.member, entry=entry, scores={"helpful": 4, "correct": "fail"}, comment="too long"
        )
        by_name = {score.name: score for score in saved}
        assert by_name["helpful"].value == 0.75 and by_name["helpful"].passed is True
        assert by_name["correct"].value == 0.0 and by_name["correct"].passed is False
        for score in saved:
            assert score.source == Score.Source.HUMAN and score.author == tenant.member
            assert score.reasoning == "too long" and score.run_id == runs[0].pk
        entry.refresh_from_db()
        assert entry.status == QueueEntry.Status.DONE and entry.completed_by == tenant.member
        assert entry.completed_at is not None
        assert next_entry(queue=queue, user=tenant.member).run_id == runs[1].pk
        assert queue_progress(queue=queue)["done"] == 1
        assert AuditEvent.objects.filter(action="score.human", target_id=str(runs[0].pk)).exists()


@pytest.mark.parametrize(
    ("name", "raw", "value"),
    [
        ("helpful", 1, 0.0),
        ("helpful", "5", 1.0),
        ("helpful", 3, 0.5),
        ("correct", "pass", 1.0),
        ("correct", True, 1.0),
        ("correct", 0, 0.0),
        ("tone", 0.65, 0.65),
        ("tone", "1", 1.0),
    ],
)
def test_each_scale_is_normalised_to_0_1(tenant, evaluators, name, raw, value):
    run = make_runs(tenant, 1)[0]
    with organization_scope(tenant.organization):
        (score,) = submit_scores(author=tenant.member, run=run, scores={name: raw})
    assert score.value == pytest.approx(value)
    assert score.passed is (value >= evaluators[name].pass_threshold)


@pytest.mark.parametrize(
    ("name", "raw"), [("helpful", 6), ("helpful", 2.5), ("correct", "maybe"), ("tone", 1.5), ("tone", "high")]
)
def test_a_value_off_the_scale_is_refused_with_the_evaluator_named(tenant, evaluators, name, raw):
    run = make_runs(tenant, 1)[0]
    with organization_scope(tenant.organization):
        with pytest.raises(InvalidRequest, match=f"^{name}: "):
            submit_scores(author=tenant.member, run=run, scores={name: raw})
        assert not Score.objects.filter(run=run).exists()


def test_a_second_submission_replaces_the_authors_own_score_only(tenant, evaluators):
    run = make_runs(tenant, 1)[0]
    with organization_scope(tenant.organization):
        submit_scores(author=tenant.member, run=run, scores={"helpful": 2})
        submit_scores(author=tenant.admin, run=run, scores={"helpful": 5})
        submit_scores(author=tenant.member, run=run, scores={"helpful": 4}, comment="changed my mind")
        scores = {score.author_id: score for score in Score.objects.filter(run=run, name="helpful")}
    assert len(scores) == 2
    assert scores[tenant.member.pk].value == 0.75 and scores[tenant.member.pk].reasoning == "changed my mind"
    assert scores[tenant.admin.pk].value == 1.0


def test_scores_name_only_human_evaluators_of_the_project(tenant, evaluators):
    run = make_runs(tenant, 1)[0]
    with organization_scope(tenant.organization):
        with pytest.raises(InvalidRequest, match="auto"):
            submit_scores(author=tenant.member, run=run, scores={"auto": 1})
        with pytest.raises(InvalidRequest, match="nope"):
            submit_scores(author=tenant.member, run=run, scores={"helpful": 3, "nope": 1})
        with pytest.raises(InvalidRequest):
            submit_scores(author=tenant.member, run=run, scores={})
        assert not Score.objects.filter(run=run).exists()


def test_an_api_key_cannot_author_a_human_score(tenant, evaluators, make_api_key):
    run = make_runs(tenant, 1)[0]
    key, _raw = make_api_key(tenant.project)
    with organization_scope(tenant.organization):
        with pytest.raises(Forbidden, match="signed-in person"):
            submit_scores(author=key, run=run, scores={"helpful": 3})
        with pytest.raises(Forbidden):
            submit_scores(author=None, run=run, scores={"helpful": 3})


def test_skipping_takes_a_run_out_of_the_queue_for_everyone(tenant, queue):
    runs = make_runs(tenant, 2)
    with organization_scope(tenant.organization):
        queue_add_runs(queue=queue, actor=tenant.member, run_ids=[run.pk for run in runs])
        entry = next_entry(queue=queue, user=tenant.member)
        skipped = skip_entry(entry=entry, actor=tenant.member)
        assert skipped.status == QueueEntry.Status.SKIPPED and skipped.completed_by == tenant.member
        assert next_entry(queue=queue, user=tenant.member).run_id == runs[1].pk
        assert next_entry(queue=queue, user=tenant.admin) is None  # the other run is held by the member
        assert queue_progress(queue=queue) == {"total": 2, "done": 0, "skipped": 1, "pending": 1}
        assert not Score.objects.filter(run=runs[0]).exists()


def test_a_run_scored_by_someone_else_first_stays_done_by_them(tenant, queue):
    run = make_runs(tenant, 1)[0]
    with organization_scope(tenant.organization):
        queue_add_runs(queue=queue, actor=tenant.member, run_ids=[run.pk])
        entry = QueueEntry.objects.get(queue=queue, run=run)
        submit_scores(author=tenant.admin, entry=entry, scores={"helpful": 5})
        submit_scores(author=tenant.member, entry=entry, scores={"helpful": 1})
        entry.refresh_from_db()
        assert entry.completed_by == tenant.admin
        assert Score.objects.filter(run=run, source=Score.Source.HUMAN).count() == 2


def test_a_run_whose_claim_ran_out_goes_to_whoever_takes_it_first(tenant, queue, monkeypatch):
    """A reviewer comes back to the run they held after its claim ran out, while another
    reviewer claims it: whichever claim lands first keeps the run, the other reviewer gets
    the next one (here the second reviewer's claim lands between the first one's read and
    write)."""
    from django.core.cache import cache

    from evals.services import annotations

    runs = make_runs(tenant, 2)
    with organization_scope(tenant.organization):
        queue_add_runs(queue=queue, actor=tenant.member, run_ids=[run.pk for run in runs])
        held = next_entry(queue=queue, user=tenant.member)
        claim = annotations._claim_key(held.pk)
        cache.delete(claim)  # the member's claim ran out

        class AdminClaimsMeanwhile:
            """The cache, but the admin's claim lands right after the member reads the claim."""

            def __getattr__(self, name):
                return getattr(cache, name)

            def get(self, key, *args, **kwargs):
                value = cache.get(key, *args, **kwargs)
                if key == claim:
                    assert cache.add(claim, tenant.admin.pk, annotations.CLAIM_SECONDS)
                return value

        monkeypatch.setattr(annotations, "cache", AdminClaimsMeanwhile())
        mine = next_entry(queue=queue, user=tenant.member)
        monkeypatch.setattr(annotations, "cache", cache)
        assert mine.pk != held.pk and mine.run_id == runs[1].pk
        assert cache.get(claim) == tenant.admin.pk  # the admin keeps the run
