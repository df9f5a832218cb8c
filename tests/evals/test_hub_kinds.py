"""The Hub pushes (evals.bulk_export.hub_kinds): a dataset version, an experiment's
results and a dataset's leaderboard pushed as export jobs to a dataset repository on a
local server that speaks the Hub's API, through the real huggingface_hub client; bad
options are a 400 at creation, what the Hub refuses fails the job with the reason."""

from __future__ import annotations

import logging
from datetime import date

import pytest
import yaml

from agentops.errors import InvalidRequest
from agentops.scoping import organization_scope
from evals.bulk_export import services
from evals.bulk_export.runner import export_run
from evals.models import ExportJob
from evals.services import datasets as dataset_services
from evals.services.experiments import experiment_start
from runs.services.agents import agent_create
from tests.evals.factories import drive, make_dataset, make_evaluator
from tests.evals.hub_helpers import hub_destination, jsonl, run_job
from tests.fake_hf_hub import ORG, TOKEN, fake_hf_hub  # noqa: F401 - the fixture

ITEMS = [
    {"key": "k0", "input": {"question": "q0"}, "expected": "a0", "metadata": {"level": 1}},
    {"key": "k1", "input": "q1", "expected": None, "metadata": {}},
    {"key": "k2", "input": ["q", 2], "expected": {"x": 1}, "metadata": {"source": "s"}},
]


@pytest.fixture
def hub(tenant, fake_hf_hub):  # noqa: F811
    return hub_destination(tenant, fake_hf_hub)


@pytest.fixture
def dataset(tenant):
    return make_dataset(tenant.project, ITEMS, name="support questions")


@pytest.fixture
def ended(tenant, dataset):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
        evaluator = make_evaluator(tenant.project, "mentions", "contains")
        experiment = experiment_start(
            project=tenant.project, actor=tenant.member, dataset=dataset, agent=agent, evaluators=[evaluator]
        )
        return drive(experiment)


def front_matter(readme: bytes) -> dict:
    _, front, _ = readme.decode().split("---\n", 2)
    return yaml.safe_load(front)


def test_a_dataset_version_is_pushed_as_json_lines_with_a_card(tenant, hub, dataset, fake_hf_hub):  # noqa: F811
    with organization_scope(tenant.organization):
        dataset_services.items_remove(dataset=dataset, actor=tenant.admin, keys=["k1"])  # version 2

    job = run_job(tenant, hub, "hf_dataset", {"repo_id": "support", "dataset": dataset.pk, "version": 1})

    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    repo = fake_hf_hub.repos[f"{ORG}/support"]
    assert repo.private is True  # private unless asked otherwise
    assert jsonl(repo.files["data/test.jsonl"]) == ITEMS
    metadata = front_matter(repo.files["README.md"])
    assert metadata["pretty_name"] == "support questions (version 1)"
    assert metadata["configs"][0]["data_files"] == [{"split": "test", "path": "data/test.jsonl"}]
    assert "3 items" in repo.files["README.md"].decode()
    assert job.progress == {"items": 3}
    [entry] = job.files
    assert entry["rows"] == 3 and entry["location"].startswith(f"{fake_hf_hub.url}/datasets/{ORG}/support/blob/")
    assert repo.sha in job.log


def test_the_latest_version_is_pushed_when_none_is_named_and_a_retry_pushes_the_same(tenant, hub, dataset, fake_hf_hub):  # noqa: F811
    fake_hf_hub.add_repo(f"{ORG}/open", private=False)
    job = run_job(tenant, hub, "hf_dataset", {"repo_id": "open", "dataset": dataset.pk})
    assert job.status == ExportJob.Status.FAILED and "exists and is public" in job.error
    with organization_scope(tenant.organization):
        dataset_services.items_remove(dataset=dataset, actor=tenant.admin, keys=["k0"])  # version 2, after the job
    fake_hf_hub.repos[f"{ORG}/open"].private = True

    with organization_scope(tenant.organization):
        retry = services.export_retry(job=job, actor=tenant.admin)
        export_run(export_id=retry.pk, worker="test")
        retry.refresh_from_db()

    assert retry.status == ExportJob.Status.SUCCEEDED, retry.error
    assert retry.options["version"] == 1
    assert [row["key"] for row in jsonl(fake_hf_hub.repos[f"{ORG}/open"].files["data/test.jsonl"])] == [
        "k0",
        "k1",
        "k2",
    ]


