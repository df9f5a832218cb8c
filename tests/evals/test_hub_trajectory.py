"""Trajectories pushed to the Hugging Face Hub (evals/bulk_export/hub_trajectory.py,
evals/views/trajectory_push.py): a session's or a run's ``agentops.trajectory/1`` lines
committed with a dataset card to a dataset repository on a local server that speaks the
Hub's API, through the real huggingface_hub client, as an export job (status, log,
retry); bad options are a 400 when it is created, what the Hub refuses fails the job
with the reason."""

from __future__ import annotations

import json
import re
import time

import pytest
import yaml

from agentops.errors import InvalidRequest
from agentops.scoping import organization_scope
from evals.bulk_export import services
from evals.bulk_export.runner import export_run
from evals.models import ExportJob
from runs import trajectories
from runs.execution import run_execute
from runs.models import Run, Session
from runs.services.agents import agent_create
from runs.services.sessions import session_create, session_send
from tests.evals.hub_helpers import hub_destination, jsonl, run_job
from tests.fake_hf_hub import ORG, READ_TOKEN, TOKEN, fake_hf_hub  # noqa: F401 - the fixture

pytestmark = pytest.mark.django_db


@pytest.fixture
def hub(tenant, fake_hf_hub):  # noqa: F811
    return hub_destination(tenant, fake_hf_hub)


def _session(tenant, title="Sums") -> Session:
    """A session of two executed turns of the offline model with the calculator."""
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project, actor=tenant.member, name="calc", model="offline", tools=["calculator"]
        )
        session = session_create(project=tenant.project, agent=agent, actor=tenant.member, title=title)
        for content in ("6 * 7", "and 1 + 1"):
            session_send(session=session, actor=tenant.member, content=content)
            run_execute(run_id=Run.objects.filter(agent_session=session).order_by("-turn").first().pk)
    return session


@pytest.fixture
def session(tenant):
    return _session(tenant)


def _front_matter(readme: bytes) -> dict:
    _, front, _ = readme.decode().split("---\n", 2)
    return yaml.safe_load(front)


def _expected_lines(tenant, session) -> list[dict]:
    with organization_scope(tenant.organization):
        return [json.loads(line) for line in trajectories.session_trajectory(session=session)]


def test_a_session_is_pushed_as_its_trajectory_lines_with_a_card_describing_the_format(
    tenant,
    hub,
    session,
    fake_hf_hub,  # noqa: F811
):
    job = run_job(tenant, hub, "hf_trajectory", {"repo_id": "trajectories", "session": session.pk})

    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    repo = fake_hf_hub.repos[f"{ORG}/trajectories"]
    assert repo.private is True, "private unless asked otherwise"
    lines = jsonl(repo.files["data/train.jsonl"])
    assert lines == _expected_lines(tenant, session), "the same lines as the download"
    assert [(line["format"], line["turn"]) for line in lines] == [
        ("agentops.trajectory/1", 1),
        ("agentops.trajectory/1", 2),
    ]
    metadata = _front_matter(repo.files["README.md"])
    assert metadata["configs"][0]["data_files"] == [{"split": "train", "path": "data/train.jsonl"}]
    assert "trajectories" in metadata["tags"]
    card = repo.files["README.md"].decode()
    assert "agentops.trajectory/1" in card and "2 runs" in card and "“Sums”" in card
    assert "`tool_calls`" in card and "`cost`" in card
    assert job.progress == {"trajectories": 2}
    [entry] = job.files
    assert entry["rows"] == 2 and entry["location"].startswith(f"{fake_hf_hub.url}/datasets/{ORG}/trajectories/blob/")
    assert repo.sha in job.log


