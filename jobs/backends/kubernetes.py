"""Kubernetes: the job runs as a ``batch/v1`` Job on the organization's cluster, through
the official ``kubernetes`` client, built from the backend's settings (never from a
kubeconfig on the worker).

Config: ``host`` (the API server's URL, required), ``namespace`` ("default"),
``verify_ssl`` (true), ``service_account`` (the pods' service account), ``node_selector``
(labels every job's node must have), ``gpu_label`` ("nvidia.com/gpu.product") and
``gpu_products`` (catalog hardware name -> that label's value, e.g.
``{"a100": "NVIDIA-A100-SXM4-80GB"}``). Credentials: ``token`` (a bearer token, e.g. a
service account's) and ``ca_cert`` (the API server's CA certificate, PEM, optional).

Choices:
- One Job per job, named ``agentops-job-<id>-<random>``, labelled ``agentops/job=<id>``:
  ``backoffLimit`` 0 (a failed job is not run again behind the platform's back),
  ``activeDeadlineSeconds`` = the time limit, ``ttlSecondsAfterFinished`` 1 hour, one
  container called ``job``, ``restartPolicy: Never``.
- The environment (plain variables and secrets alike, as the JobSpec merges them) goes in
  a Secret named like the Job and reaches the container through ``envFrom``: it never
  appears in the Job's spec, which anyone who may read Jobs can see. The Secret is
  created first, then owned by the Job (``ownerReferences``), so Kubernetes deletes it
  with the Job (cancel, or the TTL); cancel also deletes it directly.
- Resources: ``limits`` (and so equal ``requests``) from the hardware catalog: CPUs,
  memory, and ``nvidia.com/gpu`` for a GPU type. GPU pods tolerate the usual
  ``nvidia.com/gpu`` taint. With ``gpu_products`` set, a GPU type is pinned to nodes whose
  ``gpu_label`` has that value, and a type missing from it is refused; without it, any GPU
  node will do.
- Status: the Job's ``Complete`` / ``Failed`` conditions decide the end; before that the
  pod decides (running once its container runs, pending while it is scheduled or pulled).
  The exit code and the times come from the pod's container state.
- Logs: read with ``timestamps=true``; the cursor keeps the pod, the last timestamp
  returned and how many lines carried it, so a line is never returned twice, even after
  the kubelet rotates the log file (a line count would drift then). Only whole lines are
  returned until the pod has ended.
- Cancel deletes the Job with ``propagationPolicy: Background`` (its pod is stopped) and
  the Secret; both 404s are fine.
"""

from __future__ import annotations

import json
import logging
import re
import secrets as random
import string
from collections.abc import Iterable
from datetime import datetime

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as Urllib3Error
from urllib3.util import Retry

from agentops.destinations import Destination
from agentops.errors import InvalidRequest
from agentops.netguard import UnsafeUrlError, check_connections, check_outbound_url, check_setting_url
from agentops.redact import redact_secrets
from jobs.backends.base import BackendError, JobNotFound, JobSpec, LogChunk, RemoteStatus
from jobs.hardware import CATALOG

logger = logging.getLogger(__name__)

REQUEST_TIMEOUT_SECONDS = 30
TTL_AFTER_FINISHED_SECONDS = 3600
CONTAINER = "job"
DEFAULT_GPU_LABEL = "nvidia.com/gpu.product"

DNS_LABEL = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
LABEL_KEY = re.compile(r"^([a-z0-9]([-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?$")
ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
CONFIG_KEYS = {"host", "namespace", "verify_ssl", "service_account", "node_selector", "gpu_label", "gpu_products"}


def _resources(name: str) -> dict[str, str]:
    hardware = CATALOG[name]
    limits = {"cpu": str(hardware.cpus), "memory": f"{hardware.memory_gib}Gi"}
    if hardware.gpus:
        limits["nvidia.com/gpu"] = str(hardware.gpus)
    return limits


def _timestamp_key(text: str) -> tuple[float, int] | None:
    """A sortable key of a kubelet RFC 3339 timestamp (nanoseconds kept, trailing zeros
    trimmed, so the text itself does not sort)."""
    try:
        text = text.strip()
        if text.endswith("Z"):
            text = text[:-1] + "+00:00"
        main, offset = text[:19], text[19:]
        fraction = ""
        if offset.startswith("."):
            digits = re.match(r"\.(\d+)", offset)
            fraction = digits.group(1)
            offset = offset[digits.end() :]
        seconds = datetime.fromisoformat(main + (offset or "+00:00")).timestamp()
        return seconds, int((fraction + "000000000")[:9])
    except (ValueError, AttributeError):
        return None