def test_an_experiments_results_are_pushed_one_row_per_item(tenant, hub, ended, fake_hf_hub):  # noqa: F811
    job = run_job(tenant, hub, "hf_results", {"repo_id": f"{ORG}/results", "private": False, "experiment": ended.pk})

    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    repo = fake_hf_hub.repos[f"{ORG}/results"]
    assert repo.private is False
    rows = jsonl(repo.files["data/results.jsonl"])
    assert [row["item_key"] for row in rows] == ["k0", "k1", "k2"]
    assert all(set(row["scores"]) == {"mentions"} for row in rows)
    readme = repo.files["README.md"].decode()
    assert ended.name in readme and "version 1 of the dataset “support questions”" in readme
    assert front_matter(repo.files["README.md"])["configs"][0]["data_files"][0]["split"] == "results"


def test_a_leaderboard_is_pushed_with_its_table_in_the_card(tenant, hub, dataset, ended, fake_hf_hub):  # noqa: F811
    job = run_job(tenant, hub, "hf_leaderboard", {"repo_id": "board", "dataset": dataset.pk, "split": "main"})

    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    repo = fake_hf_hub.repos[f"{ORG}/board"]
    [row] = jsonl(repo.files["data/main.jsonl"])
    assert row["experiment_id"] == ended.pk and "mentions" in row["metrics"]
    readme = repo.files["README.md"].decode()
    assert "| Experiment | Model | Pass rate | mentions |" in readme
    assert f"| {ended.name} | offline |" in readme


def test_a_refused_token_fails_the_job_with_the_reason_and_never_logs_the_token(tenant, fake_hf_hub, dataset, caplog):  # noqa: F811
    caplog.set_level(logging.DEBUG)
    refused = hub_destination(tenant, fake_hf_hub, token="hf_this_token_is_refused_42", name="bad")

    job = run_job(tenant, refused, "hf_dataset", {"repo_id": "x", "dataset": dataset.pk})

    assert job.status == ExportJob.Status.FAILED
    assert job.error.startswith("Hugging Face refused the token (401)")
    for text in (job.error, job.log, caplog.text):
        assert "hf_this_token_is_refused_42" not in text
        assert TOKEN not in text


def test_a_namespace_the_token_may_not_write_to_fails_the_job(tenant, hub, dataset):
    job = run_job(tenant, hub, "hf_dataset", {"repo_id": "someone-else/x", "dataset": dataset.pk})

    assert job.status == ExportJob.Status.FAILED
    assert "may not write to someone-else/x (403)" in job.error


def test_an_unreachable_hub_fails_the_job_with_the_reason(tenant, dataset):
    with organization_scope(tenant.organization):
        destination = services.destination_create(
            organization=tenant.organization,
            actor=tenant.admin,
            name="down",
            kind="hf_hub",
            config={"endpoint": "http://127.0.0.1:9"},
            credentials={"token": TOKEN},
        )

    job = run_job(tenant, destination, "hf_dataset", {"repo_id": "x/y", "dataset": dataset.pk})

    assert job.status == ExportJob.Status.FAILED and "could not be reached" in job.error


