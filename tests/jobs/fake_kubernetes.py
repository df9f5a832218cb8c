"""A local HTTP server that speaks the part of the Kubernetes API the Kubernetes backend
uses, for the real ``kubernetes`` client to talk to in tests.

Endpoints:
- ``POST   /apis/batch/v1/namespaces/{ns}/jobs``              create a Job (and its pod)
- ``GET    /apis/batch/v1/namespaces/{ns}/jobs/{name}[/status]`` read a Job
- ``DELETE /apis/batch/v1/namespaces/{ns}/jobs/{name}``       delete it, its pods and the
  Secrets it owns (as the garbage collector would)
- ``POST   /api/v1/namespaces/{ns}/secrets``                  create a Secret
- ``GET | PATCH | DELETE /api/v1/namespaces/{ns}/secrets/{name}`` (PATCH: merge patch)
- ``GET    /api/v1/namespaces/{ns}/pods?labelSelector=k=v``   list pods
- ``GET    /api/v1/namespaces/{ns}/pods/{name}/log``          the log as text; with
  ``timestamps=true`` each line starts with its RFC 3339 time; 400 while the container
  has not started, as the API server answers

Every request needs ``Authorization: Bearer <TOKEN>`` (401 otherwise) and is recorded;
errors are ``Status`` objects. A job's pod moves when the test says so: ``start``,
``write_log``, ``finish``, ``deadline_exceeded``, ``unschedulable``, ``waiting``. The
client sends create bodies without a Content-Type; like the API server, the fake takes
them as JSON.
"""

from __future__ import annotations

import base64
import copy
import json
import re
import threading
import uuid
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import pytest

TOKEN = "k8s-fake-token-0123456789"
NAME = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")


def now(nanoseconds: bool = False) -> str:
    """An RFC 3339 time as the API server writes it (log times: nanoseconds, trailing
    zeros trimmed, like Go's RFC3339Nano)."""
    moment = datetime.now(UTC)
    if not nanoseconds:
        return moment.strftime("%Y-%m-%dT%H:%M:%SZ")
    fraction = f"{moment.microsecond:06d}000".rstrip("0")
    return moment.strftime("%Y-%m-%dT%H:%M:%S") + (f".{fraction}" if fraction else "") + "Z"


def status_body(code: int, reason: str, message: str) -> dict:
    return {
        "kind": "Status",
        "apiVersion": "v1",
        "metadata": {},
        "status": "Failure",
        "message": message,
        "reason": reason,
        "code": code,
    }