def _epoch(value) -> float | None:
    return value.timestamp() if isinstance(value, datetime) else None


class KubernetesBackend:
    """Jobs on a Kubernetes cluster (see the module's docstring for the choices)."""

    # Every catalog machine type, as container limits; a GPU type also needs nodes that
    # have it (see gpu_products).
    hardware_map: dict[str, dict[str, str]] = {name: _resources(name) for name in CATALOG}

    def __init__(self, *, config: dict, credentials: dict):
        self.host = str(config.get("host") or "").rstrip("/")
        self.namespace = str(config.get("namespace") or "default")
        self.verify_ssl = bool(config.get("verify_ssl", True))
        self.service_account = str(config.get("service_account") or "")
        self.node_selector = dict(config.get("node_selector") or {})
        self.gpu_label = str(config.get("gpu_label") or DEFAULT_GPU_LABEL)
        self.gpu_products = config.get("gpu_products")
        if self.gpu_products is not None:
            # The cluster was told which GPUs it has: it offers those and the CPU types.
            self.hardware_map = {
                name: resources
                for name, resources in type(self).hardware_map.items()
                if "nvidia.com/gpu" not in resources or self.gpu_products.get(name)
            }
        self._token = str(credentials.get("token") or "")
        self._ca_cert = str(credentials.get("ca_cert") or "")

    credential_label = "the token (credentials.token)"

    @staticmethod
    def credential_destination(config: dict) -> Destination:
        """Where the token goes: the API server, and whether its certificate is checked."""
        return Destination(
            addresses={"host": config.get("host")}, checks={"verify_ssl": bool(config.get("verify_ssl", True))}
        )

    @staticmethod
    def validate(config: dict, credentials: dict) -> tuple[dict, dict]:
        """The cleaned settings, or InvalidRequest saying what is wrong."""
        config = dict(config or {})
        credentials = dict(credentials or {})
        unknown = sorted(set(config) - CONFIG_KEYS)
        if unknown:
            raise InvalidRequest(f"unknown Kubernetes settings: {', '.join(unknown)}")
        host = config.get("host")
        if not isinstance(host, str) or not host:
            raise InvalidRequest("host (the Kubernetes API server's URL) is required")
        check_setting_url(host, field="host")
        cleaned: dict = {"host": host.rstrip("/")}
        namespace = config.get("namespace") or "default"
        if not isinstance(namespace, str) or len(namespace) > 63 or not DNS_LABEL.match(namespace):
            raise InvalidRequest("namespace must be a Kubernetes namespace name (lowercase letters, digits, '-')")
        cleaned["namespace"] = namespace
        verify_ssl = config.get("verify_ssl", True)
        if not isinstance(verify_ssl, bool):
            raise InvalidRequest("verify_ssl must be true or false")
        cleaned["verify_ssl"] = verify_ssl
        service_account = config.get("service_account")
        if service_account not in (None, ""):
            if (
                not isinstance(service_account, str)
                or len(service_account) > 253
                or not DNS_LABEL.match(service_account.replace(".", "-"))
            ):
                raise InvalidRequest("service_account must be a service account's name")
            cleaned["service_account"] = service_account
        node_selector = config.get("node_selector")
        if node_selector not in (None, {}):
            cleaned["node_selector"] = _labels_or_error(node_selector, "node_selector")
        gpu_label = config.get("gpu_label")
        if gpu_label not in (None, ""):
            if not isinstance(gpu_label, str) or not LABEL_KEY.match(gpu_label):
                raise InvalidRequest("gpu_label must be a node label name")
            cleaned["gpu_label"] = gpu_label
        gpu_products = config.get("gpu_products")
        if gpu_products is not None:
            products = _labels_or_error(gpu_products, "gpu_products", keys_are_labels=False)
            not_gpus = sorted(name for name in products if name not in CATALOG or not CATALOG[name].gpus)
            if not_gpus:
                raise InvalidRequest(f"gpu_products: not GPU types of the catalog: {', '.join(not_gpus)}")
            cleaned["gpu_products"] = products
        unknown = sorted(set(credentials) - {"token", "ca_cert"})
        if unknown:
            raise InvalidRequest(f"unknown Kubernetes credentials: {', '.join(unknown)}")
        token = credentials.get("token")
        if not isinstance(token, str) or not token.strip():
            raise InvalidRequest("a bearer token is required to call the API server (credentials.token)")
        if any(character.isspace() for character in token.strip()):
            raise InvalidRequest("the bearer token must not contain spaces")
        cleaned_credentials = {"token": token.strip()}
        ca_cert = credentials.get("ca_cert")
        if ca_cert not in (None, ""):
            if not isinstance(ca_cert, str) or "-----BEGIN CERTIFICATE-----" not in ca_cert:
                raise InvalidRequest("ca_cert must be a PEM certificate")
            cleaned_credentials["ca_cert"] = ca_cert
        return cleaned, cleaned_credentials

    # The four calls of base.Backend.

    def submit(self, spec: JobSpec) -> str:
        resources = self.hardware_map.get(spec.hardware)
        if resources is None:
            raise BackendError(
                f"this cluster does not offer {spec.hardware!r}; it offers: {', '.join(self.hardware_map)}"
            )
        node_selector = dict(self.node_selector)
        is_gpu = "nvidia.com/gpu" in resources
        if is_gpu and self.gpu_products is not None:
            node_selector[self.gpu_label] = self.gpu_products[spec.hardware]
        if not spec.image:
            raise BackendError("Kubernetes jobs need a container image")
        if not spec.command:
            raise BackendError("the job has no command")
        bad_names = sorted(name for name in spec.env if not ENV_NAME.match(name))
        if bad_names:
            raise BackendError(f"invalid environment variable names: {', '.join(bad_names)}")

        suffix = "".join(random.choice(string.ascii_lowercase + string.digits) for _ in range(5))
        name = f"agentops-job-{spec.job_id}-{suffix}"[:63]
        labels = {"agentops/job": str(spec.job_id)}
        for key, value in spec.labels.items():
            # "agentops-project" -> "agentops/project", beside "agentops/job".
            key = re.sub(r"^agentops-", "agentops/", str(key).lower())
            value = re.sub(r"[^A-Za-z0-9._-]", "-", str(value))[:63].strip("-_.")
            if LABEL_KEY.match(key) and LABEL_VALUE.match(value):
                labels.setdefault(key, value)
        secret_values = list(spec.env.values())

        with self._client() as api_client:
            core, batch = k8s.CoreV1Api(api_client), k8s.BatchV1Api(api_client)
            if spec.env:
                secret = k8s.V1Secret(
                    api_version="v1",
                    kind="Secret",
                    metadata=k8s.V1ObjectMeta(name=name, labels=labels),
                    type="Opaque",
                    string_data=dict(spec.env),
                )
                self._call(
                    "creating the job's secret", secret_values, core.create_namespaced_secret, self.namespace, secret
                )
            job = k8s.V1Job(
                api_version="batch/v1",
                kind="Job",
                metadata=k8s.V1ObjectMeta(name=name, labels=labels),
                spec=k8s.V1JobSpec(
                    backoff_limit=0,
                    active_deadline_seconds=max(1, int(spec.time_limit_seconds)) if spec.time_limit_seconds else None,
                    ttl_seconds_after_finished=TTL_AFTER_FINISHED_SECONDS,
                    template=k8s.V1PodTemplateSpec(
                        metadata=k8s.V1ObjectMeta(labels=labels),
                        spec=k8s.V1PodSpec(
                            restart_policy="Never",
                            service_account_name=self.service_account or None,
                            node_selector=node_selector or None,
                            tolerations=[k8s.V1Toleration(key="nvidia.com/gpu", operator="Exists", effect="NoSchedule")]
                            if is_gpu
                            else None,
                            containers=[
                                k8s.V1Container(
                                    name=CONTAINER,
                                    image=spec.image,
                                    command=list(spec.command),
                                    env_from=[k8s.V1EnvFromSource(secret_ref=k8s.V1SecretEnvSource(name=name))]
                                    if spec.env
                                    else None,
                                    resources=k8s.V1ResourceRequirements(limits=dict(resources)),
                                )
                            ],
                        ),
                    ),
                ),
            )
            try:
                created = self._call(
                    "creating the job", secret_values, batch.create_namespaced_job, self.namespace, job
                )
            except BackendError:
                if spec.env:
                    self._delete(core.delete_namespaced_secret, name)
                raise
            if spec.env:
                self._own_secret(core, name, created)
        return f"{self.namespace}/{name}"

    def status(self, external_id: str) -> RemoteStatus:
        namespace, name = self._split(external_id)
        with self._client() as api_client:
            batch, core = k8s.BatchV1Api(api_client), k8s.CoreV1Api(api_client)
            job = self._call(
                "reading the job", (), batch.read_namespaced_job_status, name, namespace, not_found=external_id
            )
            pod = self._pod(core, namespace, name)
        job_status = job.status or k8s.V1JobStatus()
        container = _container_status(pod)
        terminated = container.state.terminated if container and container.state else None
        running = container.state.running if container and container.state else None
        waiting = container.state.waiting if container and container.state else None
        started_at = _epoch(terminated.started_at if terminated else running.started_at if running else None)
        if job.metadata and job.metadata.deletion_timestamp:
            return RemoteStatus(state="cancelled", message="the job is being deleted", started_at=started_at)
        conditions = {
            condition.type: condition for condition in job_status.conditions or [] if condition.status == "True"
        }
        exit_code = terminated.exit_code if terminated else None
        ended_at = _epoch(terminated.finished_at) if terminated else None
        if "Complete" in conditions:
            return RemoteStatus(
                state="succeeded",
                exit_code=exit_code if exit_code is not None else 0,
                started_at=started_at or _epoch(job_status.start_time),
                ended_at=ended_at or _epoch(job_status.completion_time),
            )
        if "Failed" in conditions:
            condition = conditions["Failed"]
            return RemoteStatus(
                state="failed",
                exit_code=exit_code,
                message=_failure_message(condition, terminated),
                started_at=started_at or _epoch(job_status.start_time),
                ended_at=ended_at or _epoch(condition.last_transition_time),
            )
        if running or (pod and pod.status and pod.status.phase == "Running"):
            return RemoteStatus(state="running", started_at=started_at or _epoch(job_status.start_time))
        message = ""
        if waiting and waiting.reason:
            message = waiting.reason + (f": {waiting.message}" if waiting.message else "")
        elif pod and pod.status:
            for condition in pod.status.conditions or []:
                if condition.type == "PodScheduled" and condition.status == "False":
                    message = " ".join(part for part in (condition.reason, condition.message) if part)
        return RemoteStatus(state="pending", message=message)

    def logs(self, external_id: str, cursor: dict) -> LogChunk:
        namespace, name = self._split(external_id)
        cursor = dict(cursor or {})
        with self._client() as api_client:
            core = k8s.CoreV1Api(api_client)
            pod = self._pod(core, namespace, name)
            if pod is None or not pod.metadata or not pod.metadata.name:
                return LogChunk(lines=[], cursor=cursor)
            pod_name = pod.metadata.name
            try:
                response = core.read_namespaced_pod_log(
                    pod_name,
                    namespace,
                    container=CONTAINER,
                    timestamps=True,
                    # Read raw: the client would otherwise try to parse a log that looks like JSON.
                    _preload_content=False,
                    _request_timeout=REQUEST_TIMEOUT_SECONDS,
                )
                data = response.data
                response.release_conn()
            except ApiException as exc:
                if exc.status in (400, 404):
                    # Not started yet (container waiting) or already removed: nothing to read.
                    return LogChunk(lines=[], cursor=cursor)
                raise self._error("reading the job's logs", exc) from None
            except UnsafeUrlError as exc:
                raise _refused(exc) from None
            except Urllib3Error as exc:
                raise BackendError(
                    f"the Kubernetes API server could not be reached: {type(exc).__name__}", retryable=True
                ) from None
        ended = bool(pod.status and pod.status.phase in ("Succeeded", "Failed"))
        return _new_lines(data.decode("utf-8", errors="replace"), cursor, pod_name, ended)

    def cancel(self, external_id: str) -> None:
        namespace, name = self._split(external_id)
        with self._client() as api_client:
            batch, core = k8s.BatchV1Api(api_client), k8s.CoreV1Api(api_client)
            self._delete(batch.delete_namespaced_job, name, namespace, strict=True)
            self._delete(core.delete_namespaced_secret, name, namespace)

    # Helpers.

    def _client(self) -> k8s.ApiClient:
        if not self._token:
            raise BackendError("the Kubernetes backend has no token")
        if not self.host:
            raise BackendError("the Kubernetes backend has no API server URL")
        try:
            check_outbound_url(self.host)
        except UnsafeUrlError as exc:
            raise _refused(exc) from None
        configuration = k8s.Configuration(host=self.host)
        configuration.api_key = {"BearerToken": self._token}
        configuration.api_key_prefix = {"BearerToken": "Bearer"}
        configuration.verify_ssl = self.verify_ssl
        if self._ca_cert:
            configuration.ca_cert_data = self._ca_cert
        # One retry of a failed connection, and no redirects: every request carries the
        # token (and creating the Secret the job's environment), and urllib3 would follow
        # a redirect to an address the outbound URL check never saw. The redirect comes
        # back as the answer, an ApiException.
        configuration.retries = Retry(total=1, redirect=0, raise_on_redirect=False)
        api_client = k8s.ApiClient(configuration)
        # And each connection checks the address it connects to: the name may point
        # elsewhere by then (DNS rebinding); a refused address raises UnsafeUrlError.
        check_connections(api_client.rest_client.pool_manager)
        return api_client

    def _split(self, external_id: str) -> tuple[str, str]:
        namespace, _, name = external_id.rpartition("/")
        if not name:
            raise JobNotFound(f"{external_id!r} is not a Kubernetes job id")
        return namespace or self.namespace, name

    def _call(self, doing: str, secret_values: Iterable[str], method, *args, not_found: str | None = None, **kwargs):
        try:
            return method(*args, **kwargs, _request_timeout=REQUEST_TIMEOUT_SECONDS)
        except ApiException as exc:
            if exc.status == 404 and not_found:
                raise JobNotFound(f"Kubernetes does not know the job {not_found}") from None
            raise self._error(doing, exc, secret_values) from None
        except UnsafeUrlError as exc:
            raise _refused(exc) from None
        except Urllib3Error as exc:
            raise BackendError(
                f"the Kubernetes API server could not be reached: {type(exc).__name__}", retryable=True
            ) from None

    def _delete(self, method, name: str, namespace: str | None = None, *, strict: bool = False) -> None:
        """Delete an object; a 404 is fine. Only ``strict`` deletes report other errors."""
        try:
            response = method(
                name,
                namespace or self.namespace,
                body=k8s.V1DeleteOptions(propagation_policy="Background"),
                # The answer (the object or a Status) is not needed; don't parse it.
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_SECONDS,
            )
            response.release_conn()
        except ApiException as exc:
            if exc.status == 404:
                return
            if strict:
                raise self._error("deleting the job", exc) from None
            logger.warning("kubernetes: could not delete %s: HTTP %s", name, exc.status)
        except UnsafeUrlError as exc:
            if strict:
                raise _refused(exc) from None
            logger.warning("kubernetes: could not delete %s: %s", name, exc)
        except Urllib3Error as exc:
            if strict:
                raise BackendError(
                    f"the Kubernetes API server could not be reached: {type(exc).__name__}", retryable=True
                ) from None
            logger.warning("kubernetes: could not delete %s: %s", name, type(exc).__name__)

    def _own_secret(self, core: k8s.CoreV1Api, name: str, job: k8s.V1Job) -> None:
        """Make the Job the Secret's owner, so Kubernetes deletes the Secret with it."""
        uid = job.metadata.uid if job.metadata else None
        if not uid:
            return
        patch = {"metadata": {"ownerReferences": [{"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": uid}]}}
        try:
            response = core.patch_namespaced_secret(
                name,
                self.namespace,
                patch,
                _content_type="application/merge-patch+json",
                _preload_content=False,
                _request_timeout=REQUEST_TIMEOUT_SECONDS,
            )
            response.release_conn()
        except (ApiException, Urllib3Error, UnsafeUrlError) as exc:
            # The job runs all the same; only the TTL clean-up would leave the Secret behind.
            logger.warning("kubernetes: could not make job %s own its secret: %s", name, type(exc).__name__)

    def _pod(self, core: k8s.CoreV1Api, namespace: str, name: str):
        """The job's newest pod, or None."""
        pods = self._call(
            "listing the job's pods", (), core.list_namespaced_pod, namespace, label_selector=f"job-name={name}"
        )
        items = list(pods.items or [])
        if not items:
            return None
        return max(
            items,
            key=lambda pod: (
                _epoch(pod.metadata.creation_timestamp) or 0.0 if pod.metadata else 0.0,
                pod.metadata.name or "" if pod.metadata else "",
            ),
        )

    def _error(self, doing: str, exc: ApiException, secret_values: Iterable[str] = ()) -> BackendError:
        detail = ""
        try:
            body = json.loads(exc.body or "{}")
            detail = str(body.get("message") or "") if isinstance(body, dict) else ""
        except (ValueError, TypeError):
            detail = ""
        detail = redact_secrets(detail[:300], [*secret_values, self._token])
        if exc.status == 401:
            message = "the Kubernetes API server refused the token"
        elif exc.status == 403:
            message = f"the token is not allowed to do this ({doing})"
        elif exc.status and 300 <= exc.status < 400:
            message = f"Kubernetes answered a redirect ({exc.status}) {doing}, which is not followed (check the host)"
        else:
            message = f"Kubernetes answered {exc.status} {doing}"
        if detail:
            message += f": {detail}"
        return BackendError(message, retryable=exc.status in (429, 500, 502, 503, 504))


