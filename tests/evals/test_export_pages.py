"""The exports pages: everyone in the project sees the exports and their progress;
only owners and admins start, retry or cancel them and manage destinations; another
tenant's export is a 404; a bad form is shown again with the reason, never a 500."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client
from django.utils import timezone

from agentops.scoping import organization_scope
from agentops.services.secrets import provider_secret_set
from evals.bulk_export.runner import export_run
from evals.models import DatasetItem, ExportDestination, ExportJob, WandbExport
from evals.services.experiments import experiment_start
from evals.services.wandb_export import log_experiment
from runs.services.agents import agent_create
from tests.evals.factories import drive, make_dataset, make_evaluator
from tests.evals.hub_helpers import hub_destination
from tests.evals.test_api_exports import make_destination, make_job, offline  # noqa: F401 - the fixture
from tests.evals.test_bulk_export import make_run
from tests.evals.test_wandb_runs import choose, ingest_ended_run, wait_for
from tests.fake_hf_hub import ORG, TOKEN, fake_hf_hub  # noqa: F401 - the fixture


@pytest.fixture(autouse=True)
def export_root(tmp_path, settings):
    root = tmp_path / "exports"
    root.mkdir()
    settings.EXPORT_ROOT = str(root)
    return root


def browser(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def pages(tenant) -> str:
    return f"/o/{tenant.organization.slug}/p/{tenant.project.slug}/evals/exports/"


def test_viewer_sees_exports_but_no_forms_and_cannot_post(tenant):
    job = make_job(tenant)
    client = browser(tenant.viewer)
    response = client.get(pages(tenant))
    assert response.status_code == 200
    body = response.content.decode()
    assert f"#{job.pk}" in body and 'id="new-export"' not in body and 'id="destinations"' not in body
    refused = client.post(pages(tenant), {"action": "export", "destination": job.destination_id})
    assert refused.status_code == 403
    assert client.post(f"{pages(tenant)}{job.pk}/", {"action": "retry"}).status_code == 403
    assert ExportJob.dangerously_unscoped_objects.count() == 1


def test_admin_starts_an_export_and_its_page_shows_rows_per_table(tenant, export_root):
    make_run(tenant, 1, datetime(2026, 3, 2, 9, tzinfo=UTC))
    destination = make_destination(tenant)
    client = browser(tenant.admin)
    response = client.post(
        pages(tenant),
        {"action": "export", "destination": destination.pk, "start_date": "2026-03-02", "end_date": "2026-03-02"},
    )
    job = ExportJob.dangerously_unscoped_objects.get()
    assert response.status_code == 302 and response["Location"] == f"{pages(tenant)}{job.pk}/"
    queued = client.get(f"{pages(tenant)}{job.pk}/").content.decode()
    assert 'hx-trigger="every 2s"' in queued  # polls while it has not ended
    with organization_scope(tenant.organization):
        export_run(export_id=job.pk, worker="test")
    fragment = client.get(f"{pages(tenant)}{job.pk}/progress/").content.decode()
    assert "succeeded" in fragment and "every 2s" not in fragment
    assert '<td>steps</td><td class="num">2</td>' in fragment


def test_backwards_range_on_the_page_is_a_400_with_the_reason(tenant):
    destination = make_destination(tenant)
    response = browser(tenant.owner).post(
        pages(tenant),
        {"action": "export", "destination": destination.pk, "start_date": "2026-03-05", "end_date": "2026-03-01"},
    )
    assert response.status_code == 400
    assert "The date range is backwards" in response.content.decode()
    assert not ExportJob.dangerously_unscoped_objects.exists()


def test_folder_destination_outside_export_root_is_refused_on_the_page(tenant):
    response = browser(tenant.admin).post(
        pages(tenant), {"action": "destination", "name": "etc", "kind": "folder", "path": "../../etc"}
    )
    assert response.status_code == 400 and "must not contain" in response.content.decode()
    assert not ExportDestination.dangerously_unscoped_objects.exists()


def test_another_tenants_export_page_is_not_found(tenant, other_tenant):
    foreign = make_job(other_tenant)
    client = browser(tenant.owner)
    for suffix in ("", "progress/"):
        assert client.get(f"{pages(tenant)}{foreign.pk}/{suffix}").status_code == 404
    assert client.post(f"{pages(tenant)}{foreign.pk}/", {"action": "retry"}).status_code == 404
    assert ExportJob.dangerously_unscoped_objects.count() == 1


def test_failed_export_is_retried_from_its_page(tenant):
    job = make_job(tenant)
    response = browser(tenant.admin).post(f"{pages(tenant)}{job.pk}/", {"action": "retry"})
    retry = ExportJob.dangerously_unscoped_objects.exclude(pk=job.pk).get()
    assert response.status_code == 302 and retry.retry_of_id == job.pk and retry.attempt == 2


# -- the Hugging Face Hub ---------------------------------------------------------------------


def test_admin_adds_a_hub_destination_whose_token_is_never_shown(tenant, fake_hf_hub):  # noqa: F811
    client = browser(tenant.admin)
    response = client.post(
        pages(tenant),
        {
            "action": "destination",
            "name": "hub",
            "kind": "hf_hub",
            "endpoint_url": fake_hf_hub.url,
            "namespace": ORG,
            "token": TOKEN,
        },
    )
    assert response.status_code == 302
    destination = ExportDestination.dangerously_unscoped_objects.get()
    assert destination.kind == "hf_hub" and destination.config == {"endpoint": fake_hf_hub.url, "namespace": ORG}
    body = client.get(pages(tenant)).content.decode()
    assert TOKEN not in body and f"token …{TOKEN[-4:]}" in body
    assert 'id="hub-push"' in body and 'id="hub-import"' in body


def test_admin_pushes_a_dataset_to_the_hub_from_the_page(tenant, fake_hf_hub):  # noqa: F811
    destination = hub_destination(tenant, fake_hf_hub)
    dataset = make_dataset(tenant.project, [{"key": "a", "input": "q"}], name="support")
    client = browser(tenant.admin)

    response = client.post(
        pages(tenant),
        {
            "action": "hub-push",
            "kind": "hf_dataset",
            "destination": destination.pk,
            "repo_id": "from-page",
            "private": "on",
            "dataset": dataset.pk,
        },
    )

    job = ExportJob.dangerously_unscoped_objects.get()
    assert response.status_code == 302 and response["Location"] == f"{pages(tenant)}{job.pk}/"
    assert job.kind == "hf_dataset" and job.options["repo_id"] == "from-page" and job.options["private"] is True
    with organization_scope(tenant.organization):
        export_run(export_id=job.pk, worker="test")
    page = client.get(f"{pages(tenant)}{job.pk}/").content.decode()
    assert "Dataset version to the Hugging Face Hub: from-page" in page and "succeeded" in page
    assert "Dataset version to the Hugging Face Hub: from-page" in client.get(pages(tenant)).content.decode()


def test_a_bad_import_mapping_on_the_page_is_a_400_with_the_reason(tenant, fake_hf_hub):  # noqa: F811
    destination = hub_destination(tenant, fake_hf_hub)
    response = browser(tenant.admin).post(
        pages(tenant),
        {
            "action": "hub-import",
            "destination": destination.pk,
            "repo_id": "acme/qa",
            "split": "train",
            "input_columns": "question, question",
        },
    )
    assert response.status_code == 400
    body = response.content.decode()
    assert "names a column twice" in body
    assert not ExportJob.dangerously_unscoped_objects.exists()


def test_admin_imports_from_the_hub_on_the_page(tenant, fake_hf_hub):  # noqa: F811
    destination = hub_destination(tenant, fake_hf_hub)
    fake_hf_hub.add_repo(f"{ORG}/qa", {"train.jsonl": b'{"q": "2+2?", "a": "4", "src": "math"}\n'})

    response = browser(tenant.admin).post(
        pages(tenant),
        {
            "action": "hub-import",
            "destination": destination.pk,
            "repo_id": f"{ORG}/qa",
            "split": "train",
            "input_columns": "q",
            "expected_columns": "a",
            "metadata_columns": "src",
            "new_dataset": "qa from hub",
        },
    )

    job = ExportJob.dangerously_unscoped_objects.get()
    assert response.status_code == 302
    assert job.options["columns"] == {"input": "q", "expected": "a", "metadata": ["src"]}
    with organization_scope(tenant.organization):
        assert export_run(export_id=job.pk, worker="test") == ExportJob.Status.SUCCEEDED
        item = DatasetItem.objects.get(dataset__name="qa from hub")
    assert (item.input, item.expected, item.metadata) == ("2+2?", "4", {"src": "math"})


def test_a_viewer_cannot_push_or_import(tenant, fake_hf_hub):  # noqa: F811
    destination = hub_destination(tenant, fake_hf_hub)
    dataset = make_dataset(tenant.project, [{"input": "q"}])
    client = browser(tenant.viewer)
    assert 'id="hub-push"' not in client.get(pages(tenant)).content.decode()
    for body in (
        {
            "action": "hub-push",
            "kind": "hf_dataset",
            "destination": destination.pk,
            "repo_id": "x",
            "dataset": dataset.pk,
        },
        {"action": "hub-import", "destination": destination.pk, "repo_id": "x", "split": "train", "input_columns": "q"},
    ):
        assert client.post(pages(tenant), body).status_code == 403
    assert not ExportJob.dangerously_unscoped_objects.exists()


# --- Weights & Biases logging -------------------------------------------------------------------


def failed_wandb_experiment(tenant, settings) -> WandbExport:
    """An ended experiment whose W&B logging failed: the saved base URL was taken off the
    operator's list after it was saved."""
    settings.WANDB_ALLOWED_BASE_URLS = ["https://api.wandb.ai", "https://wandb.example.com"]
    choose(tenant, "experiments", key=False)
    with organization_scope(tenant.organization):
        provider_secret_set(
            organization=tenant.organization,
            actor=tenant.owner,
            provider="wandb",
            api_key="w" * 40,
            base_url="https://wandb.example.com",
        )
        agent = agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
        dataset = make_dataset(tenant.project, [{"key": "k0", "input": "q0", "expected": "q0"}])
        evaluator = make_evaluator(tenant.project, "mentions", "contains")
        experiment = drive(
            experiment_start(
                project=tenant.project, actor=tenant.member, dataset=dataset, agent=agent, evaluators=[evaluator]
            )
        )
        settings.WANDB_ALLOWED_BASE_URLS = ["https://api.wandb.ai"]
        assert log_experiment(experiment_id=experiment.pk) is False
        return WandbExport.objects.select_related("experiment").get(experiment=experiment)


