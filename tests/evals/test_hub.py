"""evals.hub: pushes to a Hub dataset repository through the real huggingface_hub client,
against a local server that speaks the Hub's API (tests/fake_hf_hub.py)."""

from __future__ import annotations

import io
import logging

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
import yaml

from agentops.scoping import organization_scope
from evals.bulk_export import services
from evals.hub import (
    HubAccount,
    HubError,
    RepoFileRef,
    _splits,
    dataset_card,
    hub_account_named,
    push_dataset_files,
)
from tests.fake_hf_hub import ORG, READ_TOKEN, TOKEN, USER, fake_hf_hub  # noqa: F401 - the fixture


def parquet_bytes(rows: list[dict]) -> bytes:
    sink = io.BytesIO()
    pq.write_table(pa.Table.from_pylist(rows), sink)
    return sink.getvalue()


def card() -> str:
    return dataset_card(
        title="Support questions v3",
        summary="Version 3 of the dataset *support questions*.",
        splits={"train": "data/train-*.parquet"},
        sections=[("Columns", "- `input`: what the agent gets")],
    )


def front_matter(text: str) -> dict:
    _, front, _ = text.split("---\n", 2)
    return yaml.safe_load(front)


@pytest.fixture
def account(fake_hf_hub):  # noqa: F811
    return HubAccount(endpoint=fake_hf_hub.url, token=TOKEN)


def test_a_push_creates_the_private_repository_with_its_card_and_files_in_one_commit(account, fake_hf_hub):  # noqa: F811
    rows = [{"key": "a", "input": '{"q": 1}'}, {"key": "b", "input": '{"q": 2}'}]
    result = push_dataset_files(
        account,
        repo_id=f"{ORG}/support",
        files={"data/train-00000-of-00001.parquet": parquet_bytes(rows), "meta/export.json": b'{"version": 3}'},
        card=card(),
        private=True,
        commit_message="Support questions v3",
    )

    repo = fake_hf_hub.repos[f"{ORG}/support"]
    assert repo.private is True
    assert result.repo_id == f"{ORG}/support" and result.private is True
    assert result.url == f"{fake_hf_hub.url}/datasets/{ORG}/support"
    assert result.commit == repo.sha
    assert len(repo.commits) == 1 and repo.commits[0]["summary"] == "Support questions v3"
    assert pq.read_table(io.BytesIO(repo.files["data/train-00000-of-00001.parquet"])).to_pylist() == rows
    assert repo.files["meta/export.json"] == b'{"version": 3}'
    readme = repo.files["README.md"].decode()
    metadata = front_matter(readme)
    assert metadata["pretty_name"] == "Support questions v3"
    assert metadata["configs"] == [
        {"config_name": "default", "data_files": [{"split": "train", "path": "data/train-*.parquet"}]}
    ]
    assert "# Support questions v3" in readme


def test_files_go_up_through_plain_lfs_never_xet(account, fake_hf_hub):  # noqa: F811
    push_dataset_files(
        account,
        repo_id="plain",
        files={"data/train.parquet": parquet_bytes([{"x": 1}])},
        card=card(),
        private=False,
        commit_message="m",
    )

    [batch] = fake_hf_hub.requests_to("POST", "/info/lfs/objects/batch")
    [upload] = fake_hf_hub.requests_to("PUT", "/lfs/")
    assert upload["authorization"] is None  # a signed upload URL gets no token
    assert fake_hf_hub.repos[f"{USER}/plain"].lfs == {"data/train.parquet"}
    assert not [r for r in fake_hf_hub.requests if "xet" in r["path"]]
    assert batch["authorization"] == f"Bearer {TOKEN}"


def test_a_name_without_namespace_goes_to_the_accounts_namespace_or_the_tokens_user(fake_hf_hub):  # noqa: F811
    push_dataset_files(
        HubAccount(endpoint=fake_hf_hub.url, token=TOKEN, namespace=ORG),
        repo_id="in-org",
        files={},
        card=card(),
        private=False,
        commit_message="m",
    )
    push_dataset_files(
        HubAccount(endpoint=fake_hf_hub.url, token=TOKEN),
        repo_id="mine",
        files={},
        card=card(),
        private=False,
        commit_message="m",
    )

    assert {f"{ORG}/in-org", f"{USER}/mine"} <= set(fake_hf_hub.repos)


