"""A local HTTP server that speaks the Hugging Face Hub's repository API the way
``huggingface_hub`` calls it, for the real client to talk to in tests (dataset
repositories only).

Endpoints (read from huggingface_hub 2.4's ``hf_api.py``, ``_commit_api.py``, ``lfs.py``
and ``file_download.py``):
- ``GET  /api/whoami-v2``                                who the token belongs to
- ``POST /api/repos/create``                             create_repo (409 when it exists;
  403 in a namespace the token may not write to)
- ``GET  /api/datasets/{ns}/{name}[/revision/{rev}]``    dataset_info
- ``GET  /api/datasets/{ns}/{name}/tree/{rev}[/{path}]`` list_repo_tree (one page)
- ``POST /api/validate-yaml``                            the card's front matter is YAML
- ``POST /api/datasets/{ns}/{name}/preupload/{rev}``     upload modes: "lfs" for Parquet,
  Arrow and files of ``lfs_threshold`` bytes or more, "regular" for the rest
- ``POST /datasets/{ns}/{name}.git/info/lfs/objects/batch``  LFS batch ("basic" only:
  a request that asks for another transfer, or none, is answered 400)
- ``PUT  /lfs/{oid}``                                    the upload URL (signed: no token)
- ``POST /datasets/{ns}/{name}.git/info/lfs/objects/verify``
- ``POST /api/datasets/{ns}/{name}/commit/{rev}``        the NDJSON commit (header, file,
  lfsFile); an lfsFile whose object was never uploaded is refused
- ``GET|HEAD /datasets/{ns}/{name}/resolve/{rev}/{path}`` a file: regular files are served
  here; LFS files too, or, with ``cdn_redirect``, answered 302 to the ``cdn`` server (another
  origin, which records the Authorization header it receives)

There is no Xet endpoint: a client that tried Xet would fail. Tokens: ``TOKEN`` writes
to ``USER`` and ``ORG``; ``READ_TOKEN`` only reads (403 on writes); anything else is 401.
Private repositories are 404 (``RepoNotFound``) to a request without a token that may
read them, as on the Hub. Every request is recorded (method, path, Authorization).
"""

from __future__ import annotations

import base64
import hashlib
import json
import threading
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import unquote, urlsplit

import pytest
import yaml

TOKEN = "hf_fake_hub_write_token_0123456789"
READ_TOKEN = "hf_fake_hub_read_token_9876543210"
USER = "alice"
ORG = "acme-research"
LFS_SUFFIXES = (".parquet", ".arrow")


@dataclass
class FakeRepo:
    repo_id: str
    private: bool
    files: dict[str, bytes] = field(default_factory=dict)
    lfs: set[str] = field(default_factory=set)  # paths stored through LFS
    commits: list[dict] = field(default_factory=list)

    @property
    def sha(self) -> str:
        return self.commits[-1]["oid"] if self.commits else "0" * 40


@dataclass
class FakeHub:
    url: str = ""
    cdn_url: str = ""
    repos: dict[str, FakeRepo] = field(default_factory=dict)
    lfs_objects: dict[str, bytes] = field(default_factory=dict)
    requests: list[dict] = field(default_factory=list)
    cdn_requests: list[dict] = field(default_factory=list)
    lfs_threshold: int = 10 * 1024 * 1024
    cdn_redirect: bool = False
    # The LFS batch answer names the cdn server for the verify step (which the client
    # calls with the token): a Hub answer pointing elsewhere.
    verify_elsewhere: bool = False
    lock: threading.Lock = field(default_factory=threading.Lock)

    # What tests call.

    def add_repo(self, repo_id: str, files: dict[str, bytes] | None = None, *, private: bool = False) -> FakeRepo:
        repo = FakeRepo(repo_id=repo_id, private=private)
        for path, data in (files or {}).items():
            repo.files[path] = data
            if self._is_lfs(path, len(data)):
                oid = hashlib.sha256(data).hexdigest()
                self.lfs_objects[oid] = data
                repo.lfs.add(path)
        repo.commits.append({"oid": _commit_oid(repo_id, 0), "summary": "initial commit"})
        self.repos[repo_id] = repo
        return repo

    def requests_to(self, method: str, contains: str = "") -> list[dict]:
        return [r for r in self.requests if r["method"] == method and contains in r["path"]]

    def tokens_seen(self) -> set[str]:
        return {r["authorization"] for r in self.requests + self.cdn_requests if r["authorization"]}

    # The server's side.

    def _is_lfs(self, path: str, size: int) -> bool:
        return path.endswith(LFS_SUFFIXES) or size >= self.lfs_threshold


