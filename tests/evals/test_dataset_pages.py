"""The datasets pages: the evaluations home, a dataset (items of a version, versions,
importing, adding and removing items), and "add to dataset" on a run's page. Viewers
see no forms and their POSTs are refused; another organization's dataset is a 404."""

from __future__ import annotations

import json

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile
from django.test import Client

from agentops.scoping import organization_scope
from evals.models import Dataset, DatasetItem
from evals.services.datasets import dataset_create, items_add, items_remove
from evals.views import datasets as views
from tests.browser.conftest import NO_CHROMIUM, artifacts_dir, chromium_page, chromium_path  # noqa: F401
from tests.browser.test_live_updates import asgi_server  # noqa: F401 - the uvicorn fixture, reused
from tests.browser.test_runs_pages import _console_errors, _sign_in
from tests.evals.test_datasets import make_run

PROJECT = "/o/acme/p/agent"
EVALS = f"{PROJECT}/evals"
HTMX = {"HTTP_HX_REQUEST": "true"}


def text(response) -> str:
    return response.content.decode()


@pytest.fixture
def signed_in():
    def sign_in(user) -> Client:
        client = Client()
        client.force_login(user)
        return client

    return sign_in


def make_dataset(tenant, name="support", items=None) -> Dataset:
    with organization_scope(tenant.organization):
        dataset = dataset_create(project=tenant.project, actor=None, name=name)
        if items:
            items_add(dataset=dataset, actor=None, items=items)
    return dataset


def items(dataset) -> dict:
    with organization_scope(dataset.organization_id):
        return {
            item.key: item
            for item in DatasetItem.objects.filter(dataset=dataset, removed_in__isnull=True).order_by("id")
        }


# --- The evaluations home ----------------------------------------------------------------


def test_home_lists_datasets_with_item_counts_and_versions(signed_in, tenant):
    make_dataset(tenant, "support", items=[{"input": "a"}, {"input": "b"}])
    make_dataset(tenant, "empty one")
    page = text(signed_in(tenant.viewer).get(f"{EVALS}/"))
    assert "Evaluations are coming" not in page
    assert 'id="datasets-table"' in page and "support" in page and "v1" in page and "no items yet" in page
    assert 'id="new-dataset"' not in page  # viewers get no form


def test_member_creates_a_dataset_from_the_home(signed_in, tenant):
    client = signed_in(tenant.member)
    assert 'id="new-dataset"' in text(client.get(f"{EVALS}/"))
    response = client.post(f"{EVALS}/", {"name": "regressions", "description": "Bugs we fixed"})
    with organization_scope(tenant.organization):
        dataset = Dataset.objects.get(name="regressions")
    assert response.status_code == 302 and response["Location"] == f"{EVALS}/datasets/{dataset.pk}/"
    again = client.post(f"{EVALS}/", {"name": "regressions"})
    assert again.status_code == 409 and "already exists" in text(again)


def test_viewer_cannot_create_a_dataset(signed_in, tenant):
    response = signed_in(tenant.viewer).post(f"{EVALS}/", {"name": "mine"})
    assert response.status_code == 403
    with organization_scope(tenant.organization):
        assert not Dataset.objects.exists()


def test_home_links_only_the_sections_that_exist(signed_in, tenant, monkeypatch):
    monkeypatch.setattr(
        views,
        "SECTIONS",
        (("evals:index", "Somewhere real", "exists"), ("evals:no-such-page", "Not built yet", "missing")),
    )
    page = text(signed_in(tenant.viewer).get(f"{EVALS}/"))
    assert "Somewhere real" in page and "Not built yet" not in page


# --- One dataset -------------------------------------------------------------------------


