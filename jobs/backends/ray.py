"""Ray Jobs: jobs submitted to an organization's Ray cluster through its Jobs API (the
dashboard address, e.g. ``http://head:8265``), with Ray's own ``JobSubmissionClient``.

The ``ray`` package is an optional install on the workers that run Ray jobs
(``pip install "ray[default]"``): it is imported only when a Ray backend is used, and
a worker without it answers with a clear error instead of failing at start-up.

A Ray cluster address is a tenant's URL, so the client is held on a short leash: only
http(s) addresses that pass the outbound URL check, no redirects, a timeout on every
request, only the backend's own headers (never a Ray token the worker may have), and
only ``runtime_env`` settings that cannot read the worker's own files.
"""

from __future__ import annotations

import copy
import functools
import os
import secrets
import shlex

from agentops.destinations import Destination
from agentops.errors import InvalidRequest
from agentops.netguard import UnsafeUrlError, check_outbound_url, check_setting_url, outbound_session
from agentops.redact import redact_secrets
from jobs.backends.base import BackendError, JobNotFound, JobSpec, LogChunk, RemoteStatus
from jobs.hardware import CATALOG

REQUEST_TIMEOUT_SECONDS = 30

# Ray's names for the GPU types it detects on a node (ray.util.accelerators): a node
# with such a GPU carries the resource ``accelerator_type:<name>``.
RAY_ACCELERATOR_TYPES = {"t4": "T4", "l4": "L4", "a10g": "A10G", "a100": "A100", "h100": "H100", "h200": "H200"}

RAY_STATES = {
    "PENDING": "pending",
    "RUNNING": "running",
    "SUCCEEDED": "succeeded",
    "FAILED": "failed",
    "STOPPED": "cancelled",
}
RAY_ENDED_STATES = {"SUCCEEDED", "FAILED", "STOPPED"}

# runtime_env keys a backend may set, and why the others are refused: Ray's client
# reads local paths (a working_dir or py_modules folder, a requirements or conda file)
# on the machine that submits, which here is our worker, and uploads them to the cluster.
RUNTIME_ENV_KEYS = {"pip", "uv", "conda", "env_vars", "working_dir", "py_modules", "image_uri", "config"}

# Environment variables that make Ray's client ignore the address it is given.
RAY_ADDRESS_VARIABLES = ("RAY_API_SERVER_ADDRESS", "RAY_ADDRESS")

# How a secret shows in this backend's errors.
MASK = "***"


class _RayHttpError(RuntimeError):
    """The Jobs API answered with an error status."""

    def __init__(self, status_code: int, text: str):
        super().__init__(f"HTTP {status_code}")
        self.status_code = status_code
        self.text = text


@functools.cache
def _client_class():
    """Ray's JobSubmissionClient, with every request bounded and its headers fixed."""
    try:
        from ray.job_submission import JobSubmissionClient
    except ImportError:
        raise BackendError('the ray package is not installed on this worker (pip install "ray[default]")') from None

    class BoundedJobSubmissionClient(JobSubmissionClient):
        # _do_request and _raise_error are the client's own hooks for every HTTP call;
        # overriding them is the only way to give its requests a timeout. The Ray tests
        # run against a real head node with the pinned Ray, so a rename shows there.
        def __init__(self, address: str, *, headers: dict[str, str]):
            self._agentops_headers = dict(headers)
            super().__init__(address, headers=dict(headers))

        def _do_request(self, method, endpoint, *, data=None, json_data=None, **kwargs):
            # The client adds the worker's own Ray token when token auth is on in the
            # worker's environment: a tenant's cluster must only ever see its own headers.
            self._headers = dict(self._agentops_headers)
            kwargs.setdefault("timeout", REQUEST_TIMEOUT_SECONDS)
            kwargs.setdefault("allow_redirects", False)
            # Ray's own _do_request is requests.request() with these arguments (and a
            # rewording of 401/403 answers, which _guard words itself): here through a
            # session that connects only to an address checked as it connects, so a name
            # rebound to a private address after the check never gets the headers.
            with outbound_session() as session:
                response = session.request(
                    method,
                    self._address + endpoint,
                    cookies=self._cookies,
                    data=data,
                    json=json_data,
                    headers=self._headers,
                    verify=self._verify,
                    **kwargs,
                )
            if response.is_redirect:
                # Not followed (the headers would go to an unchecked address), and not
                # an answer either: the client would read the redirect's body as one.
                raise _RayHttpError(response.status_code, "a redirect, which is not followed: check the address")
            return response

        def _raise_error(self, r):
            raise _RayHttpError(r.status_code, r.text)

    return BoundedJobSubmissionClient