def test_pushing_again_adds_a_commit_to_the_existing_repository(account, fake_hf_hub):  # noqa: F811
    fake_hf_hub.add_repo(f"{ORG}/existing", {"old.txt": b"old"}, private=True)

    push_dataset_files(
        account, repo_id=f"{ORG}/existing", files={"new.txt": b"new"}, card=card(), private=True, commit_message="m"
    )

    repo = fake_hf_hub.repos[f"{ORG}/existing"]
    assert len(repo.commits) == 2
    assert repo.files["old.txt"] == b"old" and repo.files["new.txt"] == b"new"


def test_a_private_push_into_an_existing_public_repository_is_refused(account, fake_hf_hub):  # noqa: F811
    fake_hf_hub.add_repo(f"{ORG}/open", {"old.txt": b"old"}, private=False)

    with pytest.raises(HubError, match="exists and is public"):
        push_dataset_files(
            account, repo_id=f"{ORG}/open", files={"x.txt": b"secret"}, card=card(), private=True, commit_message="m"
        )

    assert "x.txt" not in fake_hf_hub.repos[f"{ORG}/open"].files
    assert not fake_hf_hub.requests_to("POST", "/commit/")


def test_a_refused_token_is_a_reason_without_the_token(fake_hf_hub):  # noqa: F811
    account = HubAccount(endpoint=fake_hf_hub.url, token="hf_not_a_valid_token_at_all")

    with pytest.raises(HubError) as caught:
        push_dataset_files(account, repo_id=f"{ORG}/x", files={}, card=card(), private=False, commit_message="m")

    assert "refused the token" in caught.value.message
    assert "hf_not_a_valid" not in caught.value.message
    assert f"{ORG}/x" not in fake_hf_hub.repos


def test_a_read_only_token_may_not_write(fake_hf_hub):  # noqa: F811
    fake_hf_hub.add_repo(f"{ORG}/readonly")
    account = HubAccount(endpoint=fake_hf_hub.url, token=READ_TOKEN)

    with pytest.raises(HubError, match=r"may not write to acme-research/readonly \(403\)"):
        push_dataset_files(
            account, repo_id=f"{ORG}/readonly", files={"a.txt": b"a"}, card=card(), private=False, commit_message="m"
        )


def test_a_namespace_the_token_may_not_write_to_is_refused(account, fake_hf_hub):  # noqa: F811
    with pytest.raises(HubError, match=r"may not write to somebody-else/data \(403\)"):
        push_dataset_files(
            account, repo_id="somebody-else/data", files={}, card=card(), private=False, commit_message="m"
        )


@pytest.mark.parametrize("repo_id", ["a/b/c", "../etc", "has space", "", "x--y", "-lead"])
def test_a_malformed_repository_name_is_refused_before_any_call(account, fake_hf_hub, repo_id):  # noqa: F811
    with pytest.raises(HubError, match="not a Hub repository name"):
        push_dataset_files(account, repo_id=repo_id, files={}, card=card(), private=False, commit_message="m")
    assert fake_hf_hub.requests == []


@pytest.mark.parametrize("path", ["../up.txt", "/abs.txt", "a/../../b", ".git/config", "README.md"])
def test_a_file_path_outside_the_repository_or_over_the_card_is_refused(account, fake_hf_hub, path):  # noqa: F811
    with pytest.raises(HubError):
        push_dataset_files(account, repo_id="x", files={path: b"1"}, card=card(), private=False, commit_message="m")
    assert fake_hf_hub.requests == []


def test_an_endpoint_on_a_private_address_is_refused_without_the_setting(settings, fake_hf_hub):  # noqa: F811
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False

    with pytest.raises(HubError, match="endpoint is refused"):
        push_dataset_files(
            HubAccount(endpoint=fake_hf_hub.url, token=TOKEN),
            repo_id=f"{ORG}/x",
            files={},
            card=card(),
            private=False,
            commit_message="m",
        )
    assert fake_hf_hub.requests == []


def test_the_token_never_follows_a_redirect(redirect_trap):
    account = HubAccount(endpoint=redirect_trap.url, token=TOKEN)

    with pytest.raises(HubError, match="redirect"):
        push_dataset_files(account, repo_id=f"{ORG}/x", files={}, card=card(), private=False, commit_message="m")

    assert redirect_trap.redirected  # the endpoint was asked
    assert redirect_trap.elsewhere == []


