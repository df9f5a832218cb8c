"""The pages of human scores and online evaluation: annotation queues (list, create,
review the next run, submit, skip, add runs), the run panel's scores (every source,
scoring a run, adding it to a queue), online rules (list, create, change, turn off,
delete); who may do what, and another organization's queue, run or rule is a 404."""

from __future__ import annotations

import re

import pytest

from agentops.scoping import organization_scope
from evals.models import AnnotationQueue, OnlineRule, QueueEntry, Score
from evals.services.annotations import queue_add_runs, queue_create, submit_scores
from evals.services.online import rule_create
from tests.evals.factories import make_evaluator
from tests.evals.test_annotations import make_runs

BASE = "/o/acme/p/agent/evals"


def text(response) -> str:
    return response.content.decode()


@pytest.fixture
def signed_in(client):
    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


@pytest.fixture
def evaluators(tenant):
    return [
        make_evaluator(tenant.project, "helpful", "human", {"scale": "1-5", "instructions": "Did it <b>help</b>?"}),
        make_evaluator(tenant.project, "correct", "human", {"scale": "pass-fail"}),
        make_evaluator(tenant.project, "tone", "human", {"scale": "0-1"}),
        make_evaluator(tenant.project, "valid_json", "json_valid"),
    ]


def make_queue(tenant, names=("helpful", "correct", "tone"), name="Support") -> AnnotationQueue:
    with organization_scope(tenant.organization):
        return queue_create(project=tenant.project, actor=tenant.owner, name=name, evaluator_ids=list(names))


def fill(queue_runs, tenant, queue):
    with organization_scope(tenant.organization):
        queue_add_runs(queue=queue, actor=tenant.owner, run_ids=[run.pk for run in queue_runs])


# --- Queues --------------------------------------------------------------------------------------


def test_member_creates_a_queue_from_the_list(tenant, evaluators, signed_in):
    client = signed_in(tenant.member)
    page = client.get(f"{BASE}/annotation-queues/")
    assert page.status_code == 200 and 'id="new-queue"' in text(page)
    assert "valid_json" not in text(page)  # only human evaluators are offered
    response = client.post(
        f"{BASE}/annotation-queues/",
        {"name": "Support", "description": "Tone and facts", "evaluators": [evaluators[0].pk, evaluators[1].pk]},
    )
    with organization_scope(tenant.organization):
        queue = AnnotationQueue.objects.get()
    assert response.status_code == 302 and response["Location"] == f"{BASE}/annotation-queues/{queue.pk}/"
    listed = client.get(f"{BASE}/annotation-queues/")
    assert f'id="queue-{queue.pk}"' in text(listed) and "0 done" in text(listed)


def test_a_queue_needs_a_human_evaluator_and_says_how_to_make_one(tenant, signed_in):
    make_evaluator(tenant.project, "valid_json", "json_valid")
    page = signed_in(tenant.member).get(f"{BASE}/annotation-queues/")
    assert 'id="no-human-evaluators"' in text(page)


def test_viewer_sees_queues_but_cannot_create_one(tenant, evaluators, signed_in):
    make_queue(tenant)
    client = signed_in(tenant.viewer)
    page = client.get(f"{BASE}/annotation-queues/")
    assert page.status_code == 200 and "Support" in text(page) and 'id="new-queue"' not in text(page)
    refused = client.post(f"{BASE}/annotation-queues/", {"name": "Mine", "evaluators": [evaluators[0].pk]})
    assert refused.status_code == 403
    with organization_scope(tenant.organization):
        assert AnnotationQueue.objects.count() == 1


def test_the_review_page_shows_the_next_run_with_an_input_per_scale(tenant, evaluators, signed_in):
    queue = make_queue(tenant)
    runs = make_runs(tenant, 2)
    fill(runs, tenant, queue)
    page = signed_in(tenant.member).get(f"{BASE}/annotation-queues/{queue.pk}/")
    body = text(page)
    assert page.status_code == 200
    assert f'data-run-id="{runs[0].pk}"' in body and "question 0" in body and "answer 0" in body
    assert f'href="/o/acme/p/agent/runs/{runs[0].pk}/"' in body
    assert "0 of 2 finished" in body
    helpful, correct, tone = (f"score_{evaluator.pk}" for evaluator in evaluators[:3])
    assert len(re.findall(rf'type="radio" name="{helpful}"', body)) == 5
    assert len(re.findall(rf'type="radio" name="{correct}"', body)) == 2
    assert re.search(rf'type="number" name="{tone}"[^>]*max="1"', body)
    assert "Did it &lt;b&gt;help&lt;/b&gt;?" in body  # a reviewer's instructions are text, never markup
    assert 'value="skip"' in body


