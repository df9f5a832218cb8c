"""The experiments API CI pipelines use: start (202, Idempotency-Key), progress and
results, reported results, cancel, the quality gate (absolute and against a baseline),
roles, key scopes and tenant isolation of every endpoint."""

import uuid

import pytest

from agentops.scoping import organization_scope
from evals.models import Dataset, Evaluator, Experiment, ExperimentResult
from evals.services.experiments import experiment_start
from runs.models import Agent
from runs.services.agents import agent_create
from tests.evals.factories import drive, make_dataset, make_evaluator
from tests.isolation import CreateIsolation, ListIsolation, ReadIsolation

BASE = "/api/v1/projects/{org}/{project}/experiments/"


def _url(tenant, suffix=""):
    return BASE.format(org=tenant.organization.slug, project=tenant.project.slug) + suffix


def evals_setup_for(tenant):
    """An agent "echo", a dataset "qa" of 10 items (7 answered by echoing) and an evaluator
    "mentions" in ``tenant``'s project."""
    with organization_scope(tenant.organization):
        agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
    items = [
        {"key": f"q{i}", "input": f"question {i}", "expected": f"question {i}" if i < 7 else "nothing like it"}
        for i in range(10)
    ]
    make_dataset(tenant.project, items, name="qa")
    make_evaluator(tenant.project, "mentions", "contains")
    return tenant


@pytest.fixture
def evals_setup(tenant):
    return evals_setup_for(tenant)


def _start_and_finish(tenant, client, **body):
    response = client.post(
        _url(tenant), {"dataset": "qa", "agent": "echo", "evaluators": ["mentions"], **body}, format="json"
    )
    assert response.status_code == 202, response.content
    with organization_scope(tenant.organization):
        drive(Experiment.objects.get(pk=response.json()["id"]))
    return response.json()["id"]


def test_start_follow_and_read_results(evals_setup, key_client):
    tenant = evals_setup
    client = key_client(tenant.project)
    key = str(uuid.uuid4())
    body = {"dataset": "qa", "agent": "echo", "evaluators": ["mentions"], "concurrency": 2, "branch": "feature"}
    started = client.post(_url(tenant), body, format="json", HTTP_IDEMPOTENCY_KEY=f'"{key}"')
    again = client.post(_url(tenant), body, format="json", HTTP_IDEMPOTENCY_KEY=f'"{key}"')
    assert started.status_code == 202 and again.status_code == 202
    assert again.json()["id"] == started.json()["id"] and again.headers["Idempotent-Replayed"] == "true"
    data = started.json()
    assert data["status"] == "queued" and data["item_count"] == 10 and data["progress"] == 0.0
    assert data["dataset"] == {"id": data["dataset"]["id"], "name": "qa"} and data["agent"]["name"] == "echo"
    assert data["url"].startswith("http://testserver/o/") and data["url"].endswith(f"/experiments/{data['id']}/")
    with organization_scope(tenant.organization):
        assert Experiment.objects.count() == 1
        drive(Experiment.objects.get(pk=data["id"]))
    detail = client.get(_url(tenant, f"{data['id']}/")).json()
    assert detail["status"] == "succeeded" and detail["progress"] == 1.0
    metric = detail["summary"]["metrics"]["mentions"]
    assert metric["mean"] == 0.7 and metric["ci_low"] < 0.7 < metric["ci_high"]
    results = client.get(_url(tenant, f"{data['id']}/results/")).json()["results"]
    assert [row["item_key"] for row in results] == [f"q{i}" for i in range(10)]
    assert results[0]["scores"] == {"mentions": 1.0} and results[0]["passed"] == {"mentions": True}
    assert results[9]["passed"] == {"mentions": False} and results[9]["run_id"]
    listed = client.get(_url(tenant) + "?dataset=qa&branch=feature").json()["results"]
    assert [row["id"] for row in listed] == [data["id"]]


