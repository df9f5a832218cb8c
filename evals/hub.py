"""Dataset repositories on the Hugging Face Hub, through ``huggingface_hub``
(the client's rules: ``agentops.hf_client``).

- ``HubAccount``: an endpoint and a token, read from a named organization secret: an
  export destination of kind ``hf_hub`` (``hub_account`` / ``hub_account_named``). The
  token is encrypted at rest, covered by key rotation, and bound to the endpoint.
- ``push_dataset_files``: one commit of files plus a dataset card (README.md with YAML
  front matter) to a dataset repository, created when missing (public or private).
- ``dataset_card``: such a card.
- ``split_files`` and ``download_file``: the data files of one split of a dataset
  repository at one commit, and each file's bytes into a local file (the import).

Every failure is a ``HubError`` whose message says what went wrong in words (an unknown
repository, a refused token, a refused address), never with the token in it.

Choices:
- A repository that exists keeps its visibility, except that a push asking for a
  private repository into one that is public is refused: the data would be public.
- Files go up through the plain HTTP/LFS path (never Xet, see ``agentops.hf_client``);
  which files go through LFS is the Hub's choice (its preupload answer).
- A download follows the Hub's redirect to its storage (large files live there) itself:
  the target passes the SSRF guard, and the token goes along only when the target is
  the endpoint's own origin (a signed storage URL needs none).
- A split's files: the ``configs`` of the card's front matter (the ``default`` config,
  else the first) when it names data files, else the Hub's naming convention (a file
  whose path has the split's name, or an alias such as ``dev`` for ``validation``, as a
  word; when no file names any split, every data file is ``train``).
"""

from __future__ import annotations

import fnmatch
import io
import os
import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path, PurePosixPath
from urllib.parse import urljoin

import httpx2
import yaml
from huggingface_hub import CommitOperationAdd, DatasetCard, DatasetCardData, HfApi, hf_hub_url
from huggingface_hub.errors import HfHubHTTPError, HFValidationError, RepositoryNotFoundError, RevisionNotFoundError
from huggingface_hub.utils import build_hf_headers, hf_raise_for_status

from agentops.hf_client import (
    DEFAULT_ENDPOINT,
    REQUEST_TIMEOUT_SECONDS,
    AddressRefused,
    RedirectRefused,
    hub_api,
    origin,
)
from agentops.netguard import UnsafeUrlError, check_outbound_url, checked_transport, refused_connection
from agentops.redact import redact_secrets

HUB_DESTINATION_KIND = "hf_hub"
NAME_PATTERN = re.compile(r"^(?!.*(?:--|\.\.))[A-Za-z0-9](?:[A-Za-z0-9._-]{0,94}[A-Za-z0-9])?$")
RETRYABLE_STATUSES = (429, 500, 502, 503, 504)
DATA_SUFFIXES = (".parquet", ".jsonl", ".ndjson", ".json", ".csv")
SPLIT_PATTERN = re.compile(r"^\w+(?:[.-]\w+)*$")
REVISION_PATTERN = re.compile(r"^(?!.*\.\.)[\w./-]{1,200}$")
# The Hub's split names and the words its naming convention takes for them.
SPLIT_ALIASES = {
    "train": ("train", "training"),
    "validation": ("validation", "valid", "dev", "val"),
    "test": ("test", "testing", "eval", "evaluation"),
}
MAX_REDIRECTS = 3

FileSource = bytes | str | os.PathLike


class HubError(Exception):
    """A Hub call failed; the message says why (no secret in it)."""

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.retryable = retryable


@dataclass(frozen=True)
class HubAccount:
    """Where to reach the Hub and the token to do it with; ``namespace``, when set, is
    the user or organization that repository names without one belong to."""

    endpoint: str
    token: str = field(repr=False)
    namespace: str = ""


@dataclass(frozen=True)
class PushResult:
    repo_id: str
    url: str
    commit: str
    commit_url: str
    private: bool


