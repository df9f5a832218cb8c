"""Hugging Face Jobs: the job runs on Hugging Face's machines, through the official
``huggingface_hub`` client (``run_job``, ``inspect_job``, ``fetch_job_logs``,
``fetch_job_metrics``, ``cancel_job``).

Config: ``namespace`` (the user or organization the jobs run under and are billed to;
when left out, the token's own user, asked once per submit) and ``endpoint`` (the Hub's
base URL, ``https://huggingface.co`` unless set: tests point it at a local server).
Credentials: ``token`` (a Hugging Face access token with the jobs permission).

Choices:
- The whole environment goes in the job's ``secrets``, none in its plain ``env``: the
  ``JobSpec`` merges plain variables and decrypted secrets, and Hugging Face shows a
  job's plain environment to anyone who can see the job.
- The external id is ``<namespace>/<job id>``, so a later status, logs or cancel never
  needs to ask who the token belongs to.
- Logs: Hugging Face replays a job's whole log from its first line on every request,
  so the cursor counts the lines already returned and skips them. ``fetch_job_logs`` is
  called with ``follow=False``: it reads what the server has buffered and stops when the
  stream is quiet for 5 s (the library's own bound) or reaches lines written after the
  request began, so a running job's endless stream never holds a worker.
- Hugging Face reports no exit code: a completed job gets 0, a failed one the stage's
  message (and an exit code only when that message states one).
"""

from __future__ import annotations

import re
from collections.abc import Iterable

import httpx2
from huggingface_hub import HfApi
from huggingface_hub.errors import HfHubHTTPError, JobNotFoundError

from agentops.destinations import Destination
from agentops.errors import InvalidRequest
from agentops.hf_client import DEFAULT_ENDPOINT, AddressRefused, RedirectRefused, hub_api
from agentops.netguard import UnsafeUrlError, check_setting_url
from agentops.redact import redact_secrets
from jobs.backends.base import BackendError, JobNotFound, JobSpec, LogChunk, RemoteStatus

STAGES = {
    "SCHEDULING": "pending",
    "RUNNING": "running",
    "COMPLETED": "succeeded",
    "ERROR": "failed",
    "CANCELED": "cancelled",
    # Deleted from the Hub (by someone, or by retention) before we saw it end.
    "DELETED": "cancelled",
}

ENDED_STATES = {"succeeded", "failed", "cancelled"}

NAMESPACE_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,95}$")
ENV_NAME_PATTERN = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
EXIT_CODE_PATTERN = re.compile(r"exit(?:ed with)?[ _-]?(?:code|status)[ :=]*(-?\d+)", re.IGNORECASE)


def _unreachable(exc: httpx2.HTTPError) -> BackendError:
    """The BackendError of a call that got no usable answer."""
    if isinstance(exc, RedirectRefused):
        return BackendError(
            f"Hugging Face answered a redirect ({exc.status}), which is not followed: check the endpoint"
        )
    if isinstance(exc, AddressRefused):
        return BackendError(f"Hugging Face named an address that is refused: {exc}")
    return BackendError(f"Hugging Face could not be reached: {type(exc).__name__}", retryable=True)