@pytest.mark.usefixtures("offline")
def test_viewer_sees_wandb_failures_first_with_the_reason_but_no_retry(tenant, settings):
    failed = failed_wandb_experiment(tenant, settings)
    with organization_scope(tenant.organization):
        logged_run = ingest_ended_run(tenant)
        logged = WandbExport.objects.create(
            organization=tenant.organization,
            project=tenant.project,
            run=logged_run,
            status=WandbExport.Status.LOGGED,
            attempts=1,
            logged_at=timezone.now(),
        )
    client = browser(tenant.viewer)
    body = client.get(pages(tenant)).content.decode()
    section = body[body.index('id="wandb"') :]
    assert section.index(f'id="wandb-{failed.pk}"') < section.index(f'id="wandb-{logged.pk}"')  # failures first
    assert failed.experiment.name in section and f"/evals/experiments/{failed.experiment_id}/" in section
    assert f"/runs/{logged_run.pk}/" in section
    assert "WANDB_ALLOWED_BASE_URLS" in section and 'value="wandb-retry"' not in section
    only_logged = client.get(f"{pages(tenant)}?wandb=logged").content.decode()
    assert f'id="wandb-{logged.pk}"' in only_logged and f'id="wandb-{failed.pk}"' not in only_logged
    refused = client.post(pages(tenant), {"action": "wandb-retry", "id": failed.pk})
    assert refused.status_code == 403
    assert WandbExport.dangerously_unscoped_objects.get(pk=failed.pk).status == WandbExport.Status.FAILED