def hub_account(destination) -> HubAccount:
    """The account an ``hf_hub`` export destination (a named organization secret) holds."""
    from evals.bulk_export.destinations import credentials_of

    if destination.kind != HUB_DESTINATION_KIND:
        raise HubError(f"{destination.name!r} is not a Hugging Face Hub destination")
    token = credentials_of(destination).get("token", "")
    if not token:
        raise HubError(f"the destination {destination.name!r} has no token")
    config = destination.config or {}
    return HubAccount(
        endpoint=config.get("endpoint") or DEFAULT_ENDPOINT, token=token, namespace=config.get("namespace") or ""
    )


def hub_account_named(name: str) -> HubAccount:
    """The account of the current organization's ``hf_hub`` destination called ``name``
    (the organization scope must be active: another organization's is never found)."""
    from evals.models import ExportDestination

    destination = ExportDestination.objects.filter(name=name, kind=HUB_DESTINATION_KIND).first()
    if destination is None:
        raise HubError(f"no Hugging Face Hub destination named {name!r} in this organization")
    return hub_account(destination)


def check_repo_id(repo_id: str) -> str:
    """``repo_id`` ("name" or "namespace/name") if well formed, else ``HubError``."""
    parts = repo_id.split("/") if isinstance(repo_id, str) else []
    if not 1 <= len(parts) <= 2 or not all(NAME_PATTERN.match(part) for part in parts):
        raise HubError(
            f"{repo_id!r} is not a Hub repository name: 'namespace/name' or 'name', letters, digits, '-', '_', '.'"
        )
    return repo_id


def check_path_in_repo(path: str) -> str:
    """A relative path inside a repository, without '..' or a leading '/'."""
    parts = PurePosixPath(path).parts if isinstance(path, str) else ()
    if not parts or path.startswith("/") or "\\" in path or any(part in ("..", ".") for part in parts):
        raise HubError(f"{path!r} is not a file path inside a repository")
    if path.startswith(".git/") or path == ".git":
        raise HubError(f"{path!r} is not a file path inside a repository")
    return path


def api_for(account: HubAccount) -> HfApi:
    try:
        return hub_api(account.endpoint, account.token)
    except UnsafeUrlError as exc:
        raise HubError(f"the Hub endpoint is refused: {exc}") from None
    except ValueError:
        raise HubError("the Hugging Face destination has no token") from None


def full_repo_id(api: HfApi, account: HubAccount, repo_id: str) -> str:
    """``namespace/name``: a name alone belongs to the account's namespace, else to the
    token's user."""
    check_repo_id(repo_id)
    if "/" in repo_id:
        return repo_id
    namespace = account.namespace
    if not namespace:
        try:
            namespace = api.whoami()["name"]
        except Exception as exc:  # noqa: BLE001 - every failure becomes a reason in words
            raise hub_error(exc, doing="asking whose token it is", repo_id=repo_id, token=account.token) from None
    return f"{namespace}/{repo_id}"