def test_submitting_saves_the_scores_and_shows_the_next_run(tenant, evaluators, signed_in):
    queue = make_queue(tenant)
    runs = make_runs(tenant, 2)
    fill(runs, tenant, queue)
    client = signed_in(tenant.member)
    client.get(f"{BASE}/annotation-queues/{queue.pk}/")
    with organization_scope(tenant.organization):
        entry = QueueEntry.objects.get(run=runs[0])
    helpful, correct, tone = (f"score_{evaluator.pk}" for evaluator in evaluators[:3])
    response = client.post(
        f"{BASE}/annotation-queues/{queue.pk}/",
        {"entry": entry.pk, "action": "submit", helpful: "4", correct: "pass", tone: "0.3", "comment": "ok"},
        follow=True,
    )
    body = text(response)
    assert response.status_code == 200 and "Saved your scores" in body
    assert f'data-run-id="{runs[1].pk}"' in body and "1 of 2 finished" in body
    with organization_scope(tenant.organization):
        scores = dict(Score.objects.filter(run=runs[0], author=tenant.member).values_list("name", "value"))
        entry.refresh_from_db()
    assert scores == {"helpful": 0.75, "correct": 1.0, "tone": 0.3}
    assert entry.status == QueueEntry.Status.DONE


def test_submitting_nothing_or_off_the_scale_shows_the_error(tenant, evaluators, signed_in):
    queue = make_queue(tenant)
    fill(make_runs(tenant, 1), tenant, queue)
    client = signed_in(tenant.member)
    with organization_scope(tenant.organization):
        entry = QueueEntry.objects.get()
    empty = client.post(f"{BASE}/annotation-queues/{queue.pk}/", {"entry": entry.pk, "action": "submit"})
    assert empty.status_code == 400 and "Give at least one score." in text(empty)
    tone = f"score_{evaluators[2].pk}"
    off = client.post(f"{BASE}/annotation-queues/{queue.pk}/", {"entry": entry.pk, "action": "submit", tone: "3"})
    assert off.status_code == 400
    with organization_scope(tenant.organization):
        assert not Score.objects.exists()


def test_skipping_shows_the_next_run_and_the_end_says_all_done(tenant, evaluators, signed_in):
    queue = make_queue(tenant)
    runs = make_runs(tenant, 1)
    fill(runs, tenant, queue)
    client = signed_in(tenant.member)
    with organization_scope(tenant.organization):
        entry = QueueEntry.objects.get()
    response = client.post(f"{BASE}/annotation-queues/{queue.pk}/", {"entry": entry.pk, "action": "skip"}, follow=True)
    assert "Skipped run" in text(response) and 'id="queue-finished"' in text(response)
    assert "All done" in text(response)
    entry.refresh_from_db()
    assert entry.status == QueueEntry.Status.SKIPPED


def test_viewer_sees_the_next_run_without_a_form_and_cannot_post(tenant, evaluators, signed_in):
    queue = make_queue(tenant)
    runs = make_runs(tenant, 1)
    fill(runs, tenant, queue)
    client = signed_in(tenant.viewer)
    page = client.get(f"{BASE}/annotation-queues/{queue.pk}/")
    assert f'data-run-id="{runs[0].pk}"' in text(page) and 'id="review-form"' not in text(page)
    assert 'id="review-read-only"' in text(page)
    with organization_scope(tenant.organization):
        entry = QueueEntry.objects.get()
    for data in ({"entry": entry.pk, "action": "skip"}, {"entry": entry.pk, f"score_{evaluators[0].pk}": "3"}):
        assert client.post(f"{BASE}/annotation-queues/{queue.pk}/", data).status_code == 403
    assert client.post(f"{BASE}/annotation-queues/{queue.pk}/runs/", {"run_ids": str(runs[0].pk)}).status_code == 403
    # The viewer's look claimed nothing: a member gets that run.
    member_page = signed_in(tenant.member).get(f"{BASE}/annotation-queues/{queue.pk}/")
    assert f'data-run-id="{runs[0].pk}"' in text(member_page)
    entry.refresh_from_db()
    assert entry.status == QueueEntry.Status.PENDING


