"""An experiment's open page hears about items as they start and as they are scored,
and another tenant's pages hear nothing."""

import re

import pytest
from asgiref.sync import sync_to_async
from channels.routing import URLRouter
from channels.testing import WebsocketCommunicator
from django.db import connections

from agentops.live import live_path, topic
from agentops.routing import websocket_urlpatterns
from agentops.scoping import organization_scope
from evals.live import announce_result, announce_started
from evals.models import ExperimentResult
from evals.services.experiments import experiment_advance, experiment_start, score_result
from runs.execution import run_execute
from runs.services.agents import agent_create
from tests.evals.factories import make_dataset, make_evaluator

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


def _start_one(tenant, name="echo", key="only"):
    """An experiment of one item, its item started (as a worker would); no page told yet."""
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name=name, model="offline")
        dataset = make_dataset(tenant.project, [{"key": key, "input": "hello", "expected": "hello"}], name=name)
        experiment = experiment_start(
            project=tenant.project,
            actor=tenant.member,
            dataset=dataset,
            agent=agent,
            evaluators=[make_evaluator(tenant.project, f"mentions-{name}", "contains")],
        )
        experiment_advance(experiment_id=experiment.pk)
        result = ExperimentResult.objects.get(experiment=experiment)
        return experiment.pk, result.pk, result.run_id


def _announce_started(tenant, experiment_id, result_id):
    with organization_scope(tenant.organization):
        announce_started(experiment_id=experiment_id, result_ids=[result_id], project_id=tenant.project.pk)


def _finish(tenant, experiment_id, result_id, run_id):
    with organization_scope(tenant.organization):
        run_execute(run_id=run_id)
        score_result(result_id=result_id)
        announce_result(experiment_id=experiment_id, result_id=result_id, project_id=tenant.project.pk)


def _page(experiment_id, result_id) -> str:
    """The socket URL of an experiment's page showing the row of ``result_id``."""
    return live_path(
        org_slug="acme",
        project_slug="agent",
        topics=[topic("experiment", experiment_id), topic("experiment-result", result_id)],
    )


async def _everything(socket, *expected) -> list[str]:
    """The frames ``socket`` receives: until each of ``expected`` (a test of one frame)
    has been met by one of them (however slow the machine: 60 s is a hang guard), then
    whatever else follows within half a second."""
    frames: list[str] = []
    while not all(any(wanted(frame) for frame in frames) for wanted in expected):
        frames.append(await socket.receive_from(timeout=60))
    while not await socket.receive_nothing(timeout=0.5):
        frames.append(await socket.receive_from(timeout=60))
    return frames


async def test_rows_arrive_as_items_start_and_are_scored(tenant, other_tenant):
    experiment_id, result_id, run_id = await sync_to_async(_start_one)(tenant)
    mine = await _listen(_page(experiment_id, result_id), tenant.viewer)
    theirs = await _listen(f"/ws/o/globex/p/{other_tenant.project.slug}/", other_tenant.owner)
    await sync_to_async(_announce_started)(tenant, experiment_id, result_id)
    started = ""
    while f"experiment-{experiment_id}-result-{result_id}" not in started:
        started = await mine.receive_from(timeout=60)
    assert 'data-status="running"' in started
    await sync_to_async(_finish)(tenant, experiment_id, result_id, run_id)
    done = lambda frame: 'data-status="done"' in frame  # noqa: E731
    progress = lambda frame: f"experiment-{experiment_id}-progress" in frame  # noqa: E731
    received = await _everything(mine, done, progress)
    assert any(done(frame) for frame in received)
    assert any(progress(frame) for frame in received)
    assert await theirs.receive_nothing(timeout=0.5)
    await mine.disconnect()
    await theirs.disconnect()


async def test_an_experiments_page_receives_only_its_own_fragments(tenant):
    """Two experiments run in one project. The page of A hears A's progress and row,
    nothing of B, and nothing of the runs both execute (rows and run pages it does not
    show); a project page showing no topic hears none of it."""
    a = await sync_to_async(_start_one)(tenant, "alpha", "a")
    b = await sync_to_async(_start_one)(tenant, "beta", "b")
    page_a = await _listen(_page(a[0], a[1]), tenant.viewer)
    other_page = await _listen("/ws/o/acme/p/agent/", tenant.viewer)
    for experiment_id, result_id, run_id in (a, b):
        await sync_to_async(_announce_started)(tenant, experiment_id, result_id)
        await sync_to_async(_finish)(tenant, experiment_id, result_id, run_id)
    progress = lambda frame: f'id="experiment-{a[0]}-progress"' in frame  # noqa: E731
    row_done = lambda frame: f'id="experiment-{a[0]}-result-{a[1]}"' in frame and 'data-status="done"' in frame  # noqa: E731
    received = await _everything(page_a, progress, row_done)

    assert any(progress(frame) for frame in received)
    assert any(row_done(frame) for frame in received)
    ids = {found for frame in received for found in re.findall(r'\bid="([^"]+)"', frame)}
    assert not [found for found in ids if found.startswith(f"experiment-{b[0]}-")], ids
    assert not [found for found in ids if found.startswith("run")], "no run rows nor run pages here"
    assert await other_page.receive_nothing(timeout=0.5)
    await page_a.disconnect()
    await other_page.disconnect()


def test_an_experiment_nobody_watches_is_not_read_to_announce_it(tenant, django_assert_num_queries):
    """With no page of the experiment open, announcing an item started or scored asks Redis
    who listens and reads nothing from the database (an experiment's items are announced
    by the hundred)."""
    experiment_id, result_id, _ = _start_one(tenant)
    with organization_scope(tenant.organization), django_assert_num_queries(0):
        announce_started(experiment_id=experiment_id, result_ids=[result_id], project_id=tenant.project.pk)
        announce_result(experiment_id=experiment_id, result_id=result_id, project_id=tenant.project.pk)