def test_a_run_is_pushed_as_one_line(tenant, hub, session, fake_hf_hub):  # noqa: F811
    with organization_scope(tenant.organization):
        run = Run.objects.get(agent_session=session, turn=2)
    job = run_job(tenant, hub, "hf_trajectory", {"repo_id": f"{ORG}/one-run", "run": run.pk, "private": False})

    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    repo = fake_hf_hub.repos[f"{ORG}/one-run"]
    [line] = jsonl(repo.files["data/train.jsonl"])
    assert line["run"]["id"] == run.pk and line["turn"] == 2 and repo.private is False


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"repo_id": "t"}, "options.session"),
        ({"repo_id": "t", "session": 1, "run": 1}, "one of them"),
        ({"repo_id": "t", "session": "abc"}, "whole number"),
        ({"repo_id": "t", "session": 999999}, "no session with id 999999"),
        ({"repo_id": "t", "run": 999999}, "no run with id 999999"),
        ({"repo_id": "not a repo!", "run": 1}, "options.repo_id"),
        ({"repo_id": "t", "run": 1, "private": "yes"}, "true or false"),
        ({"repo_id": "t", "run": 1, "tables": ["x"]}, "no option 'tables'"),
    ],
)
def test_bad_options_are_refused_when_the_job_is_created(tenant, hub, options, message):
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match=re.escape(message)):
        services.export_create(
            project=tenant.project, actor=tenant.admin, destination_id=hub.pk, kind="hf_trajectory", options=options
        )
    with organization_scope(tenant.organization):
        assert not ExportJob.objects.exists(), "nothing half-written"


def test_another_tenant_s_session_or_run_is_not_found(tenant, other_tenant, hub):
    foreign = _session(other_tenant, title="Theirs")
    with organization_scope(other_tenant.organization):
        foreign_run = Run.objects.filter(agent_session=foreign).first()
    for options in ({"session": foreign.pk}, {"run": foreign_run.pk}):
        with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="no (session|run) with id"):
            services.export_create(
                project=tenant.project,
                actor=tenant.admin,
                destination_id=hub.pk,
                kind="hf_trajectory",
                options={"repo_id": "x", **options},
            )


def test_a_refused_token_fails_the_job_with_the_reason_and_a_retry_with_a_good_one_succeeds(
    tenant,
    session,
    fake_hf_hub,  # noqa: F811
):
    bad = hub_destination(tenant, fake_hf_hub, token="hf_not_a_valid_token_000000", name="bad")
    job = run_job(tenant, bad, "hf_trajectory", {"repo_id": "t", "session": session.pk})
    assert job.status == ExportJob.Status.FAILED and "refused the token (401)" in job.error
    assert "hf_not_a_valid_token" not in job.log + job.error, "the token is never shown"
    assert "failed" in job.log

    read_only = hub_destination(tenant, fake_hf_hub, token=READ_TOKEN, name="read-only")
    job = run_job(tenant, read_only, "hf_trajectory", {"repo_id": f"{ORG}/t", "session": session.pk})
    assert job.status == ExportJob.Status.FAILED and "403" in job.error
    assert f"{ORG}/t" not in fake_hf_hub.repos

    with organization_scope(tenant.organization):
        job.destination = hub_destination(tenant, fake_hf_hub, name="good")
        job.save(update_fields=["destination"])
        retry = services.export_retry(job=job, actor=tenant.admin)
        export_run(export_id=retry.pk, worker="test")
        retry.refresh_from_db()
    assert retry.status == ExportJob.Status.SUCCEEDED, retry.error
    assert retry.options == job.options and len(jsonl(fake_hf_hub.repos[f"{ORG}/t"].files["data/train.jsonl"])) == 2


def test_an_unknown_repository_in_a_namespace_the_token_cannot_write_fails_with_the_reason(
    tenant,
    hub,
    session,
    fake_hf_hub,  # noqa: F811
):
    job = run_job(tenant, hub, "hf_trajectory", {"repo_id": "someone-else/data", "session": session.pk})
    assert job.status == ExportJob.Status.FAILED
    assert "someone-else/data" in job.error and "someone-else/data" not in fake_hf_hub.repos


def test_a_session_deleted_before_the_job_runs_fails_it(tenant, hub, session, fake_hf_hub):  # noqa: F811
    with organization_scope(tenant.organization):
        job = services.export_create(
            project=tenant.project,
            actor=tenant.admin,
            destination_id=hub.pk,
            kind="hf_trajectory",
            options={"repo_id": "gone", "session": session.pk},
        )
        Session.objects.filter(pk=session.pk).delete()
        export_run(export_id=job.pk, worker="test")
        job.refresh_from_db()
    assert job.status == ExportJob.Status.FAILED and job.error == "the session was deleted"
    assert f"{ORG}/gone" not in fake_hf_hub.repos


# -- started from the API and the run page -----------------------------------------------------


