"""The datasets API: datasets, versions, items (JSON and file uploads), removing items,
items from runs; roles and API key scopes; another organization's dataset or run is a
404 on every endpoint."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agentops.scoping import organization_scope
from evals.models import Dataset, DatasetItem
from evals.services.datasets import dataset_create, items_add
from tests.evals.test_datasets import make_run
from tests.isolation import CreateIsolation, ListIsolation, ReadIsolation, UpdateIsolation

BASE = "/api/v1/projects/acme/agent"


def make_dataset(tenant, name="qa", items=None) -> Dataset:
    with organization_scope(tenant.organization):
        dataset = dataset_create(project=tenant.project, actor=None, name=name)
        if items:
            items_add(dataset=dataset, actor=None, items=items)
    return dataset


def upload(name: str, text: str) -> dict:
    return {"file": SimpleUploadedFile(name, text.encode(), content_type="application/octet-stream")}


def test_member_creates_lists_reads_and_renames_a_dataset(tenant, client_for):
    client = client_for(tenant.member)
    created = client.post(f"{BASE}/datasets/", {"name": "support", "description": "From tickets"}, format="json")
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["name"], body["latest_version"], body["item_count"]) == ("support", 0, 0)
    assert client.post(f"{BASE}/datasets/", {"name": "support"}, format="json").status_code == 409
    assert [row["name"] for row in client.get(f"{BASE}/datasets/").json()] == ["support"]
    renamed = client.patch(f"{BASE}/datasets/{body['id']}/", {"name": "tickets"}, format="json")
    assert renamed.status_code == 200 and renamed.json()["name"] == "tickets"
    assert client.get(f"{BASE}/datasets/{body['id']}/").json()["description"] == "From tickets"


def test_items_are_added_as_versions_and_read_per_version(tenant, client_for):
    dataset = make_dataset(tenant)
    client = client_for(tenant.member)
    items_url = f"{BASE}/datasets/{dataset.pk}/items/"

    first = client.post(items_url, [{"key": "a", "input": "A?"}, {"key": "b", "input": {"q": "B?"}}], format="json")
    assert first.status_code == 201, first.content
    assert (first.json()["number"], first.json()["item_count"], first.json()["dataset"]) == (1, 2, dataset.pk)
    second = client.post(
        items_url, {"items": [{"key": "a", "input": "A, again?", "expected": "yes"}], "note": "fix a"}, format="json"
    )
    assert second.json()["number"] == 2 and second.json()["note"] == "fix a (1 replaced)"

    latest = client.get(items_url).json()
    assert latest["version"] == 2
    assert {row["key"]: row["input"] for row in latest["results"]} == {"a": "A, again?", "b": {"q": "B?"}}
    old = client.get(f"{items_url}?version=1").json()
    assert old["version"] == 1 and {row["key"]: row["input"] for row in old["results"]}["a"] == "A?"
    versions = client.get(f"{BASE}/datasets/{dataset.pk}/versions/").json()["results"]
    assert [(v["number"], v["item_count"], v["created_by"]) for v in versions] == [
        (2, 2, tenant.member.email),
        (1, 2, tenant.member.email),
    ]
    assert client.get(f"{BASE}/datasets/{dataset.pk}/").json()["item_count"] == 2


def test_items_are_cursor_paginated_in_the_order_they_were_added(tenant, client_for):
    dataset = make_dataset(tenant, items=[{"key": f"k{n}", "input": n} for n in range(5)])
    client = client_for(tenant.viewer)
    page = client.get(f"{BASE}/datasets/{dataset.pk}/items/?page_size=2").json()
    keys = [row["key"] for row in page["results"]]
    while page["next"]:
        page = client.get(page["next"]).json()
        keys += [row["key"] for row in page["results"]]
    assert keys == ["k0", "k1", "k2", "k3", "k4"]


def test_an_empty_dataset_lists_no_items_and_bad_versions_are_refused(tenant, client_for):
    dataset = make_dataset(tenant)
    client = client_for(tenant.member)
    empty = client.get(f"{BASE}/datasets/{dataset.pk}/items/").json()
    assert empty["version"] is None and empty["results"] == []
    assert client.get(f"{BASE}/datasets/{dataset.pk}/items/?version=abc").status_code == 400
    missing = client.get(f"{BASE}/datasets/{dataset.pk}/items/?version=3")
    assert missing.status_code == 404 and "version 3" in missing.json()["error"]["message"]


def test_bad_items_are_a_400_naming_the_item(tenant, client_for):
    dataset = make_dataset(tenant)
    client = client_for(tenant.member)
    response = client.post(
        f"{BASE}/datasets/{dataset.pk}/items/", [{"input": "ok"}, {"expected": "no input"}], format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "no item was added: item 1: input is required"
    duplicate = client.post(
        f"{BASE}/datasets/{dataset.pk}/items/", [{"key": "x", "input": 1}, {"key": "x", "input": 2}], format="json"
    )
    assert duplicate.status_code == 400 and "key 'x' appears more than once" in duplicate.json()["error"]["message"]
    assert client.post(f"{BASE}/datasets/{dataset.pk}/items/", {"input": "x"}, format="json").status_code == 400


def test_files_are_imported_from_a_multipart_upload(tenant, client_for):
    dataset = make_dataset(tenant)
    client = client_for(tenant.member)
    url = f"{BASE}/datasets/{dataset.pk}/items/"
    imported = client.post(url, upload("questions.csv", "key,input,expected\nq1,Hi?,Hello\nq2,Bye?,\n"))
    assert imported.status_code == 201, imported.content
    assert imported.json()["note"] == "imported questions.csv (2 items)"
    refused = client.post(url, upload("more.jsonl", '{"input": "ok"}\n{"input": oops}\n'))
    assert refused.status_code == 400
    error = refused.json()["error"]
    assert error["message"].startswith("more.jsonl was not imported: line 2: not valid JSON")
    assert error["details"]["problems"][0].startswith("line 2:")
    with organization_scope(tenant.organization):
        assert DatasetItem.objects.filter(dataset=dataset).count() == 2


def test_too_big_upload_is_a_413(tenant, client_for, monkeypatch):
    from evals.services import datasets as services

    monkeypatch.setattr(services, "MAX_IMPORT_BYTES", 100)
    dataset = make_dataset(tenant)
    response = client_for(tenant.member).post(
        f"{BASE}/datasets/{dataset.pk}/items/", upload("big.csv", "input\n" + "x" * 200)
    )
    assert response.status_code == 413 and response.json()["error"]["code"] == "too_large"


def test_items_are_removed_by_key_and_unknown_keys_are_named(tenant, client_for):
    dataset = make_dataset(tenant, items=[{"key": "a", "input": 1}, {"key": "b", "input": 2}])
    client = client_for(tenant.member)
    url = f"{BASE}/datasets/{dataset.pk}/items/remove/"
    unknown = client.post(url, {"keys": ["a", "zzz"]}, format="json")
    assert unknown.status_code == 400 and "'zzz'" in unknown.json()["error"]["message"]
    removed = client.post(url, {"keys": ["a"]}, format="json")
    assert removed.status_code == 201 and (removed.json()["number"], removed.json()["item_count"]) == (2, 1)


def test_a_run_becomes_an_item(tenant, client_for):
    dataset = make_dataset(tenant)
    run = make_run(tenant.project)
    client = client_for(tenant.member)
    url = f"{BASE}/datasets/{dataset.pk}/items/from-run/"
    added = client.post(url, {"run_id": run.pk}, format="json")
    assert added.status_code == 201, added.content
    item = client.get(f"{BASE}/datasets/{dataset.pk}/items/").json()["results"][0]
    assert (item["key"], item["input"], item["expected"], item["source_run"]) == (
        f"run-{run.pk}",
        run.input,
        run.output,
        run.pk,
    )
    overridden = client.post(url, {"run_id": run.pk, "expected": None}, format="json")
    assert overridden.json()["item_count"] == 1
    assert client.get(f"{BASE}/datasets/{dataset.pk}/items/").json()["results"][0]["expected"] is None


def test_another_organizations_run_cannot_be_added(tenant, other_tenant, client_for):
    dataset = make_dataset(tenant)
    foreign = make_run(other_tenant.project)
    response = client_for(tenant.owner).post(
        f"{BASE}/datasets/{dataset.pk}/items/from-run/", {"run_id": foreign.pk}, format="json"
    )
    assert response.status_code == 404 and response.json()["error"]["message"] == "run not found"


def test_viewer_reads_but_cannot_change_datasets(tenant, client_for):
    dataset = make_dataset(tenant, items=[{"key": "a", "input": 1}])
    run = make_run(tenant.project)
    client = client_for(tenant.viewer)
    for path in (
        "datasets/",
        f"datasets/{dataset.pk}/",
        f"datasets/{dataset.pk}/versions/",
        f"datasets/{dataset.pk}/items/",
    ):
        assert client.get(f"{BASE}/{path}").status_code == 200, path
    writes = [
        ("post", "datasets/", {"name": "mine"}),
        ("patch", f"datasets/{dataset.pk}/", {"name": "renamed"}),
        ("post", f"datasets/{dataset.pk}/items/", [{"input": "x"}]),
        ("post", f"datasets/{dataset.pk}/items/remove/", {"keys": ["a"]}),
        ("post", f"datasets/{dataset.pk}/items/from-run/", {"run_id": run.pk}),
    ]
    for method, path, body in writes:
        response = getattr(client, method)(f"{BASE}/{path}", body, format="json")
        assert response.status_code == 403, (method, path)
        assert response.json()["error"]["code"] == "permission_denied"


def test_api_keys_read_with_the_read_scope_and_write_with_execute(tenant, key_client):
    dataset = make_dataset(tenant)
    url = f"{BASE}/datasets/{dataset.pk}/items/"
    reader = key_client(tenant.project, ["read"])
    assert reader.get(url).status_code == 200
    assert reader.post(url, [{"input": "x"}], format="json").status_code == 403
    assert key_client(tenant.project, ["ingest"]).get(url).status_code == 403
    writer = key_client(tenant.project, ["execute"])
    added = writer.post(url, [{"input": "x"}], format="json")
    assert added.status_code == 201 and added.json()["created_by"] is None
    uploaded = writer.post(url, upload("ci.jsonl", json.dumps({"key": "ci", "input": "y"})))
    assert uploaded.status_code == 201 and uploaded.json()["number"] == 2


# --- Tenant isolation --------------------------------------------------------------------


class TestDatasetIsolation(ReadIsolation, UpdateIsolation, ListIsolation, CreateIsolation):
    update_body = {"name": "taken over"}
    create_body = {"name": "mine"}

    def make_object(self, tenant):
        return make_dataset(tenant, name=f"qa-{tenant.organization.slug}", items=[{"key": "a", "input": 1}])

    def detail_url(self, url_tenant, obj):
        return f"/api/v1/projects/{url_tenant.organization.slug}/agent/datasets/{obj.pk}/"

    def list_url(self, tenant):
        return f"/api/v1/projects/{tenant.organization.slug}/agent/datasets/"

    def created_organization_id(self, response):
        return Dataset.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id


class TestDatasetIsolationWithKey(TestDatasetIsolation):
    as_key = True


@pytest.mark.parametrize("as_key", [False, True])
def test_another_organizations_dataset_is_404_on_every_endpoint(tenant, other_tenant, client_for, key_client, as_key):
    foreign = make_dataset(other_tenant, items=[{"key": "a", "input": 1}])
    own_run = make_run(tenant.project)
    client = key_client(tenant.project) if as_key else client_for(tenant.owner)
    calls = [
        ("get", "", None),
        ("patch", "", {"name": "x"}),
        ("get", "versions/", None),
        ("get", "items/", None),
        ("get", "items/?version=1", None),
        ("post", "items/", [{"key": "b", "input": 2}]),
        ("post", "items/remove/", {"keys": ["a"]}),
        ("post", "items/from-run/", {"run_id": own_run.pk}),
    ]
    for org in ("acme", "globex"):
        for method, path, body in calls:
            url = f"/api/v1/projects/{org}/agent/datasets/{foreign.pk}/{path}"
            response = getattr(client, method)(url, body, format="json") if body is not None else client.get(url)
            assert response.status_code == 404, (org, method, path, response.content)
            assert response.json()["error"]["code"] == "not_found"
    upload_response = client.post(f"{BASE}/datasets/{foreign.pk}/items/", upload("x.csv", "input\nx\n"))
    assert upload_response.status_code == 404
    with organization_scope(other_tenant.organization):
        foreign.refresh_from_db()
        assert foreign.latest_version == 1 and foreign.name == "qa"
