"""Bad input anywhere in evaluations is a clear 4xx, never a 500 and never a half-written
record: values PostgreSQL cannot store, numbers too large, ids that are not numbers,
names that would break the pages, and a gate asked about what its baseline lacks."""

import pytest
from django.test import Client

from agentops.jsonsafe import storable_lossy
from agentops.scoping import organization_scope
from evals import scoring
from evals.models import Dataset, Experiment, ExperimentResult
from evals.services.experiments import experiment_start, score_result, summarize
from runs.services.agents import agent_create
from tests.evals.factories import drive, make_dataset, make_evaluator
from tests.evals.test_datasets import make_run

API = "/api/v1/projects/acme/agent"


@pytest.fixture
def ready(tenant):
    with organization_scope(tenant.organization):
        agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
    make_dataset(tenant.project, [{"key": f"q{i}", "input": f"q {i}", "expected": f"q {i}"} for i in range(3)])
    make_evaluator(tenant.project, "mentions", "contains")
    return tenant


def _experiment(tenant, client, **body):
    response = client.post(f"{API}/experiments/", {"dataset": "qa", "evaluators": ["mentions"], **body}, format="json")
    assert response.status_code == 202, response.content
    return response.json()["id"]


def test_names_that_templates_would_misread_are_refused(ready, client_for):
    response = client_for(ready.member).post(f"{API}/evaluators/", {"name": "items", "kind": "contains"}, format="json")
    assert response.status_code == 400 and "items" in response.json()["error"]["message"]


def test_ids_that_are_not_plain_numbers_are_not_500s(ready, client_for):
    client = client_for(ready.member)
    assert client.get(f"{API}/experiments/?dataset=%C2%B2").status_code == 404
    page = Client()
    page.force_login(ready.member)
    assert page.get("/o/acme/p/agent/evals/experiments/compare/?a=%C2%B2&b=1").status_code in (400, 404)
    assert page.get("/o/acme/p/agent/evals/experiments/?dataset=%C2%B2").status_code == 200


def test_unstorable_reported_results_are_refused_whole(ready, client_for):
    client = client_for(ready.member)
    experiment_id = _experiment(client=client, tenant=ready, kind="external")
    url = f"{API}/experiments/{experiment_id}/results/"
    for entry, message in [
        ({"item": "q0", "output": "x", "cost": 1e12}, "cost"),
        ({"item": "q0", "output": "x", "latency_ms": 2**64}, "latency_ms"),
        ({"item": "q0", "output": "a\u0000b"}, "NUL"),
        ({"item": "q0", "output": "x", "steps": [{"name": "\u0000"}]}, "NUL"),
        ({"item": "q0", "output": "x", "scores": {"cost": 1.0}}, "experiment-wide"),
    ]:
        response = client.post(url, {"results": [{"item": "q1", "output": "fine"}, entry]}, format="json")
        assert response.status_code == 400, (entry, response.content)
        assert message in response.json()["error"]["message"]
    with organization_scope(ready.organization):
        assert not ExperimentResult.objects.filter(experiment_id=experiment_id).exclude(status="pending").exists()


def test_unstorable_metadata_and_configs_are_400s(ready, client_for):
    client = client_for(ready.member)
    started = client.post(
        f"{API}/experiments/",
        {"dataset": "qa", "agent": "echo", "evaluators": ["mentions"], "metadata": {"a": "\u0000"}},
        format="json",
    )
    assert started.status_code == 400 and "metadata" in started.json()["error"]["message"]
    for config in ({"tolerance": 10**400}, {"expected": "a\u0000"}):
        response = client.post(
            f"{API}/evaluators/", {"name": "num", "kind": "numeric", "config": config}, format="json"
        )
        assert response.status_code == 400, response.content
    with organization_scope(ready.organization):
        assert not Experiment.objects.exists()


def test_the_gate_refuses_bad_baselines_and_thresholds_clearly(ready, client_for):
    client = client_for(ready.member)
    with organization_scope(ready.organization):
        base = drive(Experiment.objects.get(pk=_experiment(ready, client, agent="echo")))
        make_evaluator(ready.project, "other", "contains", {"value": "offline"})
        current = drive(
            Experiment.objects.get(pk=_experiment(ready, client, agent="echo", evaluators=["mentions", "other"]))
        )
    gate = f"{API}/experiments/{current.pk}/gate/"
    condition = {"metric": "other", "comparator": ">=", "threshold": 0.5}
    # The baseline has no "other": an absolute condition on it is still answered...
    answer = client.post(gate, {"conditions": [condition], "baseline": {"experiment": base.pk}}, format="json")
    assert answer.status_code == 200 and answer.json()["status"] == "passed"
    assert answer.json()["conditions"][0]["baseline_value"] is None
    # ...and a relative one fails: there is nothing to compare with.
    relative = {**condition, "threshold": 0, "relative": True}
    answer = client.post(gate, {"conditions": [relative], "baseline": {"experiment": base.pk}}, format="json")
    assert answer.json()["status"] == "failed"
    for body, status in [
        ({"conditions": [condition], "baseline": {"experiment": "abc"}}, 400),
        ({"conditions": [{**condition, "threshold": 10**400}]}, 400),
    ]:
        response = client.post(gate, body, format="json")
        assert response.status_code == status, response.content


def test_a_judge_answer_the_database_cannot_store_does_not_stall_the_item(ready, monkeypatch):
    def answer_with_nul(spec, config, subject, organization):
        return scoring.Outcome(value=1.0, reasoning="fine\u0000print", details={"ratio": float("nan")})

    monkeypatch.setattr(scoring.get_kind("contains"), "score", answer_with_nul)
    with organization_scope(ready.organization):
        experiment = drive(
            experiment_start(
                project=ready.project,
                actor=ready.member,
                dataset=Dataset.objects.get(),
                agent=__import__("runs.models", fromlist=["Agent"]).Agent.objects.get(),
                evaluators=[__import__("evals.models", fromlist=["Evaluator"]).Evaluator.objects.get()],
            )
        )
        result = ExperimentResult.objects.filter(experiment=experiment).first()
        score_result(result_id=result.pk)  # already done: nothing happens
        row = result.score_rows.get()
    assert experiment.status == "succeeded" and row.reasoning == "fineprint" and row.details == {"ratio": None}
    assert storable_lossy({"a\u0000": [float("inf"), "x\u0000"]}) == {"a": [None, "x"]}


def test_no_pass_rate_from_items_nobody_could_score():
    specs = [{"name": "judge", "threshold": 0.5}]
    rows = [{"status": "done", "scores": {"judge": None}, "latency_ms": 5, "cost": "0"} for _ in range(3)]
    assert summarize(specs, rows)["pass_rate"] is None


def test_a_new_dataset_is_not_left_behind_when_the_run_cannot_be_added(tenant):
    run = make_run(tenant.project, input=None)
    page = Client()
    page.force_login(tenant.member)
    response = page.post(f"/o/acme/p/agent/evals/runs/{run.pk}/add-to-dataset/", {"new_dataset": "fresh"})
    assert response.status_code in (200, 302)
    with organization_scope(tenant.organization):
        assert not Dataset.objects.filter(name="fresh").exists()