def test_bad_starts_get_clear_errors(evals_setup, client_for):
    tenant = evals_setup
    client = client_for(tenant.member)
    cases = [
        ({"dataset": "nope", "agent": "echo", "evaluators": ["mentions"]}, 404, "no dataset 'nope'"),
        ({"dataset": "qa", "agent": "ghost", "evaluators": ["mentions"]}, 404, "no agent 'ghost'"),
        ({"dataset": "qa", "agent": "echo", "evaluators": ["nope"]}, 404, "no evaluator 'nope'"),
        ({"dataset": "qa", "agent": "echo", "evaluators": []}, 400, "evaluators"),
        ({"dataset": "qa", "agent": "echo", "evaluators": ["mentions"], "concurrency": 99}, 400, "concurrency"),
        ({"dataset": "qa", "evaluators": ["mentions"]}, 400, "needs an agent"),
        ({"dataset": "qa", "agent": "echo", "evaluators": ["mentions"], "dataset_version": 3}, 400, "no version 3"),
    ]
    for body, status, message in cases:
        response = client.post(_url(tenant), body, format="json")
        assert response.status_code == status, (body, response.content)
        assert message in str(response.json()["error"]), response.json()
    with organization_scope(tenant.organization):
        assert not Experiment.objects.exists()


def test_gate_absolute_pass_and_fail(evals_setup, client_for):
    tenant = evals_setup
    client = client_for(tenant.member)
    experiment_id = _start_and_finish(tenant, client)
    gate = _url(tenant, f"{experiment_id}/gate/")
    passing = client.post(
        gate,
        {
            "conditions": [
                {"metric": "mentions", "comparator": ">=", "threshold": 0.6},
                {"metric": "error_rate", "comparator": "lte", "threshold": 0},
            ]
        },
        format="json",
    ).json()
    assert passing["status"] == "passed"
    assert passing["conditions"][0] == {
        "metric": "mentions",
        "comparator": ">=",
        "threshold": 0.6,
        "relative": False,
        "actual": 0.7,
        "value": 0.7,
        "baseline_value": None,
        "status": "passed",
    }
    failing = client.post(
        gate,
        {
            "conditions": [
                {"metric": "mentions", "comparator": ">=", "threshold": 0.6},
                {"metric": "mentions.pass_rate", "comparator": ">", "threshold": 0.9},
            ]
        },
        format="json",
    ).json()
    assert failing["status"] == "failed"
    assert [c["status"] for c in failing["conditions"]] == ["passed", "failed"]
    assert failing["conditions"][1]["actual"] == 0.7


def test_gate_relative_to_the_last_experiment_on_main(evals_setup, client_for):
    tenant = evals_setup
    client = client_for(tenant.member)
    baseline_id = _start_and_finish(tenant, client, branch="main")
    # The dataset's expectations get harder for the new run: 5 of 10 now match.
    with organization_scope(tenant.organization):
        from evals.models import DatasetItem

        DatasetItem.objects.filter(key__in=["q5", "q6"]).update(expected="no longer")
    candidate_id = _start_and_finish(tenant, client, branch="feature")
    gate = _url(tenant, f"{candidate_id}/gate/")
    condition = {"metric": "mentions", "comparator": ">=", "threshold": -0.1, "relative": True}
    answer = client.post(gate, {"conditions": [condition], "baseline": {"branch": "main"}}, format="json").json()
    assert answer["status"] == "failed"
    assert answer["baseline"]["id"] == baseline_id
    only = answer["conditions"][0]
    assert only["value"] == 0.5 and only["baseline_value"] == 0.7 and only["actual"] == pytest.approx(-0.2)
    lenient = {**condition, "threshold": -0.25}
    answer = client.post(gate, {"conditions": [lenient], "baseline": {"experiment": baseline_id}}, format="json")
    assert answer.json()["status"] == "passed"
    no_baseline = client.post(gate, {"conditions": [condition], "baseline": {"branch": "release"}}, format="json")
    assert no_baseline.status_code == 400 and "needs a baseline" in no_baseline.json()["error"]["message"]