def _check_runtime_env(runtime_env) -> dict:
    """A copy of ``runtime_env`` if it names nothing on the worker's disk, else InvalidRequest."""
    if runtime_env is None:
        return {}
    if not isinstance(runtime_env, dict):
        raise InvalidRequest("runtime_env must be an object")
    unknown = sorted(set(runtime_env) - RUNTIME_ENV_KEYS)
    if unknown:
        raise InvalidRequest(
            f"runtime_env does not support {', '.join(unknown)} (allowed: {', '.join(sorted(RUNTIME_ENV_KEYS))})"
        )
    for key in ("pip", "uv"):
        packages = runtime_env.get(key)
        if isinstance(packages, dict):
            packages = packages.get("packages")
        if key in runtime_env and not (isinstance(packages, list) and all(isinstance(p, str) for p in packages)):
            raise InvalidRequest(f"runtime_env {key} must be a list of packages (a file on the worker is not read)")
    if "conda" in runtime_env and not isinstance(runtime_env["conda"], dict):
        raise InvalidRequest("runtime_env conda must be an environment definition (an object)")
    env_vars = runtime_env.get("env_vars", {})
    if not isinstance(env_vars, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in env_vars.items()
    ):
        raise InvalidRequest("runtime_env env_vars must map names to strings")
    if "working_dir" in runtime_env and not _is_remote_uri(runtime_env["working_dir"]):
        raise InvalidRequest("runtime_env working_dir must be a remote URI (s3://, gs://, https://...)")
    py_modules = runtime_env.get("py_modules", [])
    if not isinstance(py_modules, list) or not all(_is_remote_uri(module) for module in py_modules):
        raise InvalidRequest("runtime_env py_modules must be a list of remote URIs")
    if "image_uri" in runtime_env and not isinstance(runtime_env["image_uri"], str):
        raise InvalidRequest("runtime_env image_uri must be a string")
    if "config" in runtime_env and not isinstance(runtime_env["config"], dict):
        raise InvalidRequest("runtime_env config must be an object")
    return copy.deepcopy(runtime_env)


def _is_remote_uri(value) -> bool:
    return isinstance(value, str) and "://" in value and not value.startswith("file://")