def test_admin_retries_a_failed_experiment_from_the_page_and_it_is_logged_through_the_sdk(
    celery_worker,
    tenant,
    offline,  # noqa: F811 - the fixture
    settings,
):
    failed = failed_wandb_experiment(tenant, settings)
    with organization_scope(tenant.organization):
        provider_secret_set(organization=tenant.organization, actor=tenant.owner, provider="wandb", api_key="w" * 40)
    client = browser(tenant.admin)
    page = client.get(pages(tenant)).content.decode()
    assert 'value="wandb-retry"' in page
    response = client.post(pages(tenant), {"action": "wandb-retry", "id": failed.pk}, follow=True)
    assert response.status_code == 200
    assert "Queued for W&amp;B again" in response.content.decode()

    def logged():
        with organization_scope(tenant.organization):
            return WandbExport.objects.get(pk=failed.pk).status == WandbExport.Status.LOGGED

    wait_for(logged, "the retry logged")
    files = wait_for(
        lambda: list(offline.glob(f"wandb/offline-run-*/run-agentops-experiment-{failed.experiment_id}.wandb")),
        "the file",
    )
    assert files, "logged to the experiment's own W&B run (its id is stable, so a second logging updates it)"
    again = client.post(pages(tenant), {"action": "wandb-retry", "id": failed.pk}, follow=True)
    assert "only a failed W&amp;B logging can be retried; this one is logged" in again.content.decode()


@pytest.mark.usefixtures("offline")
def test_another_tenants_wandb_logging_cannot_be_retried_from_the_page(tenant, other_tenant, settings):
    foreign = failed_wandb_experiment(other_tenant, settings)
    client = browser(tenant.owner)
    assert f'id="wandb-{foreign.pk}"' not in client.get(pages(tenant)).content.decode()
    assert client.post(pages(tenant), {"action": "wandb-retry", "id": foreign.pk}).status_code == 404
    assert WandbExport.dangerously_unscoped_objects.get(pk=foreign.pk).status == WandbExport.Status.FAILED