def _commit_oid(repo_id: str, number: int) -> str:
    return hashlib.sha1(f"{repo_id}@{number}".encode()).hexdigest()  # noqa: S324 - a fake commit id


def _git_oid(data: bytes) -> str:
    return hashlib.sha1(b"blob %d\0" % len(data) + data).hexdigest()  # noqa: S324 - git's blob id


@pytest.fixture
def fake_hf_hub():
    hub = FakeHub()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle(self):
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass

        def log_message(self, *args):
            pass

        # Helpers.

        def _body(self) -> bytes:
            length = int(self.headers.get("Content-Length") or 0)
            return self.rfile.read(length) if length else b""

        def _send(self, status: int, data: bytes = b"", headers: dict | None = None, content_type="application/json"):
            self.send_response(status)
            for name, value in (headers or {}).items():
                self.send_header(name, value)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            if self.command != "HEAD":
                self.wfile.write(data)

        def _json(self, status: int, payload, headers: dict | None = None) -> None:
            self._send(status, json.dumps(payload).encode(), headers)

        def _error(self, status: int, message: str, code: str | None = None) -> None:
            # The Hub names the error in headers too; huggingface_hub reads them.
            headers = {"X-Error-Message": message}
            if code:
                headers["X-Error-Code"] = code
            self._json(status, {"error": message}, headers)

        def _record(self) -> str | None:
            """Record the request; the token it carries ("" for none), None if refused (401 sent)."""
            authorization = self.headers.get("Authorization")
            hub.requests.append(
                {"method": self.command, "path": urlsplit(self.path).path, "authorization": authorization}
            )
            if authorization is None:
                return ""
            token = authorization.removeprefix("Bearer ")
            if token not in (TOKEN, READ_TOKEN):
                self._error(401, "Invalid credentials in Authorization header")
                return None
            return token

        def _namespaces(self, token: str) -> set[str]:
            return {USER, ORG} if token else set()

        def _readable(self, repo_id: str, token: str) -> FakeRepo | None:
            repo = hub.repos.get(repo_id)
            if repo is None or (repo.private and repo_id.split("/")[0] not in self._namespaces(token)):
                self._error(404, "Repository not found", "RepoNotFound")
                return None
            return repo

        def _writable(self, repo_id: str, token: str) -> FakeRepo | None:
            repo = self._readable(repo_id, token)
            if repo is None:
                return None
            if token != TOKEN or repo_id.split("/")[0] not in self._namespaces(token):
                self._error(403, f"You don't have the rights to write to {repo_id}")
                return None
            return repo

        # Routes.

        def do_GET(self):  # noqa: N802
            token = self._record()
            if token is None:
                return
            parts = [unquote(part) for part in urlsplit(self.path).path.strip("/").split("/")]
            if parts == ["api", "whoami-v2"]:
                if not token:
                    self._error(401, "Invalid credentials in Authorization header")
                    return
                role = "write" if token == TOKEN else "read"
                self._json(
                    200,
                    {
                        "type": "user",
                        "name": USER,
                        "orgs": [{"name": ORG, "type": "org"}],
                        "auth": {"type": "access_token", "accessToken": {"displayName": "tests", "role": role}},
                    },
                )
                return
            if len(parts) >= 4 and parts[:2] == ["api", "datasets"]:
                repo = self._readable(f"{parts[2]}/{parts[3]}", token)
                if repo is None:
                    return
                rest = parts[4:]
                if not rest or rest[0] == "revision":
                    self._json(200, self._info(repo))
                elif rest[0] == "tree":
                    prefix = "/".join(rest[2:])
                    self._json(200, self._tree(repo, prefix, "recursive=true" in (urlsplit(self.path).query or "")))
                else:
                    self._error(404, "Not found")
                return
            if len(parts) >= 5 and parts[0] == "datasets" and parts[3] == "resolve":
                self._resolve(f"{parts[1]}/{parts[2]}", "/".join(parts[5:]), token)
                return
            self._error(404, "Not found")

        do_HEAD = do_GET  # noqa: N815

        def do_PUT(self):  # noqa: N802
            hub.requests.append(
                {"method": "PUT", "path": urlsplit(self.path).path, "authorization": self.headers.get("Authorization")}
            )
            data = self._body()
            parts = urlsplit(self.path).path.strip("/").split("/")
            if len(parts) == 2 and parts[0] == "lfs":
                if hashlib.sha256(data).hexdigest() != parts[1]:
                    self._error(400, "the content does not match its oid")
                    return
                with hub.lock:
                    hub.lfs_objects[parts[1]] = data
                self._send(200)
                return
            self._error(404, "Not found")

        def do_POST(self):  # noqa: N802
            raw = self._body()
            token = self._record()
            if token is None:
                return
            hub.requests[-1]["body"] = raw
            parts = [unquote(part) for part in urlsplit(self.path).path.strip("/").split("/")]
            if parts == ["api", "validate-yaml"]:
                content = json.loads(raw)["content"]
                try:
                    _, front, _ = content.split("---\n", 2)
                    yaml.safe_load(front)
                except (ValueError, yaml.YAMLError):
                    self._json(400, {"error": "Invalid metadata in README.md"})
                    return
                self._json(200, {"errors": [], "warnings": []})
                return
            if parts == ["api", "repos", "create"]:
                self._create(json.loads(raw), token)
                return
            if len(parts) >= 5 and parts[:2] == ["api", "datasets"] and parts[4] in ("preupload", "commit"):
                repo = self._writable(f"{parts[2]}/{parts[3]}", token)
                if repo is None:
                    return
                if parts[4] == "preupload":
                    files = json.loads(raw)["files"]
                    self._json(
                        200,
                        {
                            "files": [
                                {
                                    "path": f["path"],
                                    "uploadMode": "lfs" if hub._is_lfs(f["path"], f["size"]) else "regular",
                                    "shouldIgnore": False,
                                    "oid": None,
                                }
                                for f in files
                            ],
                            "commitOid": repo.sha,
                        },
                    )
                else:
                    self._commit(repo, raw)
                return
            if len(parts) == 7 and parts[0] == "datasets" and parts[3:6] == ["info", "lfs", "objects"]:
                repo = self._writable(f"{parts[1]}/{parts[2].removesuffix('.git')}", token)
                if repo is None:
                    return
                if parts[6] == "batch":
                    self._batch(repo, json.loads(raw))
                else:  # verify
                    oid = json.loads(raw)["oid"]
                    self._json(200 if oid in hub.lfs_objects else 404, {})
                return
            self._error(404, "Not found")

        # Handlers.

        def _info(self, repo: FakeRepo) -> dict:
            return {
                "_id": hashlib.md5(repo.repo_id.encode()).hexdigest()[:24],  # noqa: S324
                "id": repo.repo_id,
                "author": repo.repo_id.split("/")[0],
                "sha": repo.sha,
                "private": repo.private,
                "disabled": False,
                "gated": False,
                "downloads": 0,
                "likes": 0,
                "tags": [],
                "lastModified": "2026-01-01T00:00:00.000Z",
                "createdAt": "2026-01-01T00:00:00.000Z",
                "siblings": [{"rfilename": path} for path in sorted(repo.files)],
            }

        def _tree(self, repo: FakeRepo, prefix: str, recursive: bool) -> list[dict]:
            entries, folders = [], set()
            for path in sorted(repo.files):
                if prefix and not path.startswith(prefix + "/"):
                    continue
                rest = path[len(prefix) + 1 :] if prefix else path
                if "/" in rest and not recursive:
                    folders.add((prefix + "/" if prefix else "") + rest.split("/")[0])
                    continue
                data = repo.files[path]
                entry = {"type": "file", "oid": _git_oid(data), "size": len(data), "path": path}
                if path in repo.lfs:
                    entry["lfs"] = {"oid": hashlib.sha256(data).hexdigest(), "size": len(data), "pointerSize": 134}
                entries.append(entry)
            if recursive:
                for path in repo.files:
                    if not prefix or path.startswith(prefix + "/"):
                        pieces = path.split("/")[:-1]
                        folders.update("/".join(pieces[: i + 1]) for i in range(len(pieces)))
            return [{"type": "directory", "oid": "0" * 40, "path": f} for f in sorted(folders)] + entries

        def _resolve(self, repo_id: str, path: str, token: str) -> None:
            repo = self._readable(repo_id, token)
            if repo is None:
                return
            data = repo.files.get(path)
            if data is None:
                self._error(404, "Entry not found", "EntryNotFound")
                return
            headers = {"X-Repo-Commit": repo.sha, "ETag": f'"{_git_oid(data)}"'}
            if path in repo.lfs:
                sha = hashlib.sha256(data).hexdigest()
                headers.update({"X-Linked-Etag": f'"{sha}"', "X-Linked-Size": str(len(data))})
                if hub.cdn_redirect:
                    headers["Location"] = f"{hub.cdn_url}/blobs/{sha}?signature=fake"
                    self._send(302, b"", headers)
                    return
            self._send(200, data, headers, content_type="application/octet-stream")

        def _create(self, payload: dict, token: str) -> None:
            if not token:
                self._error(401, "Invalid credentials in Authorization header")
                return
            namespace = payload.get("organization") or USER
            repo_id = f"{namespace}/{payload['name']}"
            if payload.get("type") != "dataset":
                self._error(400, "only dataset repositories here")
                return
            if token != TOKEN or namespace not in self._namespaces(token):
                self._error(403, f"You don't have the rights to create a dataset under the namespace {namespace!r}")
                return
            url = f"{hub.url}/datasets/{repo_id}"
            with hub.lock:
                if repo_id in hub.repos:
                    self._json(409, {"error": "You already created this dataset repo", "url": url})
                    return
                repo = FakeRepo(repo_id=repo_id, private=payload.get("visibility") == "private")
                hub.repos[repo_id] = repo
            self._json(200, {"url": url, "name": repo_id, "id": repo_id})

        def _batch(self, repo: FakeRepo, payload: dict) -> None:
            if payload.get("operation") != "upload" or "basic" not in (payload.get("transfers") or []):
                self._error(400, "only the basic transfer is served here")
                return
            objects = []
            for item in payload["objects"]:
                oid = item["oid"]
                entry = {"oid": oid, "size": item["size"], "authenticated": True}
                if oid not in hub.lfs_objects:
                    entry["actions"] = {
                        "upload": {"href": f"{hub.url}/lfs/{oid}"},
                        "verify": {
                            "href": f"{hub.cdn_url if hub.verify_elsewhere else hub.url}"
                            f"/datasets/{repo.repo_id}.git/info/lfs/objects/verify"
                        },
                    }
                objects.append(entry)
            self._json(200, {"transfer": "basic", "objects": objects})

        def _commit(self, repo: FakeRepo, raw: bytes) -> None:
            if self.headers.get("Content-Type") != "application/x-ndjson":
                self._error(400, "the commit must be NDJSON")
                return
            lines = [json.loads(line) for line in raw.decode().splitlines() if line.strip()]
            if not lines or lines[0].get("key") != "header":
                self._error(400, "the commit starts with its header")
                return
            changes: dict[str, tuple[bytes, bool]] = {}
            for line in lines[1:]:
                value = line["value"]
                if line["key"] == "file":
                    changes[value["path"]] = (base64.b64decode(value["content"]), False)
                elif line["key"] == "lfsFile":
                    data = hub.lfs_objects.get(value["oid"])
                    if data is None or len(data) != value["size"]:
                        self._error(422, f"LFS object {value['oid']} was never uploaded")
                        return
                    changes[value["path"]] = (data, True)
                else:
                    self._error(400, f"unsupported commit operation {line['key']!r}")
                    return
            with hub.lock:
                for path, (data, is_lfs) in changes.items():
                    repo.files[path] = data
                    (repo.lfs.add if is_lfs else repo.lfs.discard)(path)
                oid = _commit_oid(repo.repo_id, len(repo.commits))
                repo.commits.append({"oid": oid, "summary": lines[0]["value"].get("summary"), "files": sorted(changes)})
            self._json(
                200,
                {
                    "success": True,
                    "commitOid": oid,
                    "commitUrl": f"{hub.url}/datasets/{repo.repo_id}/commit/{oid}",
                    "pullRequestUrl": None,
                },
            )

    class Cdn(BaseHTTPRequestHandler):
        """Another origin: the storage a resolve redirects LFS files to (signed URLs)."""

        protocol_version = "HTTP/1.1"

        def log_message(self, *args):
            pass

        def do_POST(self):  # noqa: N802
            hub.cdn_requests.append(
                {"method": "POST", "path": self.path, "authorization": self.headers.get("Authorization")}
            )
            self.send_response(200)
            self.send_header("Content-Length", "0")
            self.end_headers()

        def do_GET(self):  # noqa: N802
            path = urlsplit(self.path).path
            hub.cdn_requests.append({"method": "GET", "path": path, "authorization": self.headers.get("Authorization")})
            data = hub.lfs_objects.get(path.rsplit("/", 1)[-1])
            status = 200 if data is not None else 404
            data = data if data is not None else b"missing"
            self.send_response(status)
            self.send_header("Content-Type", "application/octet-stream")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

    servers = []
    for handler in (Handler, Cdn):
        server = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        server.daemon_threads = True
        threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
        servers.append(server)
    hub.url = f"http://127.0.0.1:{servers[0].server_address[1]}"
    hub.cdn_url = f"http://127.0.0.1:{servers[1].server_address[1]}"
    yield hub
    for server in servers:
        server.shutdown()
        server.server_close()
