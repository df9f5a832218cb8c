"""The exports API: destinations (owners and admins), export jobs (viewers read,
owners and admins start, retry and cancel), schedules; another tenant's export is a
404; bad input is a 400 naming it; a job created through the API runs on a real
Celery worker to its end."""

from __future__ import annotations

import time
from datetime import UTC, datetime

import pytest

from agentops.models import AuditEvent
from agentops.scoping import organization_scope
from agentops.services.secrets import provider_secret_set
from evals.bulk_export import services
from evals.models import ExportDestination, ExportJob, WandbExport
from evals.services.wandb_export import log_runs
from runs.services.settings import ingest_settings_update
from tests.evals.factories import make_dataset
from tests.evals.hub_helpers import hub_destination, run_job
from tests.evals.test_bulk_export import make_run
from tests.evals.test_wandb_runs import choose, export_of, ingest_ended_run, logged_runs, wait_for
from tests.fake_hf_hub import ORG, TOKEN, fake_hf_hub  # noqa: F401 - the fixture
from tests.isolation import CreateIsolation, ListIsolation, ReadIsolation


@pytest.fixture(autouse=True)
def export_root(tmp_path, settings):
    root = tmp_path / "exports"
    root.mkdir()
    settings.EXPORT_ROOT = str(root)
    return root


def make_destination(tenant, name="disk") -> ExportDestination:
    with organization_scope(tenant.organization):
        return services.destination_create(
            organization=tenant.organization,
            actor=None,
            name=name,
            kind="folder",
            config={"path": tenant.organization.slug},
        )


def make_job(tenant) -> ExportJob:
    destination = make_destination(tenant, name=f"disk-{ExportJob.dangerously_unscoped_objects.count()}")
    return ExportJob.dangerously_unscoped_objects.create(
        organization=tenant.organization,
        project=tenant.project,
        destination=destination,
        destination_label=destination.name,
        start_date="2026-03-01",
        end_date="2026-03-02",
        status=ExportJob.Status.FAILED,
        error="the bucket 'x' does not exist",
    )


def exports_url(tenant) -> str:
    return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/exports/"


class TestExportIsolation(ReadIsolation, ListIsolation, CreateIsolation):
    create_body: dict = {}

    @pytest.fixture(autouse=True)
    def _create_body(self, tenant):
        destination = make_destination(tenant, name="isolation")
        self.create_body = {"destination": destination.pk, "start_date": "2026-03-01", "end_date": "2026-03-01"}

    def make_object(self, tenant):
        return make_job(tenant)

    def list_url(self, tenant):
        return exports_url(tenant)

    def detail_url(self, url_tenant, obj):
        return f"{exports_url(url_tenant)}{obj.pk}/"

    def created_organization_id(self, response):
        return ExportJob.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id


def test_retry_and_cancel_of_another_tenants_export_are_not_found(tenant, other_tenant, client_for):
    foreign = make_job(other_tenant)
    client = client_for(tenant.owner)
    for action in ("retry", "cancel"):
        assert client.post(f"{exports_url(tenant)}{foreign.pk}/{action}/").status_code == 404
    assert ExportJob.dangerously_unscoped_objects.count() == 1


def test_another_tenants_destination_cannot_be_used(tenant, other_tenant, client_for):
    foreign = make_destination(other_tenant)
    response = client_for(tenant.admin).post(
        exports_url(tenant),
        {"destination": foreign.pk, "start_date": "2026-03-01", "end_date": "2026-03-01"},
        format="json",
    )
    assert response.status_code == 400 and "no export destination" in response.json()["error"]["message"]
    other_org = f"/api/v1/organizations/{tenant.organization.slug}/export-destinations/{foreign.pk}/"
    assert client_for(tenant.owner).get(other_org).status_code == 404


@pytest.mark.parametrize("role", ["viewer", "member"])
def test_viewers_and_members_read_exports_but_cannot_start_retry_or_cancel_them(tenant, client_for, role):
    job = make_job(tenant)
    client = client_for(tenant.user(role))
    assert client.get(exports_url(tenant)).json()["results"][0]["id"] == job.pk
    assert client.get(f"{exports_url(tenant)}{job.pk}/").json()["error"] == "the bucket 'x' does not exist"
    body = {"destination": job.destination_id, "start_date": "2026-03-01", "end_date": "2026-03-01"}
    assert client.post(exports_url(tenant), body, format="json").status_code == 403
    assert client.post(f"{exports_url(tenant)}{job.pk}/retry/").status_code == 403
    assert client.post(f"{exports_url(tenant)}{job.pk}/cancel/").status_code == 403
    destinations = f"/api/v1/organizations/{tenant.organization.slug}/export-destinations/"
    assert client.get(destinations).status_code == 403
    assert ExportJob.dangerously_unscoped_objects.count() == 1