class HfJobsBackend:
    """Jobs on Hugging Face (see the module's docstring for the choices)."""

    # Catalog name -> Hugging Face flavor (huggingface_hub.JobHardware). The Hub has no
    # single-H100 flavor, so "h100" is not offered here.
    hardware_map: dict[str, str] = {
        "cpu-basic": "cpu-basic",
        "t4": "t4-small",
        "l4": "l4x1",
        "a10g": "a10g-small",
        "a100": "a100-large",
        "h200": "h200",
    }

    def __init__(self, *, config: dict, credentials: dict):
        self.endpoint = str(config.get("endpoint") or DEFAULT_ENDPOINT).rstrip("/")
        self.namespace = str(config.get("namespace") or "")
        self._token = str(credentials.get("token") or "")

    credential_label = "the token (credentials.token)"

    @staticmethod
    def credential_destination(config: dict) -> Destination:
        """Where the token goes: the Hub's endpoint."""
        return Destination(addresses={"endpoint": config.get("endpoint") or DEFAULT_ENDPOINT})

    @staticmethod
    def validate(config: dict, credentials: dict) -> tuple[dict, dict]:
        """The cleaned settings, or InvalidRequest saying what is wrong."""
        config = dict(config or {})
        credentials = dict(credentials or {})
        unknown = sorted(set(config) - {"namespace", "endpoint"})
        if unknown:
            raise InvalidRequest(f"unknown Hugging Face Jobs settings: {', '.join(unknown)}")
        cleaned: dict = {}
        namespace = config.get("namespace")
        if namespace not in (None, ""):
            if not isinstance(namespace, str) or not NAMESPACE_PATTERN.match(namespace):
                raise InvalidRequest("namespace must be a Hugging Face user or organization name")
            cleaned["namespace"] = namespace
        endpoint = config.get("endpoint")
        if endpoint not in (None, ""):
            if not isinstance(endpoint, str):
                raise InvalidRequest("endpoint must be a URL")
            check_setting_url(endpoint, field="endpoint")
            cleaned["endpoint"] = endpoint.rstrip("/")
        unknown = sorted(set(credentials) - {"token"})
        if unknown:
            raise InvalidRequest(f"unknown Hugging Face Jobs credentials: {', '.join(unknown)}")
        token = credentials.get("token")
        if not isinstance(token, str) or not token.strip():
            raise InvalidRequest("a Hugging Face access token is required (credentials.token)")
        if any(character.isspace() for character in token.strip()):
            raise InvalidRequest("the Hugging Face token must not contain spaces")
        return cleaned, {"token": token.strip()}

    # The four calls of base.Backend.

    def submit(self, spec: JobSpec) -> str:
        flavor = self.hardware_map.get(spec.hardware)
        if flavor is None:
            raise BackendError(
                f"Hugging Face Jobs has no {spec.hardware!r} hardware; "
                f"choose one of {', '.join(sorted(self.hardware_map))}"
            )
        if not spec.image:
            raise BackendError("Hugging Face Jobs needs a container image")
        if not spec.command:
            raise BackendError("the job has no command")
        bad_names = sorted(name for name in spec.env if not ENV_NAME_PATTERN.match(name))
        if bad_names:
            raise BackendError(f"invalid environment variable names: {', '.join(bad_names)}")
        api = self._api()
        secrets = list(spec.env.values())
        try:
            namespace = self.namespace or self._whoami(api)
            info = api.run_job(
                image=spec.image,
                command=list(spec.command),
                secrets=dict(spec.env) or None,
                flavor=flavor,
                timeout=spec.time_limit_seconds or None,
                labels={_label(key): _label(value) for key, value in spec.labels.items() if key != "name"} or None,
                namespace=namespace,
            )
        except HfHubHTTPError as exc:
            raise self._error("submitting the job", exc, secrets) from None
        except httpx2.HTTPError as exc:
            raise _unreachable(exc) from None
        return f"{namespace}/{info.id}"

    def status(self, external_id: str) -> RemoteStatus:
        api = self._api()
        namespace, job_id = self._split(external_id, api)
        try:
            info = api.inspect_job(job_id=job_id, namespace=namespace)
        except JobNotFoundError:
            raise JobNotFound(f"Hugging Face does not know the job {external_id}") from None
        except HfHubHTTPError as exc:
            raise self._error("reading the job", exc) from None
        except httpx2.HTTPError as exc:
            raise _unreachable(exc) from None
        stage = _stage(info)
        message = info.status.message or ""
        state = STAGES.get(stage)
        if state is None:
            # A stage newer than this code: keep watching, say what it is.
            state, message = "pending", f"Hugging Face stage {stage}" + (f": {message}" if message else "")
        exit_code = None
        if state == "succeeded":
            exit_code = 0
        elif state == "failed" and (match := EXIT_CODE_PATTERN.search(message)):
            exit_code = int(match.group(1))
        return RemoteStatus(
            state=state,
            exit_code=exit_code,
            message=message,
            started_at=info.started_at.timestamp() if info.started_at else None,
            ended_at=info.finished_at.timestamp() if info.finished_at else None,
            gpu_samples=self._gpu_samples(api, namespace, job_id) if state == "running" else [],
        )

    def logs(self, external_id: str, cursor: dict) -> LogChunk:
        api = self._api()
        namespace, job_id = self._split(external_id, api)
        seen = int((cursor or {}).get("lines") or 0)
        count = 0
        lines: list[str] = []
        try:
            for entry in api.fetch_job_logs(job_id=job_id, namespace=namespace, follow=False):
                count += 1
                if count > seen:
                    lines.extend(str(entry).splitlines() or [""])
        except JobNotFoundError:
            raise JobNotFound(f"Hugging Face does not know the job {external_id}") from None
        except HfHubHTTPError as exc:
            raise self._error("reading the job's logs", exc) from None
        except httpx2.HTTPError as exc:
            # The stream broke half-way: keep what arrived, the rest comes next time.
            if count <= seen:
                raise _unreachable(exc) from None
        return LogChunk(lines=lines, cursor={"lines": max(seen, count)})

    def cancel(self, external_id: str) -> None:
        api = self._api()
        namespace, job_id = self._split(external_id, api)
        try:
            api.cancel_job(job_id=job_id, namespace=namespace)
        except JobNotFoundError:
            return  # Gone already: nothing left to stop.
        except HfHubHTTPError as exc:
            # Cancelling a job that already ended may be refused: that is not an error.
            try:
                stage = _stage(api.inspect_job(job_id=job_id, namespace=namespace))
            except (HfHubHTTPError, httpx2.HTTPError):
                stage = ""
            if STAGES.get(stage) in ENDED_STATES:
                return
            raise self._error("cancelling the job", exc) from None
        except httpx2.HTTPError as exc:
            raise _unreachable(exc) from None

    # Helpers.

    def _api(self) -> HfApi:
        if not self._token:
            # Never let huggingface_hub fall back to a token saved on the worker.
            raise BackendError("the Hugging Face Jobs backend has no token")
        try:
            return hub_api(self.endpoint, self._token)
        except UnsafeUrlError as exc:
            raise BackendError(f"the Hugging Face endpoint is not allowed: {exc}") from None

    def _whoami(self, api: HfApi) -> str:
        return api.whoami()["name"]

    def _split(self, external_id: str, api: HfApi) -> tuple[str, str]:
        namespace, _, job_id = external_id.rpartition("/")
        if not job_id:
            raise JobNotFound(f"{external_id!r} is not a Hugging Face job id")
        if not namespace:
            try:
                namespace = self.namespace or self._whoami(api)
            except RedirectRefused as exc:
                raise _unreachable(exc) from None
            except (HfHubHTTPError, httpx2.HTTPError) as exc:
                raise BackendError(f"could not tell the token's user: {type(exc).__name__}", retryable=True) from None
        return namespace, job_id

    def _gpu_samples(self, api: HfApi, namespace: str, job_id: str) -> list[dict]:
        """The job's current GPU use; best effort (metrics may not exist yet)."""
        try:
            for sample in api.fetch_job_metrics(job_id=job_id, namespace=namespace, follow=False):
                return [
                    {
                        "gpu_index": index,
                        "utilization_percent": gpu.get("utilization"),
                        "memory_used_mib": _mib(gpu.get("memory_used_bytes")),
                        "memory_total_mib": _mib(gpu.get("memory_total_bytes")),
                    }
                    for index, (_, gpu) in enumerate(sorted((sample.get("gpus") or {}).items()))
                    if isinstance(gpu, dict)
                ]
        except (HfHubHTTPError, httpx2.HTTPError, ValueError, KeyError, AttributeError):
            pass
        return []

    def _error(self, doing: str, exc: HfHubHTTPError, secrets: Iterable[str] = ()) -> BackendError:
        status = exc.response.status_code if exc.response is not None else None
        detail = (exc.server_message or "").strip().splitlines()
        detail_text = redact_secrets(detail[0][:300], [*secrets, self._token]) if detail else ""
        if status == 401:
            message = "Hugging Face refused the token"
        elif status == 403:
            message = "the token may not run jobs in this namespace"
        else:
            message = f"Hugging Face answered {status} {doing}"
        if detail_text:
            message += f": {detail_text}"
        return BackendError(message, retryable=status in (429, 500, 502, 503, 504))


def _stage(info) -> str:
    # JobInfo keeps the server's string; JobStage members compare equal to it.
    return str(getattr(info.status.stage, "value", info.status.stage))


def _label(value) -> str:
    return re.sub(r"[^A-Za-z0-9._-]", "-", str(value))[:63]


def _mib(value) -> float | None:
    return round(value / 1048576, 1) if isinstance(value, int | float) else None