@pytest.mark.parametrize(
    ("kind", "options", "message"),
    [
        ("hf_dataset", {"dataset": 1}, "options.repo_id is required"),
        ("hf_dataset", {"repo_id": "a/b/c", "dataset": 1}, "not a Hub repository name"),
        ("hf_dataset", {"repo_id": "x"}, "options.dataset is required"),
        ("hf_dataset", {"repo_id": "x", "dataset": "many"}, "options.dataset must be a whole number"),
        ("hf_dataset", {"repo_id": "x", "dataset": 0, "colour": "red"}, "has no option 'colour'"),
        ("hf_dataset", {"repo_id": "x", "dataset": 999999}, "no dataset with id 999999 in this project"),
        ("hf_dataset", {"repo_id": "x", "private": "yes", "dataset": 0}, "options.private must be true or false"),
        ("hf_dataset", {"repo_id": "x", "split": "a b", "dataset": 0}, "options.split must be a split name"),
        ("hf_dataset", {"repo_id": "x", "dataset": 0, "version": 7}, "has versions 1 to 1"),
        ("hf_results", {"repo_id": "x", "experiment": 999999}, "no experiment with id 999999"),
        ("hf_nothing", {}, "unknown export kind"),
    ],
)
def test_bad_options_are_refused_at_creation_and_nothing_is_queued(tenant, hub, dataset, kind, options, message):
    options = {key: (dataset.pk if key == "dataset" and value == 0 else value) for key, value in options.items()}
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match=message):
        services.export_create(
            project=tenant.project, actor=tenant.admin, destination_id=hub.pk, kind=kind, options=options
        )
    assert not ExportJob.dangerously_unscoped_objects.exists()


def test_another_tenants_dataset_is_refused_like_a_missing_one(tenant, other_tenant, hub):
    foreign = make_dataset(other_tenant.project, ITEMS)

    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="no dataset with id"):
        services.export_create(
            project=tenant.project,
            actor=tenant.admin,
            destination_id=hub.pk,
            kind="hf_dataset",
            options={"repo_id": "x", "dataset": foreign.pk},
        )


def test_a_running_experiment_is_refused(tenant, hub, dataset):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="echo", model="offline")
        experiment = experiment_start(
            project=tenant.project,
            actor=tenant.member,
            dataset=dataset,
            agent=agent,
            evaluators=[make_evaluator(tenant.project, "m", "contains")],
        )
        with pytest.raises(InvalidRequest, match="push it once ended"):
            services.export_create(
                project=tenant.project,
                actor=tenant.admin,
                destination_id=hub.pk,
                kind="hf_results",
                options={"repo_id": "x", "experiment": experiment.pk},
            )


def test_hub_kinds_write_only_to_a_hub_destination_and_parquet_never_to_one(tenant, hub, dataset, settings, tmp_path):
    settings.EXPORT_ROOT = str(tmp_path)
    with organization_scope(tenant.organization):
        folder = services.destination_create(
            organization=tenant.organization, actor=tenant.admin, name="disk", kind="folder", config={"path": "a"}
        )
        with pytest.raises(InvalidRequest, match="cannot be written to a folder destination"):
            services.export_create(
                project=tenant.project,
                actor=tenant.admin,
                destination_id=folder.pk,
                kind="hf_dataset",
                options={"repo_id": "x", "dataset": dataset.pk},
            )
        with pytest.raises(InvalidRequest, match="cannot be written to a hf_hub destination"):
            services.export_create(
                project=tenant.project,
                actor=tenant.admin,
                destination_id=hub.pk,
                start_date=date(2026, 3, 1),
                end_date=date(2026, 3, 1),
            )
        with pytest.raises(InvalidRequest, match="does not run on a schedule"):
            services.schedule_create(
                project=tenant.project, actor=tenant.admin, destination_id=hub.pk, every="day", kind="hf_dataset"
            )


@pytest.mark.parametrize(
    ("config", "credentials", "message"),
    [
        ({}, {}, "needs a token"),
        ({}, {"token": "has space"}, "must not contain spaces"),
        ({"namespace": "no/slash"}, {"token": TOKEN}, "namespace must be"),
        ({"endpoint": "ftp://hub"}, {"token": TOKEN}, "endpoint"),
        ({"bucket": "x"}, {"token": TOKEN}, "has no setting 'bucket'"),
    ],
)
def test_a_bad_hub_destination_is_refused(tenant, config, credentials, message):
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match=message):
        services.destination_create(
            organization=tenant.organization,
            actor=tenant.admin,
            name="hub",
            kind="hf_hub",
            config=config,
            credentials=credentials,
        )


def test_a_hub_endpoint_on_a_private_address_is_refused_when_saved(tenant, settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="private or reserved"):
        services.destination_create(
            organization=tenant.organization,
            actor=tenant.admin,
            name="hub",
            kind="hf_hub",
            config={"endpoint": "http://127.0.0.1:8080"},
            credentials={"token": TOKEN},
        )