def hub_error(exc: BaseException, *, doing: str, repo_id: str, token: str = "") -> HubError:
    """A Hub failure in words."""
    if isinstance(exc, HubError):
        return exc
    if isinstance(exc, RuntimeError) and isinstance(exc.__cause__, Exception):
        # huggingface_hub wraps a failed LFS upload: the cause says what happened.
        return hub_error(exc.__cause__, doing=doing, repo_id=repo_id, token=token)
    if isinstance(exc, RevisionNotFoundError):
        return HubError(f"the dataset repository {repo_id} has no such revision")
    if isinstance(exc, RepositoryNotFoundError):
        status = exc.response.status_code if exc.response is not None else None
        if status == 401 and _server_said(exc, token) and "invalid" in _server_said(exc, token).lower():
            return HubError("Hugging Face refused the token (401)")
        return HubError(f"the Hub has no dataset repository {repo_id} (or the token may not see it)")
    if isinstance(exc, HfHubHTTPError):
        status = exc.response.status_code if exc.response is not None else None
        detail = _server_said(exc, token)
        if status == 401:
            message = "Hugging Face refused the token (401)"
        elif status == 403:
            message = f"the token may not write to {repo_id} (403)"
        elif status == 404:
            message = f"not found on the Hub while {doing} (404)"
        else:
            message = f"the Hub answered {status} while {doing}"
        if detail:
            message += f": {detail}"
        return HubError(message, retryable=status in RETRYABLE_STATUSES)
    if isinstance(exc, RedirectRefused):
        return HubError(f"the Hub answered a redirect ({exc.status}) while {doing}, which is not followed")
    if isinstance(exc, AddressRefused):
        return HubError(f"while {doing}: {exc}")
    if refused_connection(exc):
        return HubError(f"while {doing}: address refused: {exc}")
    if isinstance(exc, httpx2.HTTPError):
        return HubError(f"the Hub could not be reached while {doing}: {type(exc).__name__}", retryable=True)
    if isinstance(exc, UnsafeUrlError):
        return HubError(f"the Hub endpoint is refused: {exc}")
    if isinstance(exc, HFValidationError):
        return HubError(f"{repo_id!r} is not a Hub repository name")
    if isinstance(exc, ValueError | KeyError | TypeError):
        # A malformed answer (huggingface_hub checks the Hub's JSON and raises these).
        return HubError(
            f"the Hub gave an answer that could not be used while {doing}: {redact_secrets(str(exc), [token])}"
        )
    if isinstance(exc, OSError):
        return HubError(f"a file could not be read while {doing}: {exc.strerror or exc}")
    raise exc


def _server_said(exc: HfHubHTTPError, token: str) -> str:
    lines = (exc.server_message or "").strip().splitlines()
    return redact_secrets(lines[0][:300], [token]) if lines else ""


def dataset_card(
    *,
    title: str,
    summary: str,
    splits: Mapping[str, str] | None = None,
    tags: list[str] | None = None,
    sections: list[tuple[str, str]] = (),
) -> str:
    """A dataset card: YAML front matter (``pretty_name``, ``tags``, and a ``default``
    config whose ``data_files`` map each split to its path pattern, so the Hub's viewer
    and ``datasets.load_dataset`` find the files), a title, the summary, then sections
    (heading, markdown)."""
    metadata = {"pretty_name": title, "tags": sorted({"agentops-studio", *(tags or [])})}
    if splits:
        metadata["configs"] = [
            {
                "config_name": "default",
                "data_files": [{"split": split, "path": pattern} for split, pattern in splits.items()],
            }
        ]
    body = [f"# {title}", "", summary.strip(), ""]
    for heading, text in sections:
        body += [f"## {heading}", "", text.strip(), ""]
    card = DatasetCard(f"---\n{DatasetCardData(**metadata).to_yaml()}\n---\n\n" + "\n".join(body))
    return str(card)