def _refused(exc: UnsafeUrlError) -> BackendError:
    return BackendError(f"the Kubernetes API server URL is not allowed: {exc}")


def _labels_or_error(value, field: str, *, keys_are_labels: bool = True) -> dict[str, str]:
    if not isinstance(value, dict):
        raise InvalidRequest(f"{field} must be an object of label names to values")
    cleaned = {}
    for key, item in value.items():
        if not isinstance(key, str) or not isinstance(item, str):
            raise InvalidRequest(f"{field}: names and values must be strings")
        if keys_are_labels and not LABEL_KEY.match(key):
            raise InvalidRequest(f"{field}: {key!r} is not a label name")
        if len(item) > 63 or not LABEL_VALUE.match(item):
            raise InvalidRequest(f"{field}: {item!r} is not a label value")
        cleaned[key] = item
    return cleaned


def _failure_message(condition, terminated) -> str:
    """Why the Job failed: the container's exit when it ran out its only try, else the
    Job's own reason (e.g. DeadlineExceeded at the time limit)."""
    if condition.reason == "BackoffLimitExceeded" and terminated is not None:
        message = f"the container exited with code {terminated.exit_code}"
        if terminated.reason and terminated.reason != "Error":
            message += f" ({terminated.reason})"
        if terminated.message:
            message += f": {terminated.message}"
        return message
    return ": ".join(part for part in (condition.reason, condition.message) if part) or "the job failed"