def test_gate_refuses_what_it_cannot_answer(evals_setup, client_for):
    tenant = evals_setup
    client = client_for(tenant.member)
    experiment_id = _start_and_finish(tenant, client)
    gate = _url(tenant, f"{experiment_id}/gate/")
    unknown = client.post(
        gate, {"conditions": [{"metric": "accuracy", "comparator": ">=", "threshold": 1}]}, format="json"
    )
    assert unknown.status_code == 400 and "unknown metric 'accuracy'" in unknown.json()["error"]["message"]
    assert "mentions" in unknown.json()["error"]["message"]
    bad = client.post(gate, {"conditions": [{"metric": "mentions", "comparator": "~", "threshold": 1}]}, format="json")
    assert bad.status_code == 400 and "comparator" in bad.json()["error"]["message"]
    running = client.post(_url(tenant), {"dataset": "qa", "agent": "echo", "evaluators": ["mentions"]}, format="json")
    early = client.post(
        _url(tenant, f"{running.json()['id']}/gate/"),
        {"conditions": [{"metric": "mentions", "comparator": ">=", "threshold": 0}]},
        format="json",
    )
    assert early.status_code == 409 and "once it has ended" in early.json()["error"]["message"]


def test_external_experiment_over_the_api(evals_setup, key_client):
    tenant = evals_setup
    client = key_client(tenant.project)
    started = client.post(
        _url(tenant), {"dataset": "qa", "evaluators": ["mentions"], "kind": "external"}, format="json"
    ).json()
    results_url = _url(tenant, f"{started['id']}/results/")
    bad = client.post(results_url, {"results": [{"item": "zz", "output": "x"}]}, format="json")
    assert bad.status_code == 400 and "zz" in bad.json()["error"]["message"]
    ok = client.post(results_url, {"results": [{"item": "q0", "output": "question 0", "latency_ms": 5}]}, format="json")
    assert ok.status_code == 202 and ok.json()["accepted"] == 1
    with organization_scope(tenant.organization):
        from evals.services.experiments import score_result

        score_result(result_id=ExperimentResult.objects.get(item_key="q0").pk)
    completed = client.post(_url(tenant, f"{started['id']}/complete/"))
    assert completed.status_code == 200 and completed.json()["status"] == "succeeded"
    assert completed.json()["summary"]["metrics"]["mentions"]["mean"] == 1.0
    late = client.post(results_url, {"results": [{"item": "q1", "output": "x"}]}, format="json")
    assert late.status_code == 409


def test_cancel_over_the_api(evals_setup, client_for):
    tenant = evals_setup
    client = client_for(tenant.member)
    started = client.post(_url(tenant), {"dataset": "qa", "agent": "echo", "evaluators": ["mentions"]}, format="json")
    cancelled = client.post(_url(tenant, f"{started.json()['id']}/cancel/"))
    assert cancelled.status_code == 200 and cancelled.json()["status"] == "cancelled"
    again = client.post(_url(tenant, f"{started.json()['id']}/cancel/"))
    assert again.status_code == 409


def test_roles_and_key_scopes(evals_setup, client_for, key_client):
    tenant = evals_setup
    viewer = client_for(tenant.viewer)
    body = {"dataset": "qa", "agent": "echo", "evaluators": ["mentions"]}
    assert viewer.post(_url(tenant), body, format="json").status_code == 403
    assert viewer.get(_url(tenant)).status_code == 200
    reader = key_client(tenant.project, scopes=("read",))
    assert reader.post(_url(tenant), body, format="json").status_code == 403
    experiment_id = _start_and_finish(tenant, client_for(tenant.member))
    gate = {"conditions": [{"metric": "mentions", "comparator": ">=", "threshold": 0.5}]}
    assert reader.post(_url(tenant, f"{experiment_id}/gate/"), gate, format="json").status_code == 200
    assert viewer.post(_url(tenant, f"{experiment_id}/cancel/")).status_code == 403


