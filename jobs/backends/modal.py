"""Modal: each job is a Modal Sandbox (a container running the job's command in its
image, on the GPU its hardware names), created with the organization's own Modal token.

The ``modal`` package is an optional install on the workers that run Modal jobs
(``pip install modal``): it is imported only when a Modal backend is used.

Modal's SDK talks gRPC to Modal's control plane, which cannot be run locally, so this
backend is tested at the boundary of the SDK calls it makes (tests/jobs/
test_backend_modal.py), against the SDK version pinned in requirements-dev.txt.
"""

from __future__ import annotations

import contextlib
import re
from datetime import UTC, datetime, timedelta

from agentops.destinations import Destination
from agentops.errors import InvalidRequest
from agentops.redact import redact_secrets
from jobs.backends.base import BackendError, JobNotFound, JobSpec, LogChunk, RemoteStatus

DEFAULT_APP_NAME = "agentops-jobs"
APP_NAME_PATTERN = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,63}$")
PYTHON_VERSION_PATTERN = re.compile(r"^3\.\d{1,2}$")

# How far back the first read of a sandbox's logs looks (Modal fetches a time range,
# and a job's first read comes within a poll or two of its start).
FIRST_LOG_LOOKBACK = timedelta(days=7)
# Log entries read per call at most: the rest comes on the next poll.
MAX_LOG_ENTRIES_PER_READ = 5000

# How a secret shows in this backend's errors.
MASK = "***"


def _modal():
    try:
        import modal
        import modal.exception
    except ImportError:
        raise BackendError("the modal package is not installed on this worker (pip install modal)") from None
    return modal