class FakeKubernetes:
    def __init__(self):
        self.url = ""
        self.namespaces = {"default", "ml"}
        self.jobs: dict[tuple[str, str], dict] = {}
        self.pods: dict[tuple[str, str], dict] = {}
        self.secrets: dict[tuple[str, str], dict] = {}
        # Per pod: [timestamp, text, complete] entries.
        self.logs: dict[tuple[str, str], list[list]] = {}
        self.requests: list[dict] = []
        self.lock = threading.RLock()

    # What tests call.

    def only_job(self) -> dict:
        assert len(self.jobs) == 1, list(self.jobs)
        return next(iter(self.jobs.values()))

    def pod_of(self, job_name: str, namespace: str = "default") -> dict:
        return next(
            pod
            for (ns, _), pod in self.pods.items()
            if ns == namespace and pod["metadata"]["labels"].get("job-name") == job_name
        )

    def requests_to(self, method: str, pattern: str) -> list[dict]:
        return [r for r in self.requests if r["method"] == method and re.search(pattern, r["path"])]

    def start(self, job_name: str, namespace: str = "default") -> None:
        with self.lock:
            job, pod = self.jobs[(namespace, job_name)], self.pod_of(job_name, namespace)
            pod["status"].update(
                {
                    "phase": "Running",
                    "startTime": now(),
                    "conditions": [{"type": "PodScheduled", "status": "True"}, {"type": "Ready", "status": "True"}],
                    "containerStatuses": [self._container(pod, {"running": {"startedAt": now()}}, ready=True)],
                }
            )
            job["status"].update({"active": 1, "ready": 1})

    def write_log(self, job_name: str, text: str, *, at: str | None = None, namespace: str = "default") -> None:
        """Append ``text`` to the pod's log; a part without a final newline stays an
        unfinished line that the next write continues."""
        with self.lock:
            entries = self.logs.setdefault((namespace, self.pod_of(job_name, namespace)["metadata"]["name"]), [])
            for piece in re.findall(r"[^\n]*\n|[^\n]+$", text):
                complete = piece.endswith("\n")
                piece = piece.rstrip("\n")
                if entries and not entries[-1][2]:
                    entries[-1][1] += piece
                    entries[-1][2] = complete
                else:
                    entries.append([at or now(nanoseconds=True), piece, complete])

    def finish(self, job_name: str, exit_code: int = 0, *, namespace: str = "default") -> None:
        with self.lock:
            job, pod = self.jobs[(namespace, job_name)], self.pod_of(job_name, namespace)
            running = (pod["status"].get("containerStatuses") or [{}])[0].get("state", {}).get("running", {})
            terminated = {
                "exitCode": exit_code,
                "reason": "Completed" if exit_code == 0 else "Error",
                "startedAt": running.get("startedAt") or now(),
                "finishedAt": now(),
            }
            pod["status"].update(
                {
                    "phase": "Succeeded" if exit_code == 0 else "Failed",
                    "containerStatuses": [self._container(pod, {"terminated": terminated})],
                }
            )
            status = job["status"]
            status.update({"active": 0, "ready": 0})
            if exit_code == 0:
                status.update({"succeeded": 1, "completionTime": now()})
                status["conditions"] = [
                    {"type": "SuccessCriteriaMet", "status": "True", "lastTransitionTime": now()},
                    {"type": "Complete", "status": "True", "lastTransitionTime": now()},
                ]
            else:
                status["failed"] = 1
                status["conditions"] = [
                    {
                        "type": "FailureTarget",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                        "lastTransitionTime": now(),
                    },
                    {
                        "type": "Failed",
                        "status": "True",
                        "reason": "BackoffLimitExceeded",
                        "message": "Job has reached the specified backoff limit",
                        "lastTransitionTime": now(),
                    },
                ]

    def deadline_exceeded(self, job_name: str, *, namespace: str = "default") -> None:
        """The Job ran past activeDeadlineSeconds: its pod is removed, the Job failed."""
        with self.lock:
            job, pod = self.jobs[(namespace, job_name)], self.pod_of(job_name, namespace)
            del self.pods[(namespace, pod["metadata"]["name"])]
            job["status"].update({"active": 0, "failed": 1})
            job["status"]["conditions"] = [
                {
                    "type": "Failed",
                    "status": "True",
                    "reason": "DeadlineExceeded",
                    "message": "Job was active longer than specified deadline",
                    "lastTransitionTime": now(),
                }
            ]

    def unschedulable(self, job_name: str, message: str, *, namespace: str = "default") -> None:
        with self.lock:
            self.pod_of(job_name, namespace)["status"]["conditions"] = [
                {"type": "PodScheduled", "status": "False", "reason": "Unschedulable", "message": message}
            ]

    def waiting(self, job_name: str, reason: str, message: str = "", *, namespace: str = "default") -> None:
        with self.lock:
            pod = self.pod_of(job_name, namespace)
            pod["status"]["containerStatuses"] = [
                self._container(pod, {"waiting": {"reason": reason, "message": message or None}})
            ]

    # The server's side.

    @staticmethod
    def _container(pod: dict, state: dict, ready: bool = False) -> dict:
        container = pod["spec"]["containers"][0]
        return {
            "name": container["name"],
            "image": container["image"],
            "imageID": "",
            "ready": ready,
            "restartCount": 0,
            "started": "running" in state,
            "state": state,
        }

    def create_job(self, namespace: str, body: dict) -> tuple[int, dict]:
        name = (body.get("metadata") or {}).get("name") or ""
        if namespace not in self.namespaces:
            return 404, status_body(404, "NotFound", f'namespaces "{namespace}" not found')
        if len(name) > 63 or not NAME.match(name):
            return 422, status_body(422, "Invalid", f'Job.batch "{name}" is invalid: metadata.name: Invalid value')
        containers = (((body.get("spec") or {}).get("template") or {}).get("spec") or {}).get("containers") or []
        if not containers or not all(container.get("image") for container in containers):
            return 422, status_body(422, "Invalid", "spec.template.spec.containers[0].image: Required value")
        with self.lock:
            if (namespace, name) in self.jobs:
                return 409, status_body(409, "AlreadyExists", f'jobs.batch "{name}" already exists')
            job = copy.deepcopy(body)
            uid = str(uuid.uuid4())
            job["metadata"].update(
                {"namespace": namespace, "uid": uid, "creationTimestamp": now(), "resourceVersion": "1"}
            )
            job["status"] = {"startTime": now(), "active": 1}
            self.jobs[(namespace, name)] = job
            template = job["spec"]["template"]
            pod_name = f"{name}-{uuid.uuid4().hex[:5]}"
            labels = {
                **(template.get("metadata") or {}).get("labels", {}),
                "job-name": name,
                "batch.kubernetes.io/job-name": name,
                "controller-uid": uid,
                "batch.kubernetes.io/controller-uid": uid,
            }
            self.pods[(namespace, pod_name)] = {
                "apiVersion": "v1",
                "kind": "Pod",
                "metadata": {
                    "name": pod_name,
                    "namespace": namespace,
                    "uid": str(uuid.uuid4()),
                    "creationTimestamp": now(),
                    "labels": labels,
                    "ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}],
                },
                "spec": copy.deepcopy(template["spec"]),
                "status": {"phase": "Pending", "conditions": [{"type": "PodScheduled", "status": "True"}]},
            }
            return 201, job

    def delete_job(self, namespace: str, name: str) -> tuple[int, dict]:
        with self.lock:
            job = self.jobs.pop((namespace, name), None)
            if job is None:
                return 404, status_body(404, "NotFound", f'jobs.batch "{name}" not found')
            uid = job["metadata"]["uid"]
            for key in [
                key for key, pod in self.pods.items() if pod["metadata"]["labels"].get("controller-uid") == uid
            ]:
                del self.pods[key]
            for key in [
                key
                for key, secret in self.secrets.items()
                if any(owner.get("uid") == uid for owner in secret["metadata"].get("ownerReferences") or [])
            ]:
                del self.secrets[key]
            return 200, {
                "kind": "Status",
                "apiVersion": "v1",
                "metadata": {},
                "status": "Success",
                "details": {"name": name, "group": "batch", "kind": "jobs", "uid": uid},
            }

    def create_secret(self, namespace: str, body: dict) -> tuple[int, dict]:
        name = (body.get("metadata") or {}).get("name") or ""
        with self.lock:
            if (namespace, name) in self.secrets:
                return 409, status_body(409, "AlreadyExists", f'secrets "{name}" already exists')
            secret = copy.deepcopy(body)
            data = dict(secret.pop("data", None) or {})
            for key, value in (secret.pop("stringData", None) or {}).items():
                data[key] = base64.b64encode(value.encode()).decode()
            secret.update({"data": data, "apiVersion": "v1", "kind": "Secret"})
            secret["metadata"].update({"namespace": namespace, "uid": str(uuid.uuid4()), "creationTimestamp": now()})
            self.secrets[(namespace, name)] = secret
            return 201, secret

    def secret_values(self, name: str, namespace: str = "default") -> dict[str, str]:
        data = self.secrets[(namespace, name)]["data"]
        return {key: base64.b64decode(value).decode() for key, value in data.items()}

    def list_pods(self, namespace: str, selector: str) -> dict:
        wanted = dict(part.replace("==", "=").split("=", 1) for part in selector.split(",") if part)
        with self.lock:
            items = [
                copy.deepcopy(pod)
                for (ns, _), pod in self.pods.items()
                if ns == namespace and all(pod["metadata"]["labels"].get(k) == v for k, v in wanted.items())
            ]
        return {"kind": "PodList", "apiVersion": "v1", "metadata": {"resourceVersion": "1"}, "items": items}

    def pod_log(self, namespace: str, name: str, query: dict) -> tuple[int, dict | str]:
        with self.lock:
            pod = self.pods.get((namespace, name))
            if pod is None:
                return 404, status_body(404, "NotFound", f'pods "{name}" not found')
            statuses = pod["status"].get("containerStatuses") or []
            state = statuses[0].get("state", {}) if statuses else {}
            if not state.get("running") and not state.get("terminated"):
                container = pod["spec"]["containers"][0]["name"]
                return 400, status_body(
                    400, "BadRequest", f'container "{container}" in pod "{name}" is waiting to start: ContainerCreating'
                )
            timestamps = query.get("timestamps", ["false"])[0] == "true"
            return 200, "".join(
                (f"{at} " if timestamps else "") + text + ("\n" if complete else "")
                for at, text, complete in self.logs.get((namespace, name), [])
            )