def test_dataset_page_shows_the_items_of_the_chosen_version_and_the_versions(signed_in, tenant):
    dataset = make_dataset(
        tenant, items=[{"key": "q1", "input": "Where is my order?", "expected": "Friday"}, {"key": "q2", "input": "x"}]
    )
    with organization_scope(tenant.organization):
        items_remove(dataset=dataset, actor=None, keys=["q2"])
    client = signed_in(tenant.viewer)
    latest = text(client.get(f"{EVALS}/datasets/{dataset.pk}/"))
    assert "Items of version 2" in latest and "Where is my order?" in latest and "Friday" in latest
    assert "<code>q2</code>" not in latest
    assert "removed 1 item: q2" in latest and "added 2 items" in latest
    old = text(client.get(f"{EVALS}/datasets/{dataset.pk}/?version=1"))
    assert "Items of version 1" in old and "<code>q2</code>" in old and "not the latest" in old
    # Viewers get no forms.
    for form in ('id="add-item"', 'id="import-items"', 'id="edit-dataset"', "Remove</button>"):
        assert form not in latest


def test_dataset_page_truncates_long_values_and_pages_items(signed_in, tenant, monkeypatch):
    monkeypatch.setattr(views, "ITEMS_PER_PAGE", 2)
    dataset = make_dataset(tenant, items=[{"key": f"k{n}", "input": "long " * 100} for n in range(3)])
    client = signed_in(tenant.viewer)
    first = text(client.get(f"{EVALS}/datasets/{dataset.pk}/"))
    assert "Page 1 of 2" in first and "long " * 100 not in first and "…" in first
    second = text(client.get(f"{EVALS}/datasets/{dataset.pk}/?version=1&page=2"))
    assert "<code>k2</code>" in second and "<code>k0</code>" not in second


def test_member_adds_imports_and_removes_items_from_the_page(signed_in, tenant):
    dataset = make_dataset(tenant)
    client = signed_in(tenant.member)
    url = f"{EVALS}/datasets/{dataset.pk}/"
    page = text(client.get(url))
    assert 'id="add-item"' in page and 'id="import-items"' in page

    added = client.post(
        f"{url}items/", {"input": '{"question": "2+2"}', "expected": "4", "metadata": '{"set": "math"}', "key": "m1"}
    )
    assert added.status_code == 302
    assert items(dataset)["m1"].input == {"question": "2+2"} and items(dataset)["m1"].expected == "4"

    csv_file = SimpleUploadedFile("more.csv", b"key,input\nq1,Hello?\nq2,Bye?\n")
    imported = client.post(f"{url}import/", {"file": csv_file}, follow=True)
    assert "Version 2 (3 items): imported more.csv (2 items)." in text(imported)

    removed = client.post(f"{url}items/remove/", {"key": "q1"}, follow=True)
    assert "Version 3 (2 items): removed 1 item: q1" in text(removed)
    assert set(items(dataset)) == {"m1", "q2"}


def test_import_problems_are_shown_with_their_lines(signed_in, tenant):
    dataset = make_dataset(tenant)
    bad = SimpleUploadedFile("bad.jsonl", b'{"input": "ok"}\n{"input": }\n[1]\n')
    response = signed_in(tenant.member).post(f"{EVALS}/datasets/{dataset.pk}/import/", {"file": bad})
    page = text(response)
    assert response.status_code == 400 and 'id="import-problems"' in page
    assert "line 2: not valid JSON" in page and "line 3: each line must be a JSON object, not list" in page
    assert not items(dataset)


def test_bad_item_form_is_shown_again_with_the_error(signed_in, tenant):
    dataset = make_dataset(tenant)
    response = signed_in(tenant.member).post(
        f"{EVALS}/datasets/{dataset.pk}/items/", {"input": "hi", "metadata": "[1, 2]"}
    )
    assert response.status_code == 400 and "Metadata must be a JSON object." in text(response)


@pytest.mark.parametrize(
    ("metadata", "message"),
    [
        ('{"a": ' + "[" * 10_000 + "]" * 10_000 + "}", "This JSON cannot be used: nested deeper than 64 levels."),
        ('{"a": "\\u0000"}', "This JSON cannot be used: a: contains a NUL character"),
    ],
    ids=["deep", "nul"],
)
def test_item_metadata_that_cannot_be_used_is_shown_again_with_the_reason(signed_in, tenant, metadata, message):
    dataset = make_dataset(tenant)
    response = signed_in(tenant.member).post(
        f"{EVALS}/datasets/{dataset.pk}/items/", {"input": "hi", "metadata": metadata}
    )
    assert response.status_code == 400 and message in text(response)
    assert not items(dataset)