def push_dataset_files(
    account: HubAccount,
    *,
    repo_id: str,
    files: Mapping[str, FileSource],
    card: str,
    private: bool,
    commit_message: str,
) -> PushResult:
    """Commit ``files`` (path in the repository -> bytes or a local file's path) and
    ``card`` as README.md to the dataset repository ``repo_id``, created when missing
    (``private`` or public). One commit: the repository never holds half of a push."""
    paths = [check_path_in_repo(path) for path in files]
    if "README.md" in paths:
        raise HubError("README.md is the dataset card: pass it as the card, not as a file")
    for path, source in files.items():
        if not isinstance(source, bytes) and not Path(source).is_file():
            raise HubError(f"{path}: the local file to upload does not exist")
    api = api_for(account)
    repo_id = full_repo_id(api, account, repo_id)
    doing = f"reading the dataset repository {repo_id}"
    try:
        try:
            info = api.dataset_info(repo_id)
        except RepositoryNotFoundError:
            doing = f"creating the dataset repository {repo_id}"
            api.create_repo(repo_id, repo_type="dataset", private=private, exist_ok=True)
            info = api.dataset_info(repo_id)
        if private and not info.private:
            raise HubError(
                f"the dataset repository {repo_id} exists and is public, and this push is private: "
                "make it private on the Hub or choose another repository"
            )
        operations = [CommitOperationAdd(path_in_repo="README.md", path_or_fileobj=card.encode())]
        operations += [
            CommitOperationAdd(path_in_repo=path, path_or_fileobj=source if isinstance(source, bytes) else str(source))
            for path, source in files.items()
        ]
        doing = f"committing to {repo_id}"
        commit = api.create_commit(
            repo_id=repo_id, repo_type="dataset", operations=operations, commit_message=commit_message
        )
    except Exception as exc:  # noqa: BLE001 - every failure becomes a reason in words
        raise hub_error(exc, doing=doing, repo_id=repo_id, token=account.token) from None
    return PushResult(
        repo_id=repo_id,
        url=f"{api.endpoint}/datasets/{repo_id}",
        commit=commit.oid,
        commit_url=commit.commit_url,
        private=bool(info.private),
    )


# -- reading a dataset repository ---------------------------------------------------------


@dataclass(frozen=True)
class RepoFileRef:
    path: str
    size: int


@dataclass(frozen=True)
class SplitFiles:
    repo_id: str
    commit: str
    split: str
    files: list[RepoFileRef]


def split_files(account: HubAccount, *, repo_id: str, split: str, revision: str = "") -> SplitFiles:
    """The data files of ``split`` in the dataset repository at ``revision`` (default: the
    main branch), read at one commit; ``HubError`` when the repository, the revision or
    the split is not there (the message lists the splits it has)."""
    api = api_for(account)
    repo_id = full_repo_id(api, account, repo_id)
    doing = f"reading the dataset repository {repo_id}"
    try:
        info = api.dataset_info(repo_id, revision=revision or None)
        commit = info.sha
        files = [
            RepoFileRef(path=entry.path, size=entry.size or 0)
            for entry in api.list_repo_tree(repo_id, repo_type="dataset", revision=commit, recursive=True)
            if getattr(entry, "size", None) is not None
        ]
        configs = None
        if any(entry.path == "README.md" for entry in files):
            doing = f"reading the dataset card of {repo_id}"
            configs = _card_configs(_download_bytes(account, repo_id, "README.md", commit, limit=1024 * 1024))
    except Exception as exc:  # noqa: BLE001 - every failure becomes a reason in words
        raise hub_error(exc, doing=doing, repo_id=repo_id, token=account.token) from None
    splits = _splits(files, configs)
    if split not in splits:
        known = ", ".join(sorted(splits)) or "none (no Parquet, JSON Lines or CSV file)"
        raise HubError(f"the dataset repository {repo_id} has no split {split!r}; its splits: {known}")
    return SplitFiles(repo_id=repo_id, commit=commit, split=split, files=splits[split])


def _card_configs(card: bytes) -> list | None:
    """The ``configs`` of a card's YAML front matter, or None."""
    text = card.decode("utf-8", errors="replace")
    if not text.startswith("---"):
        return None
    parts = text.split("---", 2)
    if len(parts) < 3:
        return None
    try:
        metadata = yaml.safe_load(parts[1])
    except yaml.YAMLError:
        return None
    configs = metadata.get("configs") if isinstance(metadata, dict) else None
    return configs if isinstance(configs, list) else None