def test_the_token_never_goes_to_an_endpoint_whose_name_rebinds_to_a_private_address(rebinding):
    # Checked when the account is opened and again by each request's hook: both see the
    # public address. The connection, made a moment later, would reach 127.0.0.1.
    rebinding.public_lookups = 2
    account = HubAccount(endpoint=rebinding.url, token=TOKEN)

    with pytest.raises(HubError, match="private or reserved"):
        push_dataset_files(account, repo_id=f"{ORG}/x", files={}, card=card(), private=False, commit_message="m")

    assert rebinding.received == []


def test_the_token_never_goes_to_a_host_the_hub_names_in_an_answer(account, fake_hf_hub):  # noqa: F811
    fake_hf_hub.verify_elsewhere = True

    with pytest.raises(HubError, match="token is only sent to the Hub endpoint"):
        push_dataset_files(
            account,
            repo_id=f"{ORG}/verify",
            files={"data/train.parquet": parquet_bytes([{"x": 1}])},
            card=card(),
            private=False,
            commit_message="m",
        )

    assert fake_hf_hub.cdn_requests == []
    assert not fake_hf_hub.repos[f"{ORG}/verify"].commits


def test_an_unreachable_hub_is_a_retryable_reason():
    account = HubAccount(endpoint="http://127.0.0.1:9", token=TOKEN)

    with pytest.raises(HubError) as caught:
        push_dataset_files(account, repo_id=f"{ORG}/x", files={}, card=card(), private=False, commit_message="m")

    assert "could not be reached" in caught.value.message
    assert caught.value.retryable


def test_the_token_comes_from_the_organizations_named_hub_destination(tenant, other_tenant, fake_hf_hub, caplog):  # noqa: F811
    caplog.set_level(logging.DEBUG)
    with organization_scope(tenant.organization):
        services.destination_create(
            organization=tenant.organization,
            actor=tenant.owner,
            name="hub",
            kind="hf_hub",
            config={"endpoint": fake_hf_hub.url, "namespace": ORG},
            credentials={"token": TOKEN},
        )
        account = hub_account_named("hub")
        push_dataset_files(account, repo_id="from-secret", files={}, card=card(), private=True, commit_message="m")
    with organization_scope(other_tenant.organization):
        with pytest.raises(HubError, match="no Hugging Face Hub destination"):
            hub_account_named("hub")

    assert f"{ORG}/from-secret" in fake_hf_hub.repos
    assert repr(account).count(TOKEN) == 0
    assert TOKEN not in caplog.text


FILES = [
    RepoFileRef("README.md", 10),
    RepoFileRef("data/train-00000-of-00001.parquet", 10),
    RepoFileRef("data/validation-00000-of-00001.parquet", 10),
    RepoFileRef("dev.jsonl", 10),
    RepoFileRef("extra/evaluation_set.csv", 10),
    RepoFileRef("notes.txt", 10),
]


@pytest.mark.parametrize(
    ("configs", "expected"),
    [
        (
            None,
            {
                "train": ["data/train-00000-of-00001.parquet"],
                "validation": ["data/validation-00000-of-00001.parquet", "dev.jsonl"],
                "test": ["extra/evaluation_set.csv"],
            },
        ),
        ([{"config_name": "default", "data_files": "data/*.parquet"}], {"train": [FILES[1].path, FILES[2].path]}),
        (
            [{"config_name": "other", "data_files": {"eval": "dev.jsonl"}}],
            {"eval": ["dev.jsonl"]},
        ),
        (
            [
                {"config_name": "first", "data_files": [{"split": "x", "path": "dev.jsonl"}]},
                {"config_name": "default", "data_files": [{"split": "test", "path": ["extra/*", "dev.jsonl"]}]},
            ],
            {"test": ["dev.jsonl", "extra/evaluation_set.csv"]},
        ),
    ],
)
def test_a_splits_files_come_from_the_cards_configs_or_the_hubs_naming(configs, expected):
    found = _splits(FILES, configs)
    assert {split: [ref.path for ref in refs] for split, refs in found.items()} == expected


def test_without_any_split_in_the_names_every_data_file_is_train():
    found = _splits([RepoFileRef("a.jsonl", 1), RepoFileRef("b/c.parquet", 1), RepoFileRef("d.txt", 1)], None)
    assert {split: [ref.path for ref in refs] for split, refs in found.items()} == {"train": ["a.jsonl", "b/c.parquet"]}