@pytest.fixture
def fake_kubernetes():
    state = FakeKubernetes()

    class Handler(BaseHTTPRequestHandler):
        protocol_version = "HTTP/1.1"

        def handle(self):
            try:
                super().handle()
            except (BrokenPipeError, ConnectionResetError):
                pass  # The client closed a kept-alive connection.

        def _handle(self) -> None:
            length = int(self.headers.get("Content-Length") or 0)
            raw = self.rfile.read(length) if length else b""
            body = json.loads(raw) if raw else None
            parts = urlsplit(self.path)
            query = parse_qs(parts.query)
            state.requests.append(
                {
                    "method": self.command,
                    "path": parts.path,
                    "query": query,
                    "authorization": self.headers.get("Authorization"),
                    "content_type": self.headers.get("Content-Type"),
                    "body": body,
                }
            )
            if self.headers.get("Authorization") != f"Bearer {TOKEN}":
                self._send(401, status_body(401, "Unauthorized", "Unauthorized"))
                return
            path = parts.path.strip("/").split("/")
            method = self.command
            if path[:4] == ["apis", "batch", "v1", "namespaces"] and len(path) >= 6 and path[5] == "jobs":
                namespace = path[4]
                if len(path) == 6 and method == "POST":
                    self._send(*state.create_job(namespace, body or {}))
                    return
                if len(path) in (7, 8) and method == "GET":
                    job = state.jobs.get((namespace, path[6]))
                    if job is None:
                        self._send(404, status_body(404, "NotFound", f'jobs.batch "{path[6]}" not found'))
                    else:
                        self._send(200, job)
                    return
                if len(path) == 7 and method == "DELETE":
                    self._send(*state.delete_job(namespace, path[6]))
                    return
            if path[:3] == ["api", "v1", "namespaces"] and len(path) >= 5:
                namespace, kind = path[3], path[4]
                if kind == "secrets":
                    if len(path) == 5 and method == "POST":
                        self._send(*state.create_secret(namespace, body or {}))
                        return
                    secret = state.secrets.get((namespace, path[5])) if len(path) == 6 else None
                    if len(path) == 6 and secret is None:
                        self._send(404, status_body(404, "NotFound", f'secrets "{path[5]}" not found'))
                        return
                    if len(path) == 6 and method == "GET":
                        self._send(200, secret)
                        return
                    if len(path) == 6 and method == "PATCH":
                        if self.headers.get("Content-Type") != "application/merge-patch+json":
                            self._send(415, status_body(415, "UnsupportedMediaType", "merge patch expected"))
                            return
                        with state.lock:
                            secret["metadata"].update((body or {}).get("metadata") or {})
                        self._send(200, secret)
                        return
                    if len(path) == 6 and method == "DELETE":
                        with state.lock:
                            state.secrets.pop((namespace, path[5]), None)
                        self._send(200, status_body(200, "", "") | {"status": "Success"})
                        return
                if kind == "pods" and len(path) == 5 and method == "GET":
                    self._send(200, state.list_pods(namespace, (query.get("labelSelector") or [""])[0]))
                    return
                if kind == "pods" and len(path) == 7 and path[6] == "log" and method == "GET":
                    status, answer = state.pod_log(namespace, path[5], query)
                    if isinstance(answer, str):
                        self._send(status, answer.encode(), content_type="text/plain")
                    else:
                        self._send(status, answer)
                    return
            self._send(404, status_body(404, "NotFound", "the server could not find the requested resource"))

        def _send(self, status: int, payload, content_type: str = "application/json") -> None:
            data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        do_GET = do_POST = do_PATCH = do_DELETE = _handle  # noqa: N815

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.05}, daemon=True).start()
    state.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield state
    server.shutdown()
    server.server_close()