def _splits(files: list[RepoFileRef], configs: list | None) -> dict[str, list[RepoFileRef]]:
    data = [entry for entry in files if entry.path.lower().endswith(DATA_SUFFIXES)]
    config = None
    if configs:
        dicts = [c for c in configs if isinstance(c, dict)]
        config = next((c for c in dicts if c.get("default") or c.get("config_name") == "default"), None)
        config = config or (dicts[0] if dicts else None)
    if config and config.get("data_files"):
        patterns: dict[str, list[str]] = {}
        data_files = config["data_files"]
        if isinstance(data_files, dict):  # {split: pattern(s)}
            data_files = [{"split": split, "path": paths} for split, paths in data_files.items()]
        if isinstance(data_files, str | list) and not (
            isinstance(data_files, list) and data_files and isinstance(data_files[0], dict)
        ):
            patterns["train"] = [data_files] if isinstance(data_files, str) else [str(p) for p in data_files]
        else:
            for entry in data_files if isinstance(data_files, list) else []:
                if isinstance(entry, dict) and entry.get("split") and entry.get("path"):
                    paths = entry["path"] if isinstance(entry["path"], list) else [entry["path"]]
                    patterns.setdefault(str(entry["split"]), []).extend(str(p) for p in paths)
        return {
            split: [entry for entry in data if any(fnmatch.fnmatchcase(entry.path, p) for p in globs)]
            for split, globs in patterns.items()
        }
    by_split: dict[str, list[RepoFileRef]] = {}
    for entry in data:
        words = set(re.split(r"[-._/ ]+", entry.path.lower()))
        for split, aliases in SPLIT_ALIASES.items():
            if words & set(aliases):
                by_split.setdefault(split, []).append(entry)
                break
    if not by_split and data:
        by_split["train"] = data
    return by_split


def download_file(account: HubAccount, *, repo_id: str, path: str, commit: str, target: Path, max_bytes: int) -> int:
    """Write the repository's file ``path`` at ``commit`` to ``target``; its size.
    ``HubError`` when it cannot be read or is larger than ``max_bytes``."""
    try:
        with open(target, "wb") as sink:
            return _download(account, repo_id, path, commit, sink, max_bytes)
    except HubError:
        raise
    except Exception as exc:  # noqa: BLE001 - every failure becomes a reason in words
        raise hub_error(exc, doing=f"downloading {path}", repo_id=repo_id, token=account.token) from None


def _download_bytes(account: HubAccount, repo_id: str, path: str, commit: str, *, limit: int) -> bytes:
    sink = io.BytesIO()
    _download(account, repo_id, path, commit, sink, limit)
    return sink.getvalue()


def _download(account: HubAccount, repo_id: str, path: str, commit: str, sink, max_bytes: int) -> int:
    """GET the file through the resolve URL, following the Hub's redirect to its storage
    here (the shared client refuses redirects): each target passes the SSRF guard, and
    the token is sent only to the endpoint's own origin."""
    url = hf_hub_url(repo_id, path, repo_type="dataset", revision=commit, endpoint=account.endpoint)
    with_token = build_hf_headers(token=account.token, library_name="agentops-studio")
    without_token = {key: value for key, value in with_token.items() if key.lower() != "authorization"}
    hub_origin = origin(account.endpoint)
    with httpx2.Client(
        transport=checked_transport(), timeout=httpx2.Timeout(REQUEST_TIMEOUT_SECONDS), follow_redirects=False
    ) as client:
        for _ in range(MAX_REDIRECTS + 1):
            try:
                check_outbound_url(url)
            except UnsafeUrlError as exc:
                raise HubError(f"the Hub sent the download of {path} to a refused address: {exc}") from None
            headers = with_token if origin(url) == hub_origin else without_token
            with client.stream("GET", url, headers=headers) as response:
                if response.is_redirect:
                    url = urljoin(url, response.headers["Location"])
                    continue
                if response.status_code >= 400:
                    response.read()
                    hf_raise_for_status(response)
                written = 0
                for chunk in response.iter_bytes(1024 * 1024):
                    written += len(chunk)
                    if written > max_bytes:
                        raise HubError(f"{path} is larger than the {max_bytes:,} bytes an import may read")
                    sink.write(chunk)
                return written
    raise HubError(f"the Hub redirected the download of {path} more than {MAX_REDIRECTS} times")
