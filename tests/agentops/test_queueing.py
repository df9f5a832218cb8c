"""Work queued for Celery while Redis (the broker) is down (agentops/queueing.py): the
request that started it answers as usual, its record is written, and the sweeper of the
beat schedule finds it to send once Redis is back; never a 500 after the commit."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.scoping import organization_scope
from evals.bulk_export.services import UNCLAIMED_SECONDS, exports_to_recover
from evals.models import Experiment, ExperimentResult, ExportJob
from evals.services.experiments import experiment_start, stalled_work
from jobs.models import Job
from jobs.services import due_job_ids
from jobs.tasks import OVERDUE_SECONDS
from runs.execution import stalled_run_ids
from runs.models import Run, SessionMessage
from runs.services.agents import agent_create
from tests.evals.factories import experiment_setup
from tests.evals.test_api_experiments import evals_setup_for
from tests.evals.test_api_exports import make_destination
from tests.jobs.factories import ScriptedBackend, build_backends_with, make_backend

pytestmark = pytest.mark.django_db(transaction=True)  # on_commit callbacks run inside the request

API = "/api/v1/projects/acme/agent"


def _agent(tenant, name="calc"):
    with organization_scope(tenant.organization):
        return agent_create(project=tenant.project, actor=None, name=name, model="offline", tools=["calculator"])


def _run_is_recovered(run_id: int) -> bool:
    """Whether recover_stalled_runs sends the run again (it waits for RUN_STALL_SECONDS)."""
    Run.dangerously_unscoped_objects.filter(pk=run_id).update(created_at=timezone.now() - timedelta(hours=1))
    return run_id in [run for _, run in stalled_run_ids()]


def test_a_run_started_over_the_api_while_redis_is_down_is_queued_for_the_sweeper(tenant, client_for, broker_down):
    agent = _agent(tenant)
    response = client_for(tenant.member).post(f"{API}/runs/", {"agent": agent.pk, "input": "1+1"}, format="json")
    assert response.status_code == 202, response.content
    run = Run.dangerously_unscoped_objects.get(pk=response.json()["id"])
    assert run.status == Run.Status.QUEUED and run.input == "1+1"
    assert _run_is_recovered(run.pk)


def test_a_run_started_from_its_page_while_redis_is_down_is_queued_for_the_sweeper(tenant, client, broker_down):
    agent = _agent(tenant)
    client.force_login(tenant.member)
    response = client.post(f"/o/acme/p/agent/runs/agents/{agent.pk}/runs/", {"input": "What is 6 * 7?", "version": ""})
    run = Run.dangerously_unscoped_objects.get(project=tenant.project)
    assert response.status_code == 302 and response["Location"].endswith(f"/{run.pk}/")
    assert _run_is_recovered(run.pk)


def test_a_session_message_sent_while_redis_is_down_starts_a_turn_the_sweeper_sends(tenant, client_for, broker_down):
    agent = _agent(tenant, name="chat")
    client = client_for(tenant.member)
    sessions = f"{API}/agent-sessions/"
    opened = client.post(sessions, {"agent": agent.pk, "title": "Try"}, format="json")
    assert opened.status_code == 201, opened.content
    sent = client.post(f"{sessions}{opened.json()['id']}/messages/", {"content": "hello"}, format="json")
    assert sent.status_code == 202 and sent.json()["status"] == "started", sent.content
    assert SessionMessage.dangerously_unscoped_objects.filter(content="hello").count() == 1
    turn = Run.dangerously_unscoped_objects.get(agent_session_id=opened.json()["id"], turn=1)
    assert _run_is_recovered(turn.pk)


def test_an_experiment_started_while_redis_is_down_is_advanced_by_the_sweeper(tenant, client_for, broker_down):
    evals_setup_for(tenant)
    response = client_for(tenant.member).post(
        "/api/v1/projects/acme/agent/experiments/",
        {"dataset": "qa", "agent": "echo", "evaluators": ["mentions"]},
        format="json",
    )
    assert response.status_code == 202, response.content
    experiment = Experiment.dangerously_unscoped_objects.get(pk=response.json()["id"])
    assert experiment.status == Experiment.Status.QUEUED
    experiments, _results = stalled_work()
    assert (tenant.organization.pk, experiment.pk) in experiments


def test_external_results_reported_while_redis_is_down_are_stored_and_scored_by_the_sweeper(
    tenant, client_for, broker_down
):
    agent, dataset, evaluators = experiment_setup(tenant)
    with organization_scope(tenant.organization):
        experiment = experiment_start(
            project=tenant.project, actor=tenant.member, dataset=dataset, evaluators=evaluators[:1], kind="external"
        )
    response = client_for(tenant.member).post(
        f"{API}/experiments/{experiment.pk}/results/",
        {"results": [{"item": "q0", "output": "answer to question 0"}]},
        format="json",
    )
    assert response.status_code == 202, response.content
    (result,) = ExperimentResult.dangerously_unscoped_objects.filter(experiment=experiment, status="scoring")
    ExperimentResult.dangerously_unscoped_objects.filter(pk=result.pk).update(
        updated_at=timezone.now() - timedelta(hours=1)
    )
    _experiments, results = stalled_work()
    assert (tenant.organization.pk, result.pk) in results


def test_an_export_created_or_retried_while_redis_is_down_is_sent_by_the_sweeper(
    tenant, client_for, broker_down, settings, tmp_path
):
    settings.EXPORT_ROOT = str(tmp_path)
    destination = make_destination(tenant)
    client = client_for(tenant.admin)
    url = "/api/v1/projects/acme/agent/exports/"
    created = client.post(
        url, {"destination": destination.pk, "start_date": "2026-03-01", "end_date": "2026-03-01"}, format="json"
    )
    assert created.status_code in (201, 202), created.content
    job = ExportJob.dangerously_unscoped_objects.get(pk=created.json()["id"])
    assert job.status == ExportJob.Status.QUEUED
    assert job.pk not in [export for _, export in exports_to_recover()]  # a worker may still take it
    ExportJob.dangerously_unscoped_objects.filter(pk=job.pk).update(
        status=ExportJob.Status.FAILED, created_at=timezone.now() - timedelta(seconds=UNCLAIMED_SECONDS + 1)
    )
    retried = client.post(f"{url}{job.pk}/retry/")
    assert retried.status_code in (201, 202), retried.content
    retry = ExportJob.dangerously_unscoped_objects.get(retry_of=job)
    ExportJob.dangerously_unscoped_objects.filter(pk=retry.pk).update(
        created_at=timezone.now() - timedelta(seconds=UNCLAIMED_SECONDS + 1)
    )
    assert [export for _, export in exports_to_recover()] == [retry.pk]


def test_a_job_submitted_while_redis_is_down_is_polled_by_the_sweeper(tenant, client_for, broker_down, monkeypatch):
    ScriptedBackend.reset()
    build_backends_with(
        monkeypatch,
        backend_for=lambda backend: ScriptedBackend(config={}, credentials={}),
        backend_class=lambda kind: ScriptedBackend,
    )
    make_backend(tenant.organization, name="gpu-box")
    body = {"backend": "gpu-box", "hardware": "a100", "command": "python train.py", "time_limit_seconds": 1800}
    response = client_for(tenant.member).post("/api/v1/projects/acme/agent/jobs/", body, format="json")
    assert response.status_code == 202, response.content
    job = Job.dangerously_unscoped_objects.get(pk=response.json()["id"])
    assert job.status == Job.Status.QUEUED
    assert (tenant.organization.pk, job.pk) in due_job_ids(overdue_seconds=0)
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(
        next_poll_at=timezone.now() - timedelta(seconds=OVERDUE_SECONDS + 1)
    )
    assert (tenant.organization.pk, job.pk) in due_job_ids(overdue_seconds=OVERDUE_SECONDS)


def test_a_budget_created_while_redis_is_down_is_stored_and_its_alerts_wait(tenant, client_for, broker_down):
    """A new budget asks for its alerts to be evaluated after commit; with the broker down
    that waits for the organization's next ledger refresh, never a 500 after the save."""
    from billing.models import Budget

    response = client_for(tenant.owner).post(
        "/api/v1/organizations/acme/billing/budgets/", {"name": "monthly", "amount": "5"}, format="json"
    )
    assert response.status_code == 201, response.content
    assert Budget.dangerously_unscoped_objects.filter(organization=tenant.organization, name="monthly").exists()