def test_viewer_posts_to_a_dataset_are_refused(signed_in, tenant):
    dataset = make_dataset(tenant, items=[{"key": "a", "input": 1}])
    client = signed_in(tenant.viewer)
    url = f"{EVALS}/datasets/{dataset.pk}/"
    attempts = [
        (f"{url}items/", {"input": "x"}),
        (f"{url}import/", {"file": SimpleUploadedFile("x.csv", b"input\nx\n")}),
        (f"{url}items/remove/", {"key": "a"}),
        (f"{url}edit/", {"name": "renamed"}),
    ]
    for path, body in attempts:
        assert client.post(path, body).status_code == 403, path
    dataset.refresh_from_db()
    assert dataset.latest_version == 1 and dataset.name == "support"


def test_another_organizations_dataset_page_is_404(signed_in, tenant, other_tenant):
    foreign = make_dataset(other_tenant)
    client = signed_in(tenant.owner)
    assert client.get(f"{EVALS}/datasets/{foreign.pk}/").status_code == 404
    assert client.post(f"{EVALS}/datasets/{foreign.pk}/items/", {"input": "x"}).status_code == 404
    assert client.post(f"{EVALS}/datasets/{foreign.pk}/items/remove/", {"key": "a"}).status_code == 404


# --- "Add to dataset" on a run's page ----------------------------------------------------


def panel(client, run) -> str:
    return text(client.get(f"{EVALS}/runs/{run.pk}/panel/", **HTMX))


def test_run_panel_offers_members_the_form_with_the_runs_output(signed_in, tenant):
    make_dataset(tenant, "support")
    run = make_run(tenant.project)
    page = panel(signed_in(tenant.member), run)
    assert 'id="add-run-to-dataset"' in page and ">support</option>" in page
    assert "It ships on Friday." in page  # the expected output starts as the run's output
    assert 'id="add-run-to-dataset"' not in panel(signed_in(tenant.viewer), run)


def test_adding_a_run_from_its_panel_keeps_its_output_exactly(signed_in, tenant):
    dataset = make_dataset(tenant, "support")
    run = make_run(tenant.project)
    shown = views.form_text(run.output).replace("\n", "\r\n")  # as a browser sends the textarea
    response = signed_in(tenant.member).post(
        f"{EVALS}/runs/{run.pk}/add-to-dataset/", {"dataset": dataset.pk, "expected": shown}, **HTMX
    )
    page = text(response)
    assert response.status_code == 200 and 'id="run-dataset-outcome"' in page
    assert "Added to “support” as version 1 (1 item)." in page
    assert f'href="{EVALS}/datasets/{dataset.pk}/"' in page  # "in support", and the link to it
    item = items(dataset)[f"run-{run.pk}"]
    assert item.expected == {"answer": "It ships on Friday.", "confidence": 0.9} and item.source_run_id == run.pk


def test_adding_a_run_with_an_edited_or_empty_expected_output(signed_in, tenant):
    dataset = make_dataset(tenant, "support")
    run = make_run(tenant.project, output=42)
    client = signed_in(tenant.member)
    url = f"{EVALS}/runs/{run.pk}/add-to-dataset/"
    client.post(url, {"dataset": dataset.pk, "expected": "42"}, **HTMX)
    assert items(dataset)[f"run-{run.pk}"].expected == 42  # unchanged: the number, not the text
    client.post(url, {"dataset": dataset.pk, "expected": "Forty-two"}, **HTMX)
    assert items(dataset)[f"run-{run.pk}"].expected == "Forty-two"
    client.post(url, {"dataset": dataset.pk, "expected": ""}, **HTMX)
    assert items(dataset)[f"run-{run.pk}"].expected is None