def test_bad_export_input_is_a_400_naming_it(tenant, client_for):
    destination = make_destination(tenant)
    client = client_for(tenant.admin)
    cases = {
        "backwards": {"start_date": "2026-03-03", "end_date": "2026-03-01"},
        "unknown table 'secrets'": {"start_date": "2026-03-01", "end_date": "2026-03-01", "tables": ["secrets"]},
        "start_date": {"start_date": "yesterday", "end_date": "2026-03-01"},
    }
    for expected, body in cases.items():
        response = client.post(exports_url(tenant), {"destination": destination.pk, **body}, format="json")
        assert response.status_code == 400, response.content
        assert expected in str(response.json()["error"])
    assert not ExportJob.dangerously_unscoped_objects.exists()


def test_destination_credentials_are_write_only_and_paths_out_of_root_refused(tenant, client_for):
    client = client_for(tenant.admin)
    url = f"/api/v1/organizations/{tenant.organization.slug}/export-destinations/"
    response = client.post(
        url,
        {
            "name": "lake",
            "kind": "s3",
            "config": {"endpoint_url": "http://127.0.0.1:9", "bucket": "lake-bucket"},
            "credentials": {"access_key_id": "AKIAEXAMPLE9876", "secret_access_key": "very-secret"},
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    assert "very-secret" not in response.content.decode() and response.json()["credentials_hint"] == "9876"
    escape = client.post(url, {"name": "up", "kind": "folder", "config": {"path": "../../etc"}}, format="json")
    assert escape.status_code == 400 and "'..'" in escape.json()["error"]["message"]


def test_ended_export_cannot_be_cancelled_and_a_succeeded_one_not_retried(tenant, client_for):
    job = make_job(tenant)
    ExportJob.dangerously_unscoped_objects.filter(pk=job.pk).update(status=ExportJob.Status.SUCCEEDED)
    client = client_for(tenant.admin)
    assert client.post(f"{exports_url(tenant)}{job.pk}/cancel/").status_code == 409
    assert client.post(f"{exports_url(tenant)}{job.pk}/retry/").status_code == 409


def test_schedule_through_the_api(tenant, client_for):
    destination = make_destination(tenant)
    url = f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/export-schedules/"
    assert (
        client_for(tenant.member).post(url, {"destination": destination.pk, "every": "day"}, format="json").status_code
        == 403
    )
    response = client_for(tenant.admin).post(url, {"destination": destination.pk, "every": "day"}, format="json")
    assert response.status_code == 201, response.content
    assert client_for(tenant.viewer).get(url).json()[0]["every"] == "day"
    assert (
        client_for(tenant.admin).post(url, {"destination": destination.pk, "every": "hour"}, format="json").status_code
        == 400
    )


def test_export_created_through_the_api_runs_on_a_worker_to_its_end(tenant, client_for, celery_worker, export_root):
    make_run(tenant, 1, datetime(2026, 3, 2, 10, tzinfo=UTC))
    destination = make_destination(tenant)
    client = client_for(tenant.owner)
    response = client.post(
        exports_url(tenant),
        {"destination": destination.pk, "start_date": "2026-03-02", "end_date": "2026-03-02"},
        format="json",
    )
    assert response.status_code == 201 and response.json()["status"] == "queued"
    detail = f"{exports_url(tenant)}{response.json()['id']}/"
    deadline = time.monotonic() + 120
    while client.get(detail).json()["status"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.2)
    body = client.get(detail).json()
    assert body["status"] == "succeeded", body
    assert body["progress"]["runs"] == 1 and body["progress"]["steps"] == 2
    assert [entry["table"] for entry in body["files"]][:2] == ["runs", "steps"]
    assert "succeeded" in body["log"]


# -- the Hugging Face Hub kinds ---------------------------------------------------------------


def test_a_hub_push_created_through_the_api_runs_on_a_worker_to_its_end(tenant, client_for, celery_worker, fake_hf_hub):  # noqa: F811
    dataset = make_dataset(tenant.project, [{"key": "a", "input": "q"}])
    client = client_for(tenant.owner)
    destination = client.post(
        f"/api/v1/organizations/{tenant.organization.slug}/export-destinations/",
        {"name": "hub", "kind": "hf_hub", "config": {"endpoint": fake_hf_hub.url}, "credentials": {"token": TOKEN}},
        format="json",
    )
    assert destination.status_code == 201, destination.content
    assert TOKEN not in destination.content.decode()
    response = client.post(
        exports_url(tenant),
        {
            "kind": "hf_dataset",
            "destination": destination.json()["id"],
            "options": {"repo_id": f"{ORG}/api-push", "dataset": dataset.pk},
        },
        format="json",
    )
    assert response.status_code == 201, response.content
    assert response.json()["options"] == {
        "repo_id": f"{ORG}/api-push",
        "split": "test",
        "private": True,
        "dataset": dataset.pk,
        "version": 1,
    }
    detail = f"{exports_url(tenant)}{response.json()['id']}/"
    deadline = time.monotonic() + 120
    while client.get(detail).json()["status"] in ("queued", "running") and time.monotonic() < deadline:
        time.sleep(0.2)
    body = client.get(detail).json()
    assert body["status"] == "succeeded", body
    assert body["progress"] == {"items": 1} and body["files"][0]["table"] == "items"
    assert fake_hf_hub.repos[f"{ORG}/api-push"].files["data/test.jsonl"]
    assert TOKEN not in body["log"]


def test_bad_hub_options_through_the_api_are_a_400_naming_them(tenant, client_for, fake_hf_hub):  # noqa: F811
    destination = hub_destination(tenant, fake_hf_hub)
    dataset = make_dataset(tenant.project, [{"input": "x"}], name="mine")
    client = client_for(tenant.admin)
    cases = {
        "options.repo_id is required": {"kind": "hf_dataset", "options": {"dataset": dataset.pk}},
        "options.columns.input is required": {
            "kind": "hf_import",
            "options": {"repo_id": "a/b", "columns": {"expected": "y"}, "new_dataset": "n"},
        },
        "a parquet export needs start_date and end_date": {"kind": "parquet"},
        "options": {"kind": "hf_dataset", "options": "everything"},
        "kind": {"kind": "hf_everything", "options": {}},
    }
    for expected, body in cases.items():
        response = client.post(exports_url(tenant), {"destination": destination.pk, **body}, format="json")
        assert response.status_code == 400, response.content
        assert expected in str(response.json()["error"]), response.json()
    assert not ExportJob.dangerously_unscoped_objects.exists()


def test_another_tenants_dataset_or_hub_job_is_never_reached(tenant, other_tenant, client_for, fake_hf_hub):  # noqa: F811
    destination = hub_destination(tenant, fake_hf_hub)
    foreign_dataset = make_dataset(other_tenant.project, [{"input": "x"}])
    foreign_job = run_job(
        other_tenant,
        hub_destination(other_tenant, fake_hf_hub),
        "hf_dataset",
        {"repo_id": "theirs", "dataset": foreign_dataset.pk},
    )
    client = client_for(tenant.owner)

    response = client.post(
        exports_url(tenant),
        {
            "kind": "hf_dataset",
            "destination": destination.pk,
            "options": {"repo_id": "x", "dataset": foreign_dataset.pk},
        },
        format="json",
    )

    assert response.status_code == 400 and "no dataset with id" in response.json()["error"]["message"]
    assert client.get(f"{exports_url(tenant)}{foreign_job.pk}/").status_code == 404
    assert client.post(f"{exports_url(tenant)}{foreign_job.pk}/retry/").status_code == 404


# --- Weights & Biases logging -------------------------------------------------------------------


@pytest.fixture
def offline(settings, tmp_path):
    """The real wandb SDK, writing what it would send under ``tmp_path``."""
    settings.WANDB_MODE = "offline"
    settings.WANDB_DIR = tmp_path
    return tmp_path


def failed_wandb_run(tenant, settings) -> WandbExport:
    """A run whose W&B logging failed for good: the saved base URL was taken off the
    operator's list after it was saved (the worker records the reason)."""
    settings.WANDB_ALLOWED_BASE_URLS = ["https://api.wandb.ai", "https://wandb.example.com"]
    choose(tenant, "runs", key=False)
    with organization_scope(tenant.organization):
        provider_secret_set(
            organization=tenant.organization,
            actor=tenant.owner,
            provider="wandb",
            api_key="w" * 40,
            base_url="https://wandb.example.com",
        )
    run = ingest_ended_run(tenant, trace_id=f"trace-{tenant.organization.slug}")
    settings.WANDB_ALLOWED_BASE_URLS = ["https://api.wandb.ai"]
    with organization_scope(tenant.organization):
        log_runs(run_ids=[run.pk], final=True)
        return WandbExport.objects.get(run=run, status=WandbExport.Status.FAILED)


def save_wandb_key(tenant) -> None:
    """The fix: the key saved again without the refused base URL."""
    with organization_scope(tenant.organization):
        provider_secret_set(organization=tenant.organization, actor=tenant.owner, provider="wandb", api_key="w" * 40)


def wandb_url(tenant) -> str:
    return f"{exports_url(tenant)}wandb/"


def test_a_failed_wandb_logging_is_listed_and_its_retry_logs_the_run_through_the_sdk(
    celery_worker, tenant, offline, settings, client_for
):
    export = failed_wandb_run(tenant, settings)
    viewer = client_for(tenant.viewer)
    listed = viewer.get(wandb_url(tenant))
    assert listed.status_code == 200, listed.content
    [row] = listed.json()["results"]
    assert (row["id"], row["kind"], row["status"], row["attempts"]) == (export.pk, "run", "failed", 1)
    assert row["run"]["id"] == export.run_id and row["experiment"] is None
    assert "WANDB_ALLOWED_BASE_URLS" in row["error"]
    assert [r["id"] for r in viewer.get(f"{wandb_url(tenant)}?status=failed").json()["results"]] == [export.pk]
    assert viewer.get(f"{wandb_url(tenant)}?status=logged").json()["results"] == []
    bad = viewer.get(f"{wandb_url(tenant)}?status=broken")
    assert bad.status_code == 400 and "unknown status 'broken'" in bad.json()["error"]["message"]
    for role in ("viewer", "member"):
        assert client_for(tenant.user(role)).post(f"{wandb_url(tenant)}{export.pk}/retry/").status_code == 403

    save_wandb_key(tenant)
    admin = client_for(tenant.admin)
    retry_url = f"{wandb_url(tenant)}{export.pk}/retry/"
    retried = admin.post(retry_url, HTTP_IDEMPOTENCY_KEY="retry-1")
    assert retried.status_code == 202, retried.content
    assert retried.json()["id"] == export.pk and retried.json()["status"] in ("queued", "logged")
    replayed = admin.post(retry_url, HTTP_IDEMPOTENCY_KEY="retry-1")
    assert replayed.status_code == 202 and replayed.headers["Idempotent-Replayed"] == "true"

    wait_for(lambda: export_of(tenant, export.run).status == WandbExport.Status.LOGGED, "the retry logged")
    logged = wait_for(
        lambda: [r for r in logged_runs(offline, f"agentops-run-{export.run_id}") if "cost" in r["summary"]],
        "the run file",
    )
    assert logged[0]["config"]["agentops_run"] == export.run_id and logged[0]["summary"]["status"] == "succeeded"
    done = export_of(tenant, export.run)
    assert (done.attempts, done.error) == (2, "") and done.logged_at is not None

    again = admin.post(retry_url)
    assert (
        again.status_code == 409
        and "only a failed W&B logging can be retried; this one is logged" in again.json()["error"]["message"]
    )
    with organization_scope(tenant.organization):
        assert AuditEvent.objects.filter(action="wandb.retry").count() == 1


def test_a_wandb_retry_that_needs_a_setting_changed_first_is_a_409_saying_which(tenant, offline, settings, client_for):
    export = failed_wandb_run(tenant, settings)
    with organization_scope(tenant.organization):
        ingest_settings_update(
            project=tenant.project,
            actor=tenant.admin,
            redact=[],
            custom_patterns=[],
            retention_days=None,
            wandb_logging="experiments",
        )
    refused = client_for(tenant.owner).post(f"{wandb_url(tenant)}{export.pk}/retry/")
    assert refused.status_code == 409
    assert "no longer logs runs to W&B" in refused.json()["error"]["message"]
    assert export_of(tenant, export.run).status == WandbExport.Status.FAILED


def test_another_tenants_wandb_logging_is_not_listed_and_its_retry_is_not_found(
    tenant, other_tenant, offline, settings, client_for
):
    foreign = failed_wandb_run(other_tenant, settings)
    client = client_for(tenant.owner)
    assert client.get(wandb_url(tenant)).json()["results"] == []
    assert client.post(f"{wandb_url(tenant)}{foreign.pk}/retry/").status_code == 404
    assert client.get(wandb_url(other_tenant)).status_code == 404
    assert client.post(f"{wandb_url(other_tenant)}{foreign.pk}/retry/").status_code == 404
    assert WandbExport.dangerously_unscoped_objects.get(pk=foreign.pk).status == WandbExport.Status.FAILED