class RayBackend:
    """Jobs on a Ray cluster: one Ray job (its entrypoint is the job's command) per job.

    config: ``address`` (the Jobs API URL), optional ``runtime_env`` (merged into each
    job's), ``use_image_uri`` (run in the job's image via runtime_env ``image_uri``,
    which needs podman on the nodes), ``match_accelerator_type`` (also ask for the GPU
    type, not only a GPU). credentials: optional ``headers`` (e.g. an Authorization
    header for a cluster behind a proxy).
    """

    hardware_map: dict[str, dict] = {
        name: {"num_gpus": hardware.gpus, "accelerator_type": RAY_ACCELERATOR_TYPES.get(name)}
        for name, hardware in CATALOG.items()
    }

    def __init__(self, *, config: dict, credentials: dict):
        self.config = config
        self.address = str(config.get("address", "")).rstrip("/")
        self.headers = dict(credentials.get("headers") or {})
        self._client = None

    credential_label = "the headers (credentials.headers)"

    @staticmethod
    def credential_destination(config: dict) -> Destination:
        """Where the headers go: the Jobs API address."""
        return Destination(addresses={"address": config.get("address")})

    @staticmethod
    def validate(config: dict, credentials: dict) -> tuple[dict, dict]:
        """Cleaned (config, credentials), or InvalidRequest saying what is wrong."""
        address = config.get("address")
        if not isinstance(address, str) or not address.strip():
            raise InvalidRequest("address is required: the Ray Jobs API URL, e.g. http://ray-head:8265")
        address = address.strip().rstrip("/")
        check_setting_url(address, field="address")
        cleaned = {"address": address}
        runtime_env = _check_runtime_env(config.get("runtime_env"))
        if runtime_env:
            cleaned["runtime_env"] = runtime_env
        for flag in ("use_image_uri", "match_accelerator_type"):
            if flag in config:
                if not isinstance(config[flag], bool):
                    raise InvalidRequest(f"{flag} must be true or false")
                cleaned[flag] = config[flag]
        unknown = sorted(set(config) - {"address", "runtime_env", "use_image_uri", "match_accelerator_type"})
        if unknown:
            raise InvalidRequest(f"unknown setting {', '.join(unknown)}")

        headers = credentials.get("headers") or {}
        if not isinstance(headers, dict) or not all(
            isinstance(name, str)
            and isinstance(value, str)
            and name
            and "\n" not in name + value
            and "\r" not in name + value
            for name, value in headers.items()
        ):
            raise InvalidRequest("headers must map header names to single-line strings")
        unknown = sorted(set(credentials) - {"headers"})
        if unknown:
            raise InvalidRequest(f"unknown credential {', '.join(unknown)}")
        return cleaned, ({"headers": dict(headers)} if headers else {})

    def submit(self, spec: JobSpec) -> str:
        hardware = self.hardware_map.get(spec.hardware)
        if hardware is None:
            raise BackendError(f"the Ray backend has no hardware {spec.hardware!r}")
        if not spec.command:
            raise BackendError("the job has no command")
        try:
            runtime_env = _check_runtime_env(self.config.get("runtime_env"))
        except InvalidRequest as exc:
            raise BackendError(exc.message) from None
        runtime_env["env_vars"] = {**runtime_env.get("env_vars", {}), **spec.env}
        if self.config.get("use_image_uri") and spec.image:
            runtime_env["image_uri"] = spec.image
        arguments = {
            "entrypoint": shlex.join(spec.command),
            "submission_id": f"agentops-{spec.job_id}-{secrets.token_hex(4)}",
            "runtime_env": runtime_env,
            "metadata": {
                **{str(key): str(value) for key, value in spec.labels.items()},
                "agentops_job_id": str(spec.job_id),
                "agentops_job_name": spec.name,
            },
            "entrypoint_num_gpus": hardware["num_gpus"],
        }
        if self.config.get("match_accelerator_type") and hardware["accelerator_type"]:
            # A tiny share: the node must have the type, the job does not use it up.
            arguments["entrypoint_resources"] = {f"accelerator_type:{hardware['accelerator_type']}": 0.001}
        # Error messages may echo the runtime_env: never let a secret through.
        return self._call("submit_job", redact=spec.env.values(), **arguments)

    def status(self, external_id: str) -> RemoteStatus:
        info = self._call("get_job_info", external_id)
        ray_status = getattr(info.status, "value", str(info.status))
        state = RAY_STATES.get(ray_status)
        if state is None:
            raise BackendError(f"Ray reported an unknown job status {ray_status!r}")
        ended = ray_status in RAY_ENDED_STATES
        return RemoteStatus(
            state=state,
            exit_code=info.driver_exit_code if ended else None,
            message=info.message or "",
            # Ray's start_time is when it accepted the job, pending included: only an
            # ended job gets it (a running one is timed by the poller from now).
            started_at=info.start_time / 1000 if ended and info.start_time else None,
            ended_at=info.end_time / 1000 if ended and info.end_time else None,
        )

    def logs(self, external_id: str, cursor: dict) -> LogChunk:
        """Ray returns the whole log each time: ``cursor["offset"]`` counts the
        characters already turned into lines. A last line without a newline is held
        back until the job has ended."""
        text = self._call("get_job_logs", external_id) or ""
        offset = min(int(cursor.get("offset", 0)), len(text))
        new = text[offset:]
        complete_end = new.rfind("\n") + 1
        complete, rest = new[:complete_end], new[complete_end:]
        lines = [line.removesuffix("\r") for line in complete.split("\n")[:-1]]
        consumed = complete_end
        if rest:
            info = self._call("get_job_info", external_id)
            if getattr(info.status, "value", str(info.status)) in RAY_ENDED_STATES:
                lines.append(rest.removesuffix("\r"))
                consumed += len(rest)
        return LogChunk(lines=lines, cursor={"offset": offset + consumed})

    def cancel(self, external_id: str) -> None:
        """Stop the job; a job that has ended, or that Ray no longer knows, is left alone."""
        try:
            self._call("stop_job", external_id)
        except JobNotFound:
            return

    def _connect(self):
        if self._client is not None:
            return self._client
        for variable in RAY_ADDRESS_VARIABLES:
            if os.environ.get(variable):
                raise BackendError(
                    f"this worker has {variable} set, which makes the Ray client ignore the backend's address; "
                    "unset it on the workers"
                )
        try:
            check_outbound_url(self.address)
        except UnsafeUrlError as exc:
            raise BackendError(f"the Ray address is not allowed: {exc}") from None
        client_class = _client_class()
        self._client = self._guard(lambda: client_class(self.address, headers=self.headers), redact=())
        return self._client

    def _call(self, method: str, *args, redact=(), **kwargs):
        client = self._connect()
        return self._guard(lambda: getattr(client, method)(*args, **kwargs), redact=redact)

    def _guard(self, call, *, redact):
        """Run one client call, turning what it raises into BackendError / JobNotFound."""
        try:
            return call()
        except _RayHttpError as exc:
            if exc.status_code == 404:
                raise JobNotFound(f"the Ray cluster does not know the job ({exc.text.strip()[:200]})") from None
            if exc.status_code in (401, 403):
                raise BackendError(f"the Ray cluster refused the credentials (HTTP {exc.status_code})") from None
            detail = redact_secrets(exc.text.strip()[:500], redact, MASK)
            raise BackendError(
                f"the Ray cluster answered HTTP {exc.status_code}: {detail}", retryable=exc.status_code >= 500
            ) from None
        except UnsafeUrlError as exc:  # the name now resolves to a private address
            raise BackendError(f"the Ray address is not allowed: {exc}") from None
        except OSError as exc:
            # requests' errors and the builtin ConnectionError the client raises are OSErrors.
            raise BackendError(
                f"cannot reach the Ray cluster at {self.address}: {type(exc).__name__}", retryable=True
            ) from None
        except (RuntimeError, ValueError, TypeError) as exc:
            # The client's own checks (a Ray too old, a runtime_env it refuses).
            detail = redact_secrets(str(exc)[:500], redact, MASK)
            raise BackendError(f"the Ray client refused the call: {detail}") from None