def test_runs_are_added_to_a_queue_by_id(tenant, other_tenant, evaluators, signed_in):
    queue = make_queue(tenant)
    runs = make_runs(tenant, 2)
    foreign = make_runs(other_tenant, 1)[0]
    client = signed_in(tenant.member)
    url = f"{BASE}/annotation-queues/{queue.pk}/runs/"
    added = client.post(url, {"run_ids": f"{runs[0].pk}, {runs[1].pk}\n{runs[0].pk}"}, follow=True)
    assert "Added 2 runs" in text(added)
    refused = client.post(url, {"run_ids": f"{foreign.pk}"}, follow=True)
    assert "No runs were added" in text(refused) and str(foreign.pk) in text(refused)
    garbage = client.post(url, {"run_ids": "twelve"}, follow=True)
    assert "whole numbers" in text(garbage)
    with organization_scope(tenant.organization):
        assert QueueEntry.objects.filter(queue=queue).count() == 2


# --- The run panel -------------------------------------------------------------------------------


def test_the_run_panel_shows_every_score_with_its_author_and_reasoning(tenant, evaluators, signed_in):
    run = make_runs(tenant, 1)[0]
    queue = make_queue(tenant)
    make_queue(tenant, name="Other")
    fill([run], tenant, queue)
    with organization_scope(tenant.organization):
        submit_scores(author=tenant.admin, run=run, scores={"helpful": 5}, comment="Clear and <i>kind</i>")
        Score.objects.create(
            organization=tenant.organization, project=tenant.project, run=run, name="valid_json",
            value=0.0, passed=False, source=Score.Source.ONLINE, reasoning="not JSON",
        )  # fmt: skip
    member = signed_in(tenant.member).get(f"{BASE}/runs/{run.pk}/panel/")
    body = text(member)
    assert member.status_code == 200
    assert tenant.admin.email in body and "Clear and &lt;i&gt;kind&lt;/i&gt;" in body and "not JSON" in body
    assert "Online evaluation" in body and 'id="score-run"' in body and 'id="add-run-to-queue"' in body
    assert f"annotation-queues/{queue.pk}/" in body  # the queue it is in
    viewer = text(signed_in(tenant.viewer).get(f"{BASE}/runs/{run.pk}/panel/"))
    assert tenant.admin.email in viewer and 'id="score-run"' not in viewer and 'id="add-run-to-queue"' not in viewer


def test_a_run_is_scored_from_its_page(tenant, evaluators, signed_in):
    run = make_runs(tenant, 1)[0]
    client = signed_in(tenant.member)
    helpful = f"score_{evaluators[0].pk}"
    panel = client.post(f"{BASE}/runs/{run.pk}/score/", {helpful: "2", "comment": "meh"}, HTTP_HX_REQUEST="true")
    assert panel.status_code == 200 and 'id="run-scores-outcome"' in text(panel)
    assert "Saved your scores" in text(panel) and tenant.member.email in text(panel)
    plain = client.post(f"{BASE}/runs/{run.pk}/score/", {helpful: "3"})
    assert plain.status_code == 302 and plain["Location"] == f"/o/acme/p/agent/runs/{run.pk}/"
    with organization_scope(tenant.organization):
        (score,) = Score.objects.filter(run=run)
    assert (score.value, score.author, score.reasoning) == (0.5, tenant.member, "")
    refused = client.post(f"{BASE}/runs/{run.pk}/score/", {}, HTTP_HX_REQUEST="true")
    assert refused.status_code == 200 and "Nothing was saved" in text(refused)


def test_a_run_is_added_to_a_queue_from_its_page(tenant, evaluators, signed_in):
    run = make_runs(tenant, 1)[0]
    queue = make_queue(tenant)
    client = signed_in(tenant.member)
    response = client.post(f"{BASE}/runs/{run.pk}/add-to-queue/", {"queue": queue.pk}, HTTP_HX_REQUEST="true")
    assert response.status_code == 200 and "Added to “Support”" in text(response)
    with organization_scope(tenant.organization):
        assert QueueEntry.objects.filter(queue=queue, run=run).exists()


def test_viewer_cannot_score_or_queue_a_run_from_its_page(tenant, evaluators, signed_in):
    run = make_runs(tenant, 1)[0]
    queue = make_queue(tenant)
    client = signed_in(tenant.viewer)
    assert client.post(f"{BASE}/runs/{run.pk}/score/", {f"score_{evaluators[0].pk}": "2"}).status_code == 403
    assert client.post(f"{BASE}/runs/{run.pk}/add-to-queue/", {"queue": queue.pk}).status_code == 403
    with organization_scope(tenant.organization):
        assert not Score.objects.exists() and not QueueEntry.objects.exists()


# --- Online rules --------------------------------------------------------------------------------