@pytest.mark.django_db(transaction=True)
def test_the_api_starts_a_push_a_worker_runs(tenant, client_for, celery_worker, fake_hf_hub):  # noqa: F811
    hub = hub_destination(tenant, fake_hf_hub)
    session = _session(tenant)
    response = client_for(tenant.admin).post(
        "/api/v1/projects/acme/agent/exports/",
        {"kind": "hf_trajectory", "destination": hub.pk, "options": {"repo_id": "via-api", "session": session.pk}},
        format="json",
    )
    assert response.status_code == 201, response.content
    job_id = response.json()["id"]
    for _ in range(600):  # a bound, not a measure: the worker ends it well before
        job = client_for(tenant.admin).get(f"/api/v1/projects/acme/agent/exports/{job_id}/").json()
        if job["status"] in ("succeeded", "failed", "cancelled"):
            break
        time.sleep(0.1)
    assert job["status"] == "succeeded", job
    assert job["options"] == {"repo_id": "via-api", "split": "train", "private": True, "session": session.pk}
    assert len(jsonl(fake_hf_hub.repos[f"{ORG}/via-api"].files["data/train.jsonl"])) == 2
    refused = client_for(tenant.member).post(
        "/api/v1/projects/acme/agent/exports/",
        {"kind": "hf_trajectory", "destination": hub.pk, "options": {"repo_id": "x", "session": session.pk}},
        format="json",
    )
    assert refused.status_code == 403, "exports are for owners and admins"


def test_the_run_page_panel_offers_the_push_and_queues_it(tenant, hub, session, signed_in):
    with organization_scope(tenant.organization):
        run = Run.objects.get(agent_session=session, turn=1)
    admin = signed_in(tenant.admin)
    panel = admin.get(f"/o/acme/p/agent/evals/runs/{run.pk}/panel/").content.decode()
    assert 'id="push-trajectory"' in panel and "Its whole session" in panel
    url = f"/o/acme/p/agent/evals/runs/{run.pk}/push-trajectory/"
    response = admin.post(url, {"destination": hub.pk, "repo_id": "from-page", "subject": "session", "private": "on"})
    with organization_scope(tenant.organization):
        job = ExportJob.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/o/acme/p/agent/evals/exports/{job.pk}/"
    assert job.kind == "hf_trajectory" and job.options["session"] == session.pk and job.options["private"] is True
    job_page = admin.get(response["Location"])
    assert job_page.status_code == 200 and f"from-page (session {session.pk})" in job_page.content.decode()

    refused = admin.post(url, {"destination": hub.pk, "repo_id": "bad name!", "subject": "run"})
    assert refused.status_code == 302 and refused["Location"] == f"/o/acme/p/agent/runs/{run.pk}/"
    with organization_scope(tenant.organization):
        assert ExportJob.objects.count() == 1

    member = signed_in(tenant.member)
    assert 'id="push-trajectory"' not in member.get(f"/o/acme/p/agent/evals/runs/{run.pk}/panel/").content.decode()
    assert member.post(url, {"destination": hub.pk, "repo_id": "x"}).status_code == 403


def test_a_session_s_push_is_started_by_its_id_and_another_tenant_s_is_not_found(tenant, other_tenant, hub, signed_in):
    mine = _session(tenant)
    theirs = _session(other_tenant, title="Theirs")
    admin = signed_in(tenant.admin)
    url = f"/o/acme/p/agent/evals/agent-sessions/{mine.pk}/push-trajectory/"
    response = admin.post(url, {"destination": hub.pk, "repo_id": "sessions"})
    with organization_scope(tenant.organization):
        job = ExportJob.objects.get()
    assert response.status_code == 302 and response["Location"] == f"/o/acme/p/agent/evals/exports/{job.pk}/"
    assert job.options == {"repo_id": "sessions", "split": "train", "private": False, "session": mine.pk}
    foreign = f"/o/acme/p/agent/evals/agent-sessions/{theirs.pk}/push-trajectory/"
    assert admin.post(foreign, {"destination": hub.pk, "repo_id": "x"}).status_code == 404
    missing_repo = admin.post(url, {"destination": hub.pk})
    assert missing_repo.status_code == 302 and missing_repo["Location"] == "/o/acme/p/agent/evals/exports/"
    with organization_scope(tenant.organization):
        assert ExportJob.objects.count() == 1
