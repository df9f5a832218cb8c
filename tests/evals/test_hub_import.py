"""The Hub import (evals.bulk_export.hub_import): a split of a Hub dataset repository,
read through the real huggingface_hub client from a local server that speaks the Hub's
API, becomes a new dataset version by a column mapping; a bad mapping is a 400 at
creation; a missing split, column or repository fails the job with the reason and
writes nothing."""

from __future__ import annotations

import io
import json

import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from agentops.errors import InvalidRequest
from agentops.scoping import organization_scope
from evals.bulk_export import services
from evals.models import Dataset, DatasetItem, ExportJob
from tests.evals.factories import make_dataset
from tests.evals.hub_helpers import hub_destination, run_job
from tests.fake_hf_hub import ORG, TOKEN, fake_hf_hub  # noqa: F401 - the fixture

CARD = b"""---
pretty_name: QA
configs:
- config_name: default
  data_files:
  - split: train
    path: data/train-*.parquet
  - split: test
    path: data/test-*.parquet
---

# QA
"""


def parquet(rows: list[dict]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def jsonl(rows: list[dict]) -> bytes:
    return "".join(json.dumps(row) + "\n" for row in rows).encode()


TRAIN = [
    {"id": 1, "question": "2+2?", "answer": "4", "source": "math", "level": 1},
    {"id": 2, "question": "capital of France?", "answer": "Paris", "source": "geo", "level": 2},
]


@pytest.fixture
def hub(tenant, fake_hf_hub):  # noqa: F811
    return hub_destination(tenant, fake_hf_hub)


@pytest.fixture
def qa_repo(fake_hf_hub):  # noqa: F811
    return fake_hf_hub.add_repo(
        f"{ORG}/qa",
        {
            "README.md": CARD,
            "data/train-00000-of-00002.parquet": parquet(TRAIN[:1]),
            "data/train-00001-of-00002.parquet": parquet(TRAIN[1:]),
            "data/test-00000-of-00001.parquet": parquet([{"id": 9, "question": "?", "answer": "!", "source": "x"}]),
        },
        private=True,
    )


def items_of(dataset: Dataset, version: int) -> list[dict]:
    with organization_scope(dataset.organization_id):
        return [
            {"key": item.key, "input": item.input, "expected": item.expected, "metadata": item.metadata}
            for item in DatasetItem.objects.filter(dataset=dataset).in_version(version).order_by("key")
        ]


MAPPING = {"input": "question", "expected": "answer", "key": "id", "metadata": ["source", "level"]}


def test_a_split_becomes_a_new_dataset_by_the_column_mapping(tenant, hub, qa_repo):
    job = run_job(
        tenant, hub, "hf_import", {"repo_id": "qa", "split": "train", "columns": MAPPING, "new_dataset": "QA"}
    )

    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    dataset = Dataset.dangerously_unscoped_objects.get(project=tenant.project, name="QA")
    assert dataset.latest_version == 1
    assert items_of(dataset, 1) == [
        {"key": "1", "input": "2+2?", "expected": "4", "metadata": {"source": "math", "level": 1}},
        {"key": "2", "input": "capital of France?", "expected": "Paris", "metadata": {"source": "geo", "level": 2}},
    ]
    with organization_scope(tenant.organization):
        assert dataset.versions.get(number=1).note.startswith(f"imported hf://datasets/{ORG}/qa@")
    assert job.progress == {"items": 2} and job.files[0]["location"] == "dataset “QA” version 1"


def test_an_import_into_an_existing_dataset_is_its_next_version_replacing_by_key(tenant, hub, qa_repo):
    dataset = make_dataset(tenant.project, [{"key": "9", "input": "old"}, {"key": "keep", "input": "kept"}])

    job = run_job(
        tenant,
        hub,
        "hf_import",
        {
            "repo_id": f"{ORG}/qa",
            "split": "test",
            "columns": {"input": ["question", "source"], "key": "id"},
            "dataset": dataset.pk,
        },
    )

    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    dataset.refresh_from_db()
    assert dataset.latest_version == 2
    assert [(item["key"], item["input"]) for item in items_of(dataset, 2)] == [
        ("9", {"question": "?", "source": "x"}),
        ("keep", "kept"),
    ]
    assert [(item["key"], item["input"]) for item in items_of(dataset, 1)] == [("9", "old"), ("keep", "kept")]


def test_without_a_card_splits_follow_the_hubs_file_naming(tenant, hub, fake_hf_hub):  # noqa: F811
    fake_hf_hub.add_repo(
        f"{ORG}/named",
        {
            "train.jsonl": jsonl([{"q": "a"}]),
            "data/dev.csv": b'q,n\nfrom csv,{"x": 1}\n',
            "test/part-0.jsonl": jsonl([{"q": "t1"}, {"q": "t2"}]),
        },
    )

    for split, expected in (("validation", ["from csv"]), ("test", ["t1", "t2"]), ("train", ["a"])):
        job = run_job(
            tenant,
            hub,
            "hf_import",
            {"repo_id": "named", "split": split, "columns": {"input": "q"}, "new_dataset": f"named {split}"},
        )
        assert job.status == ExportJob.Status.SUCCEEDED, job.error
        dataset = Dataset.dangerously_unscoped_objects.get(name=f"named {split}")
        assert sorted(item["input"] for item in items_of(dataset, 1)) == expected


def test_files_the_hub_keeps_in_its_storage_are_read_there_without_the_token(tenant, hub, qa_repo, fake_hf_hub):  # noqa: F811
    fake_hf_hub.cdn_redirect = True

    job = run_job(tenant, hub, "hf_import", {"repo_id": "qa", "split": "train", "columns": MAPPING, "new_dataset": "Q"})

    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    assert len(fake_hf_hub.cdn_requests) == 2
    assert all(request["authorization"] is None for request in fake_hf_hub.cdn_requests)


def test_a_storage_redirect_to_a_private_address_is_refused(tenant, hub, qa_repo, fake_hf_hub, settings, monkeypatch):  # noqa: F811
    fake_hf_hub.cdn_redirect = True
    # The Hub's own address is allowed, the storage one it names is not.
    from agentops import netguard

    checked = netguard.check_outbound_url

    def guard(url, *, allow_private=None):
        if url.startswith(fake_hf_hub.cdn_url):
            return checked(url, allow_private=False)
        return checked(url, allow_private=allow_private)

    monkeypatch.setattr("evals.hub.check_outbound_url", guard)

    job = run_job(tenant, hub, "hf_import", {"repo_id": "qa", "split": "train", "columns": MAPPING, "new_dataset": "Q"})

    assert job.status == ExportJob.Status.FAILED
    assert "refused address" in job.error
    assert fake_hf_hub.cdn_requests == []
    assert not Dataset.dangerously_unscoped_objects.filter(name="Q").exists()


def test_a_missing_split_fails_the_import_naming_the_splits_there_are(tenant, hub, qa_repo):
    job = run_job(
        tenant, hub, "hf_import", {"repo_id": "qa", "split": "validation", "columns": MAPPING, "new_dataset": "Q"}
    )

    assert job.status == ExportJob.Status.FAILED
    assert job.error == f"the dataset repository {ORG}/qa has no split 'validation'; its splits: test, train"
    assert not Dataset.dangerously_unscoped_objects.filter(name="Q").exists()


def test_a_missing_column_fails_the_import_and_writes_nothing(tenant, hub, qa_repo):
    dataset = make_dataset(tenant.project, [{"key": "a", "input": "x"}])
    columns = {"input": "question", "expected": "solution"}

    job = run_job(
        tenant, hub, "hf_import", {"repo_id": "qa", "split": "train", "columns": columns, "dataset": dataset.pk}
    )

    assert job.status == ExportJob.Status.FAILED
    assert job.error.startswith("data/train-00000-of-00002.parquet has no column 'solution' (its columns: answer, id")
    dataset.refresh_from_db()
    assert dataset.latest_version == 1


def test_rows_that_are_not_items_fail_the_import_naming_them(tenant, hub, fake_hf_hub):  # noqa: F811
    fake_hf_hub.add_repo(f"{ORG}/holes", {"train.jsonl": jsonl([{"q": "fine"}, {"q": None}, {"other": 1}])})

    job = run_job(
        tenant, hub, "hf_import", {"repo_id": "holes", "split": "train", "columns": {"input": "q"}, "new_dataset": "H"}
    )

    assert job.status == ExportJob.Status.FAILED
    assert "train.jsonl row 2: input is required" in job.error and "train.jsonl row 3" in job.error
    assert not Dataset.dangerously_unscoped_objects.filter(name="H").exists()


def test_an_unknown_repository_and_a_private_one_without_access_fail_alike(tenant, fake_hf_hub):  # noqa: F811
    fake_hf_hub.add_repo("stranger/secret", {"train.jsonl": jsonl([{"q": "s"}])}, private=True)
    hub = hub_destination(tenant, fake_hf_hub)

    for repo_id in (f"{ORG}/nothing-here", "stranger/secret"):
        job = run_job(
            tenant,
            hub,
            "hf_import",
            {"repo_id": repo_id, "split": "train", "columns": {"input": "q"}, "new_dataset": "S"},
        )
        assert job.status == ExportJob.Status.FAILED
        assert job.error == f"the Hub has no dataset repository {repo_id} (or the token may not see it)"


def test_a_pushed_dataset_version_imports_back_unchanged(tenant, hub):
    items = [
        {"key": "a", "input": {"question": "q"}, "expected": "x", "metadata": {"level": 1}},
        {"key": "b", "input": "plain", "expected": None, "metadata": {}},
    ]
    source = make_dataset(tenant.project, items, name="source")
    pushed = run_job(tenant, hub, "hf_dataset", {"repo_id": "roundtrip", "dataset": source.pk})
    assert pushed.status == ExportJob.Status.SUCCEEDED, pushed.error

    job = run_job(
        tenant,
        hub,
        "hf_import",
        {
            "repo_id": "roundtrip",
            "split": "test",
            "columns": {"input": "input", "expected": "expected", "key": "key", "metadata": ["metadata"]},
            "new_dataset": "copy",
        },
    )

    assert job.status == ExportJob.Status.SUCCEEDED, job.error
    copy = Dataset.dangerously_unscoped_objects.get(name="copy")
    assert [{**item, "metadata": item["metadata"]["metadata"]} for item in items_of(copy, 1)] == items


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"repo_id": "qa", "new_dataset": "Q"}, "options.columns is required"),
        ({"repo_id": "qa", "columns": {"expected": "a"}, "new_dataset": "Q"}, "options.columns.input is required"),
        ({"repo_id": "qa", "columns": {"input": "q", "answer": "a"}, "new_dataset": "Q"}, "has no field 'answer'"),
        ({"repo_id": "qa", "columns": {"input": 3}, "new_dataset": "Q"}, "options.columns.input must name a column"),
        ({"repo_id": "qa", "columns": {"input": ["a", "a"]}, "new_dataset": "Q"}, "names a column twice"),
        ({"repo_id": "qa", "columns": {"input": "q", "key": ["a"]}, "new_dataset": "Q"}, "columns.key must name"),
        ({"repo_id": "qa", "columns": {"input": "q", "metadata": {}}, "new_dataset": "Q"}, "metadata must be a list"),
        ({"repo_id": "qa", "columns": {"input": "q"}}, "give options.dataset"),
        ({"repo_id": "qa", "columns": {"input": "q"}, "new_dataset": "Q", "dataset": 1}, "or options.new_dataset"),
        ({"repo_id": "qa", "columns": {"input": "q"}, "new_dataset": "Q", "split": "a/b"}, "options.split"),
        ({"repo_id": "qa", "columns": {"input": "q"}, "new_dataset": "Q", "revision": "../x"}, "options.revision"),
        ({"repo_id": "qa", "columns": {"input": "q"}, "new_dataset": "Q", "private": True}, "has no option 'private'"),
        ({"repo_id": "qa", "columns": {"input": "q"}, "new_dataset": "taken"}, "exists already"),
    ],
)
def test_a_bad_import_is_refused_at_creation(tenant, hub, options, message):
    make_dataset(tenant.project, [{"input": "x"}], name="taken")
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match=message):
        services.export_create(
            project=tenant.project, actor=tenant.admin, destination_id=hub.pk, kind="hf_import", options=options
        )
    assert not ExportJob.dangerously_unscoped_objects.exists()


def test_the_import_reads_the_private_repository_with_the_token(tenant, hub, qa_repo, fake_hf_hub):  # noqa: F811
    run_job(tenant, hub, "hf_import", {"repo_id": "qa", "split": "train", "columns": MAPPING, "new_dataset": "Q"})

    reads = [r for r in fake_hf_hub.requests if r["method"] == "GET"]
    assert reads and all(r["authorization"] == f"Bearer {TOKEN}" for r in reads)