def test_member_creates_changes_turns_off_and_deletes_a_rule(tenant, evaluators, signed_in):
    client = signed_in(tenant.member)
    page = client.get(f"{BASE}/online-rules/")
    assert page.status_code == 200 and 'id="new-rule"' in text(page)
    assert f'value="{evaluators[0].pk}"' not in text(page)  # human evaluators are not offered
    created = client.post(
        f"{BASE}/online-rules/",
        {"evaluator": evaluators[3].pk, "sampling_percent": "12.5", "environment": "production"},
        follow=True,
    )
    with organization_scope(tenant.organization):
        rule = OnlineRule.objects.get()
    assert rule.sampling_rate == 0.125 and rule.filters == {"environment": "production"}
    assert "12.5 %" in text(created) and "env: production" in text(created)

    url = f"{BASE}/online-rules/{rule.pk}/"
    assert client.get(url).status_code == 200
    client.post(url, {"action": "save", "sampling_percent": "50", "tag": "vip"})
    rule.refresh_from_db()
    assert rule.sampling_rate == 0.5 and rule.filters == {"tag": "vip"}
    bad = client.post(url, {"action": "save", "sampling_percent": "150"})
    assert bad.status_code == 400
    client.post(url, {"action": "disable"})
    rule.refresh_from_db()
    assert not rule.enabled
    assert "Turn on" in text(client.get(f"{BASE}/online-rules/"))
    client.post(url, {"action": "delete"})
    with organization_scope(tenant.organization):
        assert not OnlineRule.objects.exists()


def test_viewer_sees_rules_but_cannot_change_them(tenant, evaluators, signed_in):
    with organization_scope(tenant.organization):
        rule = rule_create(project=tenant.project, actor=tenant.owner, evaluator="valid_json", sampling_rate=0.25)
    client = signed_in(tenant.viewer)
    page = client.get(f"{BASE}/online-rules/")
    assert page.status_code == 200 and "25 %" in text(page) and 'id="new-rule"' not in text(page)
    assert (
        client.post(f"{BASE}/online-rules/", {"evaluator": evaluators[3].pk, "sampling_percent": "5"}).status_code
        == 403
    )
    assert client.post(f"{BASE}/online-rules/{rule.pk}/", {"action": "delete"}).status_code == 403
    rule.refresh_from_db()
    assert rule.enabled


# --- Tenant isolation ----------------------------------------------------------------------------


def test_another_organizations_queue_run_and_rule_are_404_on_every_page(tenant, other_tenant, signed_in):
    make_evaluator(other_tenant.project, "helpful", "human", {"scale": "1-5"})
    make_evaluator(other_tenant.project, "valid_json", "json_valid")
    foreign_queue = make_queue(other_tenant, names=("helpful",))
    foreign_run = make_runs(other_tenant, 1)[0]
    with organization_scope(other_tenant.organization):
        foreign_rule = rule_create(project=other_tenant.project, actor=other_tenant.owner, evaluator="valid_json")
    own_queue = make_queue_for_isolation(tenant)
    client = signed_in(tenant.owner)
    gets = [
        f"{BASE}/annotation-queues/{foreign_queue.pk}/",
        f"{BASE}/runs/{foreign_run.pk}/panel/",
        f"{BASE}/online-rules/{foreign_rule.pk}/",
        "/o/globex/p/agent/evals/annotation-queues/",
        "/o/globex/p/agent/evals/online-rules/",
    ]
    for url in gets:
        assert client.get(url).status_code == 404, url
    posts = [
        (f"{BASE}/annotation-queues/{foreign_queue.pk}/", {"entry": "1", "action": "skip"}),
        (f"{BASE}/annotation-queues/{foreign_queue.pk}/runs/", {"run_ids": "1"}),
        (f"{BASE}/runs/{foreign_run.pk}/score/", {"comment": "x"}),
        (f"{BASE}/runs/{foreign_run.pk}/add-to-queue/", {"queue": own_queue.pk}),
        (f"{BASE}/online-rules/{foreign_rule.pk}/", {"action": "delete"}),
    ]
    for url, data in posts:
        assert client.post(url, data).status_code == 404, url
    own_run = make_runs(tenant, 1)[0]
    response = client.post(f"{BASE}/runs/{own_run.pk}/add-to-queue/", {"queue": foreign_queue.pk}, follow=True)
    assert "Choose an annotation queue of this project" in text(response)
    with organization_scope(other_tenant.organization):
        assert OnlineRule.objects.filter(pk=foreign_rule.pk).exists()
        assert not QueueEntry.objects.exists()


def make_queue_for_isolation(tenant) -> AnnotationQueue:
    make_evaluator(tenant.project, "helpful", "human", {"scale": "1-5"})
    return make_queue(tenant, names=("helpful",), name="Own")