class TestExperimentIsolation(ReadIsolation, ListIsolation, CreateIsolation):
    create_body = {"dataset": "qa", "agent": "echo", "evaluators": ["mentions"]}

    @pytest.fixture(autouse=True)
    def _agents_and_datasets(self, evals_setup, other_tenant):
        evals_setup_for(other_tenant)

    def make_object(self, tenant):
        with organization_scope(tenant.organization):
            return experiment_start(
                project=tenant.project,
                actor=tenant.owner,
                dataset=Dataset.objects.get(project=tenant.project, name="qa"),
                agent=Agent.objects.get(project=tenant.project, name="echo"),
                evaluators=list(Evaluator.objects.filter(project=tenant.project, name="mentions")),
            )

    def detail_url(self, url_tenant, experiment):
        return _url(url_tenant, f"{experiment.pk}/")

    def list_url(self, tenant):
        return _url(tenant)

    def created_organization_id(self, response):
        return Experiment.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id

    def test_other_organizations_experiment_is_not_found_on_every_action(self, caller, tenant, other_tenant):
        foreign = self.make_object(other_tenant)
        for url_tenant in (tenant, other_tenant):
            for method, suffix, body in [
                ("get", "results/", None),
                ("post", "results/", {"results": [{"item": "q0", "output": "x"}]}),
                ("post", "complete/", None),
                ("post", "cancel/", None),
                ("post", "gate/", {"conditions": [{"metric": "mentions", "comparator": ">=", "threshold": 0}]}),
                ("get", "export/", None),
            ]:
                response = getattr(caller, method)(
                    f"{self.detail_url(url_tenant, foreign)}{suffix}", body, format="json"
                )
                assert response.status_code == 404, (suffix, response.status_code)
        with organization_scope(other_tenant.organization):
            assert Experiment.objects.get(pk=foreign.pk).status == Experiment.Status.QUEUED


class TestExperimentIsolationWithApiKey(TestExperimentIsolation):
    as_key = True


def test_exports_and_the_leaderboard(evals_setup, key_client, other_tenant, client_for):
    import csv
    import io
    import json

    tenant = evals_setup
    client = key_client(tenant.project, scopes=("read", "execute"))
    first = _start_and_finish(tenant, client, branch="main")
    second = _start_and_finish(tenant, client, branch="feature")
    export = client.get(_url(tenant, f"{first}/export/?format=csv"))
    assert export.status_code == 200 and export["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(b"".join(export.streaming_content).decode())))
    assert len(rows) == 10 and rows[0]["item_key"] == "q0"
    lines = b"".join(client.get(_url(tenant, f"{first}/export/")).streaming_content).decode().splitlines()
    assert len(lines) == 10 and json.loads(lines[9])["item_key"] == "q9"
    assert client.get(_url(tenant, f"{first}/export/?format=xml")).status_code == 400
    with organization_scope(tenant.organization):
        dataset_id = Experiment.objects.get(pk=first).dataset_id
    board_url = f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/datasets/{dataset_id}/leaderboard/"
    board = client.get(board_url + "?branch=main").json()
    assert board["metrics"] == ["mentions"] and [row["experiment_id"] for row in board["rows"]] == [first]
    assert board["rows"][0]["metrics"]["mentions"]["mean"] == 0.7
    assert len(client.get(board_url).json()["rows"]) == 2 and second
    csv_board = b"".join(client.get(board_url + "?format=csv").streaming_content).decode()
    assert len(list(csv.DictReader(io.StringIO(csv_board)))) == 2
    outsider = client_for(other_tenant.owner)
    assert outsider.get(board_url).status_code == 404
    assert outsider.get(_url(tenant, f"{first}/export/")).status_code == 404