def test_adding_a_run_to_a_new_dataset_without_htmx_goes_back_to_the_run(signed_in, tenant):
    run = make_run(tenant.project)
    response = signed_in(tenant.member).post(
        f"{EVALS}/runs/{run.pk}/add-to-dataset/", {"new_dataset": "from runs", "expected": "Friday"}, follow=True
    )
    assert response.redirect_chain[-1][0] == f"{PROJECT}/runs/{run.pk}/"
    assert "Added to “from runs” as version 1" in text(response)
    with organization_scope(tenant.organization):
        dataset = Dataset.objects.get(name="from runs")
    assert items(dataset)[f"run-{run.pk}"].expected == "Friday"


def test_adding_a_run_without_a_dataset_says_so(signed_in, tenant):
    run = make_run(tenant.project)
    response = signed_in(tenant.member).post(f"{EVALS}/runs/{run.pk}/add-to-dataset/", {"expected": ""}, **HTMX)
    assert "Choose a dataset, or name a new one." in text(response)
    failed = signed_in(tenant.member).post(
        f"{EVALS}/runs/{make_run(tenant.project, input=None).pk}/add-to-dataset/", {"new_dataset": "x"}, **HTMX
    )
    assert "The run was not added: this run has no input" in text(failed)


def test_viewer_cannot_add_a_run_and_other_organizations_runs_are_404(signed_in, tenant, other_tenant):
    dataset = make_dataset(tenant)
    run = make_run(tenant.project)
    foreign_run = make_run(other_tenant.project)
    body = {"dataset": dataset.pk, "expected": ""}
    assert signed_in(tenant.viewer).post(f"{EVALS}/runs/{run.pk}/add-to-dataset/", body).status_code == 403
    assert signed_in(tenant.owner).post(f"{EVALS}/runs/{foreign_run.pk}/add-to-dataset/", body).status_code == 404
    foreign_dataset = make_dataset(other_tenant, "theirs")
    response = signed_in(tenant.owner).post(
        f"{EVALS}/runs/{run.pk}/add-to-dataset/", {"dataset": foreign_dataset.pk, "expected": ""}, **HTMX
    )
    assert "Select a valid choice" in text(response)
    assert not items(foreign_dataset) and not items(dataset)


def test_the_run_page_loads_the_panel(signed_in, tenant):
    run = make_run(tenant.project)
    page = text(signed_in(tenant.member).get(f"{PROJECT}/runs/{run.pk}/"))
    assert f'hx-get="{EVALS}/runs/{run.pk}/panel/"' in page


def test_form_text_shows_text_as_itself_and_json_indented():
    assert views.form_text("hi") == "hi" and views.form_text(None) == ""
    assert json.loads(views.form_text({"a": [1]})) == {"a": [1]}


@pytest.mark.browser
def test_member_adds_a_run_to_a_dataset_in_a_real_browser(asgi_server, tenant, artifacts_dir):  # noqa: F811 - fixtures
    """The run page loads the panel by htmx, and the form's answer replaces its part."""
    if chromium_path() is None:
        pytest.skip(NO_CHROMIUM)
    dataset = make_dataset(tenant, "support")
    run = make_run(tenant.project)

    with chromium_page() as page:
        _sign_in(page, asgi_server, tenant.member)
        page.goto(f"{asgi_server}{PROJECT}/runs/{run.pk}/")
        errors = _console_errors(page)
        page.locator("#add-run-to-dataset > summary").click()
        page.select_option("#id_dataset", str(dataset.pk))
        page.screenshot(path=str(artifacts_dir / "run-add-to-dataset-form.png"), full_page=True)
        page.click("#add-run-to-dataset button[type=submit]")
        page.wait_for_selector("#run-dataset-outcome")
        outcome = page.inner_text("#run-dataset-outcome")
        page.screenshot(path=str(artifacts_dir / "run-add-to-dataset.png"), full_page=True)
        page.click("#run-dataset-outcome a")
        page.wait_for_selector("#items-table")
        assert f"run-{run.pk}" in page.inner_text("#items-table")
        page.screenshot(path=str(artifacts_dir / "dataset-page.png"), full_page=True)
        page.goto(f"{asgi_server}{EVALS}/")
        page.screenshot(path=str(artifacts_dir / "evaluations-home.png"), full_page=True)
        assert errors == []

    assert "Added to “support” as version 1 (1 item)." in outcome
    assert items(dataset)[f"run-{run.pk}"].expected == run.output
