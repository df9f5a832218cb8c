"""An experiment's open page hears about items as they start and as they are scored,
and another tenant's pages hear nothing."""

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connections

from agentops.routing import websocket_urlpatterns
from agentops.scoping import organization_scope
from evals.live import announce_result, announce_started
from evals.models import ExperimentResult
from evals.services.experiments import experiment_advance, experiment_start, score_result
from runs.services.agents import agent_create
from runs.services.execute import run_execute
from tests.evals.helpers import make_dataset, make_evaluator

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture(autouse=True)
async def _close_worker_thread_connections():
    yield
    await sync_to_async(connections.close_all)()


async def _listen(path: str, user) -> WebsocketCommunicator:
    communicator = WebsocketCommunicator(URLRouter(websocket_urlpatterns), path)
    communicator.scope["user"] = user
    connected, _ = await communicator.connect()
    assert connected
    return communicator


def _start_one(tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
        dataset = make_dataset(tenant.project, [{"key": "only", "input": "hello", "expected": "hello"}])
        experiment = experiment_start(
            project=tenant.project,
            actor=tenant.member,
            dataset=dataset,
            agent=agent,
            evaluators=[make_evaluator(tenant.project, "mentions", "contains")],
        )
        experiment_advance(experiment_id=experiment.pk)
        result = ExperimentResult.objects.get(experiment=experiment)
        announce_started(experiment_id=experiment.pk, result_ids=[result.pk])
        return experiment.pk, result.pk, result.run_id


def _finish(tenant, experiment_id, result_id, run_id):
    with organization_scope(tenant.organization):
        run_execute(run_id=run_id)
        score_result(result_id=result_id)
        announce_result(experiment_id=experiment_id, result_id=result_id)


async def test_rows_arrive_as_items_start_and_are_scored(tenant, other_tenant):
    mine = await _listen(f"/ws/o/acme/p/{tenant.project.slug}/", tenant.viewer)
    theirs = await _listen(f"/ws/o/globex/p/{other_tenant.project.slug}/", other_tenant.owner)
    experiment_id, result_id, run_id = await sync_to_async(_start_one)(tenant)
    started = ""
    while f"experiment-{experiment_id}-result-{result_id}" not in started:
        started = await mine.receive_from(timeout=5)
    assert 'data-status="running"' in started
    await sync_to_async(_finish)(tenant, experiment_id, result_id, run_id)
    scored = ""
    while 'data-status="done"' not in scored:
        scored = await mine.receive_from(timeout=5)
    assert f"experiment-{experiment_id}-progress" in scored
    assert await theirs.receive_nothing(timeout=0.5)
    await mine.disconnect()
    await theirs.disconnect()
