"""The annotation and online evaluation API: queues (create, read, add runs, the next
run), a run's scores (read every source; post human ones as a signed-in person only),
online rules (create, read, change, delete); roles and API key scopes; another
organization's queue, run or rule is a 404 on every endpoint."""

from __future__ import annotations

import pytest

from agentops.scoping import organization_scope
from evals.models import AnnotationQueue, OnlineRule, QueueEntry, Score
from evals.services.annotations import queue_add_runs, queue_create, submit_scores
from evals.services.online import rule_create
from tests.evals.factories import make_evaluator
from tests.evals.test_annotations import make_runs
from tests.isolation import CreateIsolation, ListIsolation, ReadIsolation, TenantIsolationChecks

BASE = "/api/v1/projects/acme/agent"


def base_url(tenant) -> str:
    return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}"


def ensure_evaluators(tenant) -> None:
    """A human and an automatic evaluator in ``tenant``'s project (once)."""
    with organization_scope(tenant.organization):
        if not tenant.project.evaluators.filter(name="helpful").exists():
            make_evaluator(tenant.project, "helpful", "human", {"scale": "1-5"})
            make_evaluator(tenant.project, "correct", "human", {"scale": "pass-fail"})
            make_evaluator(tenant.project, "valid_json", "json_valid")


def make_queue(tenant, name: str = "Review") -> AnnotationQueue:
    ensure_evaluators(tenant)
    with organization_scope(tenant.organization):
        return queue_create(project=tenant.project, actor=tenant.owner, name=name, evaluator_ids=["helpful", "correct"])


def make_rule(tenant) -> OnlineRule:
    ensure_evaluators(tenant)
    with organization_scope(tenant.organization):
        return rule_create(project=tenant.project, actor=tenant.owner, evaluator="valid_json", sampling_rate=0.5)


# --- Queues --------------------------------------------------------------------------------------


def test_member_creates_a_queue_adds_runs_and_scores_the_next_one(tenant, client_for):
    ensure_evaluators(tenant)
    runs = make_runs(tenant, 2)
    client = client_for(tenant.member)
    created = client.post(
        f"{BASE}/annotation-queues/", {"name": "Support", "evaluators": ["helpful", "correct"]}, format="json"
    )
    assert created.status_code == 201, created.content
    queue = created.json()
    assert [evaluator["name"] for evaluator in queue["evaluators"]] == ["correct", "helpful"]
    assert queue["evaluators"][1]["config"] == {"scale": "1-5"}
    assert queue["created_by"] == tenant.member.email

    url = f"{BASE}/annotation-queues/{queue['id']}/"
    added = client.post(f"{url}runs/", {"run_ids": [runs[0].pk, runs[1].pk, runs[0].pk]}, format="json")
    assert added.status_code == 200 and added.json()["added"] == 2
    assert added.json()["queue"]["progress"] == {"total": 2, "done": 0, "skipped": 0, "pending": 2}
    unknown = client.post(f"{url}runs/", {"run_ids": [runs[0].pk, 987654321]}, format="json")
    assert unknown.status_code == 400 and "987654321" in unknown.json()["error"]["message"]

    nxt = client.get(f"{url}next/").json()
    assert nxt["entry"]["run"]["id"] == runs[0].pk and nxt["entry"]["run"]["output"] == "answer 0"
    assert nxt["entry"]["scores"] == []
    scored = client.post(
        f"{BASE}/runs/{runs[0].pk}/scores/",
        {"scores": {"helpful": 5, "correct": "pass"}, "comment": "great", "queue": queue["id"]},
        format="json",
    )
    assert scored.status_code == 201, scored.content
    assert {(row["name"], row["value"], row["author"]) for row in scored.json()} == {
        ("helpful", 1.0, tenant.member.email),
        ("correct", 1.0, tenant.member.email),
    }
    assert client.get(f"{url}next/").json()["entry"]["run"]["id"] == runs[1].pk
    assert client.get(url).json()["progress"]["done"] == 1