def _container_status(pod):
    if pod is None or not pod.status:
        return None
    for status in pod.status.container_statuses or []:
        if status.name == CONTAINER:
            return status
    return None


def _new_lines(text: str, cursor: dict, pod_name: str, ended: bool) -> LogChunk:
    """The lines of ``text`` (``<timestamp> <line>`` per line) after ``cursor``."""
    if cursor.get("pod") != pod_name:
        cursor = {}
    after = _timestamp_key(cursor["after"]) if cursor.get("after") else None
    already_at_after = int(cursor.get("same") or 0)
    rows = text.split("\n")
    if rows and rows[-1] == "":
        rows.pop()
    elif rows and not ended:
        rows.pop()  # A line still being written: it comes whole next time.
    lines: list[str] = []
    last_text, last_key, same = cursor.get("after"), after, already_at_after
    seen_at_after = 0
    for row in rows:
        stamp, _, line = row.partition(" ")
        key = _timestamp_key(stamp)
        if key is None:
            # No timestamp (not expected with timestamps=true): the whole row is the line,
            # at the time of the row before it.
            stamp, key, line = last_text, last_key, row
        if after is not None and key is not None:
            if key < after:
                continue
            if key == after:
                seen_at_after += 1
                if seen_at_after <= already_at_after:
                    continue
        lines.append(line)
        if key is not None and key == last_key:
            same += 1
        else:
            last_text, last_key, same = stamp, key, 1
    new_cursor = {"pod": pod_name, "after": last_text, "same": same} if last_text else {"pod": pod_name}
    return LogChunk(lines=lines, cursor=new_cursor)
