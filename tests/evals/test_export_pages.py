"""The exports pages: everyone in the project sees the exports and their progress;
only owners and admins start, retry or cancel them and manage destinations; another
tenant's export is a 404; a bad form is shown again with the reason, never a 500."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from django.test import Client

from evals.bulk_export.runner import export_run
from evals.models import ExportDestination, ExportJob
from tests.evals.test_api_exports import make_destination, make_job
from tests.evals.test_bulk_export import make_run


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
    from agentops.scoping import organization_scope

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