def test_a_run_not_in_the_queue_cannot_be_scored_for_it(tenant, client_for):
    queue = make_queue(tenant)
    run = make_runs(tenant, 1)[0]
    response = client_for(tenant.member).post(
        f"{BASE}/runs/{run.pk}/scores/", {"scores": {"helpful": 3}, "queue": queue.pk}, format="json"
    )
    assert response.status_code == 404


def test_bad_queues_are_refused_with_a_message(tenant, client_for):
    ensure_evaluators(tenant)
    client = client_for(tenant.member)
    automatic = client.post(f"{BASE}/annotation-queues/", {"name": "x", "evaluators": ["valid_json"]}, format="json")
    assert automatic.status_code == 400 and "valid_json" in automatic.json()["error"]["message"]
    make_queue(tenant, "Taken")
    duplicate = client.post(f"{BASE}/annotation-queues/", {"name": "Taken", "evaluators": ["helpful"]}, format="json")
    assert duplicate.status_code == 409


# --- Scores of a run -----------------------------------------------------------------------------


def test_a_runs_scores_list_every_source_with_human_authors(tenant, client_for):
    ensure_evaluators(tenant)
    run = make_runs(tenant, 1)[0]
    with organization_scope(tenant.organization):
        submit_scores(author=tenant.member, run=run, scores={"helpful": 2})
        submit_scores(author=tenant.admin, run=run, scores={"helpful": 4})
        Score.objects.create(
            organization=tenant.organization, project=tenant.project, run=run, name="valid_json",
            value=1.0, passed=True, source=Score.Source.ONLINE, reasoning="parsed",
        )  # fmt: skip
    rows = client_for(tenant.viewer).get(f"{BASE}/runs/{run.pk}/scores/").json()
    assert sorted((row["name"], row["source"], row["author"], row["value"]) for row in rows) == [
        ("helpful", "human", tenant.admin.email, 0.75),
        ("helpful", "human", tenant.member.email, 0.25),
        ("valid_json", "online", None, 1.0),
    ]


def test_posting_again_replaces_your_own_score(tenant, client_for):
    ensure_evaluators(tenant)
    run = make_runs(tenant, 1)[0]
    url = f"{BASE}/runs/{run.pk}/scores/"
    client_for(tenant.member).post(url, {"scores": {"helpful": 1}}, format="json")
    client_for(tenant.admin).post(url, {"scores": {"helpful": 5}}, format="json")
    again = client_for(tenant.member).post(url, {"scores": {"helpful": 3}}, format="json")
    assert again.status_code == 201
    with organization_scope(tenant.organization):
        values = dict(Score.objects.filter(run=run).values_list("author__email", "value"))
    assert values == {tenant.member.email: 0.5, tenant.admin.email: 1.0}