class ModalBackend:
    """Jobs as Modal Sandboxes in one Modal app of the organization's workspace.

    config: optional ``app_name`` (default "agentops-jobs", created when missing),
    ``environment`` (a Modal environment name), ``add_python`` (e.g. "3.11", for an image
    without Python). credentials: ``token_id`` and ``token_secret`` (a Modal API token).
    """

    # Modal's GPU names (the ``gpu=`` argument); None: a CPU-only container.
    hardware_map: dict[str, str | None] = {
        "cpu-basic": None,
        "t4": "T4",
        "l4": "L4",
        "a10g": "A10G",
        "a100": "A100-80GB",
        "h100": "H100",
        "h200": "H200",
    }

    def __init__(self, *, config: dict, credentials: dict):
        self.config = config
        self.app_name = config.get("app_name") or DEFAULT_APP_NAME
        self.environment = config.get("environment") or None
        self.token_id = credentials.get("token_id", "")
        self.token_secret = credentials.get("token_secret", "")

    credential_label = "the token (credentials.token_id and token_secret)"

    @staticmethod
    def credential_destination(config: dict) -> Destination:
        """Modal's servers are fixed by its client: no setting moves the token."""
        return Destination()

    @staticmethod
    def validate(config: dict, credentials: dict) -> tuple[dict, dict]:
        """Cleaned (config, credentials), or InvalidRequest saying what is wrong."""
        cleaned: dict = {}
        app_name = config.get("app_name")
        if app_name is not None:
            if not isinstance(app_name, str) or not APP_NAME_PATTERN.match(app_name):
                raise InvalidRequest("app_name must be 1-64 letters, digits, '.', '-' or '_'")
            cleaned["app_name"] = app_name
        environment = config.get("environment")
        if environment is not None:
            if not isinstance(environment, str) or not APP_NAME_PATTERN.match(environment):
                raise InvalidRequest("environment must be a Modal environment name")
            cleaned["environment"] = environment
        add_python = config.get("add_python")
        if add_python is not None:
            if not isinstance(add_python, str) or not PYTHON_VERSION_PATTERN.match(add_python):
                raise InvalidRequest('add_python must be a Python version such as "3.11"')
            cleaned["add_python"] = add_python
        unknown = sorted(set(config) - {"app_name", "environment", "add_python"})
        if unknown:
            raise InvalidRequest(f"unknown setting {', '.join(unknown)}")

        for name in ("token_id", "token_secret"):
            value = credentials.get(name)
            if not isinstance(value, str) or not value.strip():
                raise InvalidRequest(f"{name} is required (create a token with `modal token new`)")
        unknown = sorted(set(credentials) - {"token_id", "token_secret"})
        if unknown:
            raise InvalidRequest(f"unknown credential {', '.join(unknown)}")
        return cleaned, {
            "token_id": credentials["token_id"].strip(),
            "token_secret": credentials["token_secret"].strip(),
        }

    def submit(self, spec: JobSpec) -> str:
        if spec.hardware not in self.hardware_map:
            raise BackendError(f"the Modal backend has no hardware {spec.hardware!r}")
        if not spec.command:
            raise BackendError("the job has no command")
        modal = _modal()
        with self._client(redact=spec.env.values()) as client:
            app = modal.App.lookup(
                self.app_name, create_if_missing=True, client=client, environment_name=self.environment
            )
            image = None  # Modal's default image
            if spec.image:
                extra = {"add_python": self.config["add_python"]} if self.config.get("add_python") else {}
                image = modal.Image.from_registry(spec.image, **extra)
            # A Secret, not plain env: Modal keeps its values out of the sandbox's definition.
            secrets = [modal.Secret.from_dict(dict(spec.env))] if spec.env else []
            sandbox = modal.Sandbox.create(
                *spec.command,
                app=app,
                image=image,
                gpu=self.hardware_map[spec.hardware],
                timeout=spec.time_limit_seconds,
                secrets=secrets,
                tags={**{str(k): str(v) for k, v in spec.labels.items()}, "agentops_job_id": str(spec.job_id)},
                client=client,
            )
            return sandbox.object_id

    def status(self, external_id: str) -> RemoteStatus:
        modal = _modal()
        with self._client() as client:
            sandbox = modal.Sandbox.from_id(external_id, client=client)
            # Modal tells "not started yet" from "running" only through private calls.
            exit_code = sandbox.poll()
            if exit_code is None:
                return RemoteStatus(state="running")
            # The sandbox has finished: wait() returns at once, and says how it ended.
            try:
                sandbox.wait(raise_on_termination=True)
            except modal.exception.SandboxTerminatedError:
                return RemoteStatus(state="cancelled", exit_code=exit_code, message="terminated")
            except modal.exception.SandboxTimeoutError:
                return RemoteStatus(state="failed", exit_code=exit_code, message="Modal stopped it at its time limit")
        if exit_code == 0:
            return RemoteStatus(state="succeeded", exit_code=0)
        return RemoteStatus(state="failed", exit_code=exit_code, message=f"exit code {exit_code}")

    def logs(self, external_id: str, cursor: dict) -> LogChunk:
        """Modal's log API reads a time range: ``cursor`` holds the time of the last
        entry read (``since``), how many entries at that very time were read
        (``skip``), and each stream's unfinished line (``partial``)."""
        modal = _modal()
        read_since = datetime.fromisoformat(cursor["since"]) if cursor.get("since") else None
        read_skip = int(cursor.get("skip", 0))
        partial: dict[str, str] = dict(cursor.get("partial") or {})
        last_at, count_at_last = read_since, read_skip
        lines: list[str] = []
        read = 0
        with self._client() as client:
            sandbox = modal.Sandbox.from_id(external_id, client=client)
            seen_at_since = 0
            try:
                for entry in sandbox.logs.fetch(since=read_since or datetime.now(UTC) - FIRST_LOG_LOOKBACK):
                    if read_since is not None and entry.timestamp <= read_since:
                        # Read last time, unless more entries share that very time.
                        seen_at_since += 1
                        if entry.timestamp < read_since or seen_at_since <= read_skip:
                            continue
                    text = partial.pop(entry.source, "") + entry.message
                    *complete, rest = text.split("\n")
                    lines.extend(line.removesuffix("\r") for line in complete)
                    if rest:
                        partial[entry.source] = rest
                    if entry.timestamp == last_at:
                        count_at_last += 1
                    else:
                        last_at, count_at_last = entry.timestamp, 1
                    read += 1
                    if read >= MAX_LOG_ENTRIES_PER_READ:
                        break
            except modal.exception.ExecutionError:
                # The sandbox has no container yet: no logs either.
                pass
            if partial and read < MAX_LOG_ENTRIES_PER_READ and sandbox.poll() is not None:
                # The sandbox has ended: its unfinished last lines are all there is.
                lines.extend(partial.pop(source).removesuffix("\r") for source in sorted(partial))
        next_cursor: dict = {"skip": count_at_last, "partial": partial}
        if last_at is not None:
            next_cursor["since"] = last_at.isoformat()
        return LogChunk(lines=lines, cursor=next_cursor)

    def cancel(self, external_id: str) -> None:
        """Terminate the sandbox; Modal ignores it for one that has ended, and one it
        no longer knows is left alone."""
        modal = _modal()
        try:
            with self._client() as client:
                modal.Sandbox.from_id(external_id, client=client).terminate()
        except JobNotFound:
            return

    @contextlib.contextmanager
    def _client(self, *, redact=()):
        """A Modal client for the organization's token, closed afterwards; Modal's
        errors come out as BackendError / JobNotFound."""
        modal = _modal()
        errors = modal.exception
        client = None
        try:
            client = modal.Client.from_credentials(self.token_id, self.token_secret)
            yield client
        except errors.NotFoundError as exc:
            detail = redact_secrets(str(exc), redact, MASK)[:200]
            raise JobNotFound(f"Modal does not know the sandbox ({detail})") from None
        except (errors.AuthError, errors.PermissionDeniedError):
            raise BackendError("Modal refused the token (check token_id and token_secret)") from None
        except (
            errors.ServiceError,
            errors.InternalError,
            errors.ResourceExhaustedError,
            errors.ConnectionError,
        ) as exc:
            message = redact_secrets(str(exc), redact, MASK)[:300]
            raise BackendError(f"Modal is unavailable: {type(exc).__name__} {message}", retryable=True) from None
        except errors.Error as exc:
            message = redact_secrets(str(exc), redact, MASK)[:500]
            raise BackendError(f"Modal refused the call: {type(exc).__name__} {message}") from None
        except OSError as exc:
            raise BackendError(f"cannot reach Modal: {type(exc).__name__}", retryable=True) from None
        finally:
            if client is not None:
                with contextlib.suppress(errors.Error, OSError):
                    client.close()