def test_a_score_off_the_scale_is_a_400_naming_the_evaluator(tenant, client_for):
    ensure_evaluators(tenant)
    run = make_runs(tenant, 1)[0]
    response = client_for(tenant.member).post(
        f"{BASE}/runs/{run.pk}/scores/", {"scores": {"helpful": 9}}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"].startswith("helpful:")


# --- Roles and API keys --------------------------------------------------------------------------


def test_viewer_reads_but_cannot_score_or_change_anything(tenant, client_for):
    queue = make_queue(tenant)
    rule = make_rule(tenant)
    run = make_runs(tenant, 1)[0]
    client = client_for(tenant.viewer)
    for url in (
        f"{BASE}/annotation-queues/",
        f"{BASE}/annotation-queues/{queue.pk}/",
        f"{BASE}/runs/{run.pk}/scores/",
        f"{BASE}/online-rules/",
        f"{BASE}/online-rules/{rule.pk}/",
    ):
        assert client.get(url).status_code == 200, url
    refused = [
        client.post(f"{BASE}/runs/{run.pk}/scores/", {"scores": {"helpful": 3}}, format="json"),
        client.post(f"{BASE}/annotation-queues/", {"name": "x", "evaluators": ["helpful"]}, format="json"),
        client.post(f"{BASE}/annotation-queues/{queue.pk}/runs/", {"run_ids": [run.pk]}, format="json"),
        client.get(f"{BASE}/annotation-queues/{queue.pk}/next/"),
        client.post(f"{BASE}/online-rules/", {"evaluator": "valid_json"}, format="json"),
        client.patch(f"{BASE}/online-rules/{rule.pk}/", {"enabled": False}, format="json"),
        client.delete(f"{BASE}/online-rules/{rule.pk}/"),
    ]
    for response in refused:
        assert response.status_code == 403, response.content
        assert "viewer" in response.json()["error"]["message"]
    with organization_scope(tenant.organization):
        assert not Score.objects.exists() and not QueueEntry.objects.exists()
        assert OnlineRule.objects.get().enabled


def test_api_keys_cannot_post_human_scores_or_take_runs_to_score(tenant, key_client):
    queue = make_queue(tenant)
    run = make_runs(tenant, 1)[0]
    client = key_client(tenant.project, ["read", "execute"])
    response = client.post(f"{BASE}/runs/{run.pk}/scores/", {"scores": {"helpful": 3}}, format="json")
    assert response.status_code == 403
    assert "signed-in person" in response.json()["error"]["message"]
    assert "API keys" in response.json()["error"]["message"]
    assert client.get(f"{BASE}/annotation-queues/{queue.pk}/next/").status_code == 403
    # They may read scores and queues, and add runs to a queue.
    assert client.get(f"{BASE}/runs/{run.pk}/scores/").status_code == 200
    added = client.post(f"{BASE}/annotation-queues/{queue.pk}/runs/", {"run_ids": [run.pk]}, format="json")
    assert added.status_code == 200 and added.json()["added"] == 1
    read_only = key_client(tenant.project, ["read"])
    assert read_only.post(f"{BASE}/online-rules/", {"evaluator": "valid_json"}, format="json").status_code == 403


# --- Online rules --------------------------------------------------------------------------------


def test_member_creates_changes_and_deletes_an_online_rule(tenant, client_for):
    ensure_evaluators(tenant)
    client = client_for(tenant.member)
    created = client.post(
        f"{BASE}/online-rules/",
        {"evaluator": "valid_json", "sampling_rate": 0.2, "filters": {"environment": "production"}},
        format="json",
    )
    assert created.status_code == 201, created.content
    rule = created.json()
    assert rule["evaluator"]["name"] == "valid_json" and rule["sampling_rate"] == 0.2
    assert rule["filters"] == {"environment": "production"} and rule["enabled"] and rule["scored_count"] == 0
    url = f"{BASE}/online-rules/{rule['id']}/"
    changed = client.patch(url, {"sampling_rate": 1, "enabled": False}, format="json")
    assert changed.status_code == 200 and changed.json()["sampling_rate"] == 1.0 and not changed.json()["enabled"]
    assert client.patch(url, {"sampling_rate": 2}, format="json").status_code == 400
    assert client.patch(url, {"filters": {"model": "x"}}, format="json").status_code == 400
    assert [row["id"] for row in client.get(f"{BASE}/online-rules/").json()] == [rule["id"]]
    assert client.delete(url).status_code == 204
    assert client.get(url).status_code == 404


def test_a_human_evaluator_cannot_run_online(tenant, client_for):
    ensure_evaluators(tenant)
    response = client_for(tenant.member).post(f"{BASE}/online-rules/", {"evaluator": "helpful"}, format="json")
    assert response.status_code == 400 and "people" in response.json()["error"]["message"]
    unknown = client_for(tenant.member).post(f"{BASE}/online-rules/", {"evaluator": "nope"}, format="json")
    assert unknown.status_code == 404


# --- Tenant isolation ----------------------------------------------------------------------------


class _Evaluators:
    @pytest.fixture(autouse=True)
    def _evaluators(self, tenant, other_tenant):
        ensure_evaluators(tenant)
        ensure_evaluators(other_tenant)


class TestQueueIsolation(_Evaluators, ReadIsolation, ListIsolation, CreateIsolation):
    create_body = {"name": "Mine", "evaluators": ["helpful"]}

    def make_object(self, tenant):
        return make_queue(tenant, name=f"Queue of {tenant.organization.slug}")

    def detail_url(self, url_tenant, queue):
        return f"{base_url(url_tenant)}/annotation-queues/{queue.pk}/"

    def list_url(self, tenant):
        return f"{base_url(tenant)}/annotation-queues/"

    def created_organization_id(self, response):
        return AnnotationQueue.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id


class TestQueueIsolationWithApiKey(TestQueueIsolation):
    as_key = True


class TestRunScoresIsolation(_Evaluators, ReadIsolation):
    def make_object(self, tenant):
        run = make_runs(tenant, 1)[0]
        with organization_scope(tenant.organization):
            submit_scores(author=tenant.member, run=run, scores={"helpful": 3})
        return run

    def detail_url(self, url_tenant, run):
        return f"{base_url(url_tenant)}/runs/{run.pk}/scores/"


class TestRunScoresIsolationWithApiKey(TestRunScoresIsolation):
    as_key = True


class TestOnlineRuleIsolation(_Evaluators, TenantIsolationChecks):
    create_body = {"evaluator": "valid_json", "sampling_rate": 0.5}
    update_body = {"sampling_rate": 0.1, "enabled": False}

    def make_object(self, tenant):
        return make_rule(tenant)

    def detail_url(self, url_tenant, rule):
        return f"{base_url(url_tenant)}/online-rules/{rule.pk}/"

    def list_url(self, tenant):
        return f"{base_url(tenant)}/online-rules/"

    def created_organization_id(self, response):
        return OnlineRule.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id


class TestOnlineRuleIsolationWithApiKey(TestOnlineRuleIsolation):
    as_key = True


def test_another_organizations_queue_and_run_are_404_on_every_write(tenant, other_tenant, client_for):
    foreign_queue = make_queue(other_tenant)
    foreign_run = make_runs(other_tenant, 1)[0]
    own_run = make_runs(tenant, 1)[0]
    ensure_evaluators(tenant)
    with organization_scope(other_tenant.organization):
        queue_add_runs(queue=foreign_queue, actor=other_tenant.owner, run_ids=[foreign_run.pk])
    client = client_for(tenant.owner)
    responses = [
        client.post(f"{BASE}/annotation-queues/{foreign_queue.pk}/runs/", {"run_ids": [own_run.pk]}, format="json"),
        client.get(f"{BASE}/annotation-queues/{foreign_queue.pk}/next/"),
        client.post(f"{BASE}/runs/{foreign_run.pk}/scores/", {"scores": {"helpful": 3}}, format="json"),
        client.post(
            f"{BASE}/runs/{own_run.pk}/scores/", {"scores": {"helpful": 3}, "queue": foreign_queue.pk}, format="json"
        ),
    ]
    for response in responses:
        assert response.status_code == 404, response.content
        assert response.json()["error"]["code"] == "not_found"
    # Adding another organization's run to one's own queue names it as unknown.
    own_queue = make_queue(tenant)
    added = client.post(f"{BASE}/annotation-queues/{own_queue.pk}/runs/", {"run_ids": [foreign_run.pk]}, format="json")
    assert added.status_code == 400 and str(foreign_run.pk) in added.json()["error"]["message"]
    with organization_scope(other_tenant.organization):
        assert QueueEntry.objects.filter(queue=foreign_queue).count() == 1
        assert not Score.objects.exists()
