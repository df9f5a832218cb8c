"""The local backend's four calls (``base.Backend``: submit, status, logs, cancel), its
settings (``validate``) and the hardware it offers (what the host has, narrowed by its
``hardware`` setting). ``submit`` makes the job's directory and workspace and starts
its supervisor (``python -m jobs.backends.local run <job dir>``); the other calls read
what the supervisor wrote there, so any worker on the host answers for any job. A
supervisor that died is found here (``status``): the job failed, and what is left of its
command is stopped.
"""

from __future__ import annotations

import contextlib
import logging
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

from jobs.backends.base import BackendError, JobNotFound, JobSpec, LogChunk, RemoteStatus
from jobs.backends.local.hardware import detect_hardware
from jobs.backends.local.isolation import (
    PLATFORM_SECRET_ENV,
    HostPolicy,
    job_environment,
    make_workspace,
    remove_workspace,
    run_as_user,
)
from jobs.backends.local.jobdir import ENDED_STATES, log_cursor, read_json, read_lines, read_new_gpu_samples, write_json
from jobs.backends.local.supervisor import (
    DEFAULT_CANCEL_GRACE_SECONDS,
    DEFAULT_GPU_SAMPLE_SECONDS,
    kill_group,
    process_alive,
)

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[3]
_SUBMIT_TIMEOUT_SECONDS = 30

CONFIG_KEYS = ("work_dir", "nvidia_smi", "gpu_sample_seconds", "cancel_grace_seconds", "hardware", "inherit_env")
_COMMAND_NAME = re.compile(r"^[A-Za-z0-9._+/-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_DIR_NAME = re.compile(r"^job-\d+-[0-9a-f]+$")


class LocalBackend:
    def __init__(self, *, config: dict, credentials: dict, policy: HostPolicy | None = None):
        config = config or {}
        if config.get("work_dir"):
            self.work_dir = Path(config["work_dir"])
        else:
            from django.conf import settings

            self.work_dir = Path(settings.DATA_DIR) / "jobs"
        self.nvidia_smi = config.get("nvidia_smi") or "nvidia-smi"
        self.gpu_sample_seconds = float(config.get("gpu_sample_seconds") or DEFAULT_GPU_SAMPLE_SECONDS)
        grace = config.get("cancel_grace_seconds")
        self.cancel_grace_seconds = float(DEFAULT_CANCEL_GRACE_SECONDS if grace is None else grace)
        self.inherit_env = tuple(config.get("inherit_env") or ())
        self.hardware_limit = tuple(config.get("hardware") or ())
        self._policy = policy

    @property
    def policy(self) -> HostPolicy:
        if self._policy is None:
            self._policy = HostPolicy.from_settings()
        return self._policy

    @property
    def hardware_map(self) -> dict[str, str]:
        """The hardware this host has (``detect_hardware``), narrowed by the backend's
        ``hardware`` setting when it has one."""
        offered = detect_hardware(self.nvidia_smi)
        if self.hardware_limit:
            offered = tuple(name for name in offered if name in self.hardware_limit)
        return {name: name for name in offered}

    @staticmethod
    def validate(config: dict, credentials: dict) -> tuple[dict, dict]:
        """Cleaned (config, credentials), or InvalidRequest saying what is wrong."""
        from agentops.errors import InvalidRequest
        from jobs.hardware import CATALOG

        config = dict(config or {})
        if credentials:
            raise InvalidRequest("the local backend takes no credentials")
        unknown = sorted(set(config) - set(CONFIG_KEYS))
        if unknown:
            raise InvalidRequest(
                f"unknown setting(s) for the local backend: {', '.join(unknown)}; "
                f"the settings are: {', '.join(CONFIG_KEYS)}"
            )
        cleaned: dict = {}
        work_dir = config.get("work_dir")
        if work_dir not in (None, ""):
            if not isinstance(work_dir, str) or not os.path.isabs(work_dir):
                raise InvalidRequest("work_dir must be an absolute path on the worker's host")
            cleaned["work_dir"] = os.path.normpath(work_dir)
        nvidia_smi = config.get("nvidia_smi")
        if nvidia_smi not in (None, ""):
            if (
                not isinstance(nvidia_smi, str)
                or not _COMMAND_NAME.match(nvidia_smi)
                or ("/" in nvidia_smi and not os.path.isabs(nvidia_smi))
                or ".." in nvidia_smi.split("/")
            ):
                raise InvalidRequest("nvidia_smi must be a command name (nvidia-smi) or an absolute path, no arguments")
            cleaned["nvidia_smi"] = nvidia_smi
        for key, low, high in (("gpu_sample_seconds", 0.1, 3600), ("cancel_grace_seconds", 0, 600)):
            value = config.get(key)
            if value is None:
                continue
            if isinstance(value, bool) or not isinstance(value, int | float) or not low <= value <= high:
                raise InvalidRequest(f"{key} must be a number of seconds from {low} to {high}")
            cleaned[key] = value
        hardware = config.get("hardware")
        if hardware not in (None, []):
            if not isinstance(hardware, list) or not all(isinstance(name, str) for name in hardware):
                raise InvalidRequest("hardware must be a list of hardware names")
            unknown_hardware = [name for name in hardware if name not in CATALOG]
            if unknown_hardware:
                raise InvalidRequest(
                    f"unknown hardware: {', '.join(unknown_hardware)}; the catalog has: {', '.join(CATALOG)}"
                )
            cleaned["hardware"] = list(dict.fromkeys(hardware))
        inherit_env = config.get("inherit_env")
        if inherit_env not in (None, []):
            if not isinstance(inherit_env, list) or not all(
                isinstance(name, str) and _ENV_NAME.match(name) for name in inherit_env
            ):
                raise InvalidRequest("inherit_env must be a list of environment variable names")
            platform_names = sorted(
                name for name in inherit_env if name in PLATFORM_SECRET_ENV or name.startswith("AGENTOPS_")
            )
            if platform_names:
                raise InvalidRequest(
                    f"inherit_env cannot pass the platform's own settings to jobs: {', '.join(platform_names)}"
                )
            cleaned["inherit_env"] = list(dict.fromkeys(inherit_env))
        return cleaned, {}

    # --- The four calls of base.Backend.

    def submit(self, spec: JobSpec) -> str:
        if not self.policy.enabled:
            raise BackendError("the local backend is turned off on this installation (JOBS_LOCAL_BACKEND=false)")
        offered = self.hardware_map
        if spec.hardware not in offered:
            raise BackendError(
                f"the local backend does not offer hardware {spec.hardware!r}; "
                f"it offers: {', '.join(offered) or 'nothing'}"
            )
        if not spec.command:
            raise BackendError("the job has no command")
        run_as = run_as_user(self.policy)
        job_dir = self.work_dir / f"job-{int(spec.job_id)}-{secrets.token_hex(4)}"
        workspace = make_workspace(self.policy, job_dir.name, run_as)
        try:
            self.work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            job_dir.mkdir(mode=0o700)
        except OSError as error:
            remove_workspace(job_dir, str(workspace))
            raise BackendError(f"could not create the job's directory under {self.work_dir}: {error}") from None
        try:
            write_json(
                job_dir / "spec.json",
                {
                    "job_id": spec.job_id,
                    "name": spec.name,
                    "command": [str(part) for part in spec.command],
                    "hardware": spec.hardware,
                    "time_limit_seconds": spec.time_limit_seconds,
                    "labels": spec.labels,
                    "nvidia_smi": self.nvidia_smi,
                    "gpu_sample_seconds": self.gpu_sample_seconds,
                    "cancel_grace_seconds": self.cancel_grace_seconds,
                    "run_as": run_as,
                    "workspace": str(workspace),
                },
            )
        except OSError as error:
            raise BackendError(f"could not write the job's spec in {job_dir}: {error}") from None
        try:
            launcher = subprocess.run(
                [sys.executable, "-E", "-m", "jobs.backends.local", "run", str(job_dir)],
                cwd=PROJECT_ROOT,
                env=job_environment(spec, run_as, workspace, self.inherit_env),
                stdin=subprocess.DEVNULL,
                stdout=subprocess.DEVNULL,
                stderr=subprocess.PIPE,
                start_new_session=True,
                timeout=_SUBMIT_TIMEOUT_SECONDS,
                check=False,
            )
        except (OSError, subprocess.TimeoutExpired) as error:
            raise BackendError(f"could not start the job's supervisor: {error}", retryable=True) from None
        if launcher.returncode != 0:
            remove_workspace(job_dir, str(workspace))  # no command was started in it
            reason = launcher.stderr.decode("utf-8", "replace").strip()[-500:] or f"exit code {launcher.returncode}"
            raise BackendError(f"could not start the job's supervisor: {reason}", retryable=True)
        logger.info("local job %s started in %s", spec.job_id, job_dir)
        return str(job_dir)

    def status(self, external_id: str) -> RemoteStatus:
        job_dir = self._job_dir(external_id)
        state = read_json(job_dir / "state.json")
        if state is None:
            # submit returns once the supervisor wrote its state: a directory without it
            # is a submit that failed half-way, or one still under way.
            if time.time() - job_dir.stat().st_mtime < _SUBMIT_TIMEOUT_SECONDS:
                return RemoteStatus(state="pending")
            return RemoteStatus(state="failed", message="the job's supervisor never started")
        if state.get("state") not in ENDED_STATES:
            state = self._check_running(job_dir, state)
        return RemoteStatus(
            state=state.get("state", "running"),
            exit_code=state.get("exit_code"),
            message=state.get("message", ""),
            started_at=state.get("started_at"),
            ended_at=state.get("ended_at"),
            gpu_samples=read_new_gpu_samples(job_dir),
        )

    def logs(self, external_id: str, cursor: dict) -> LogChunk:
        job_dir = self._job_dir(external_id)
        cursor = cursor or {}
        offset = int(cursor.get("offset", 0))
        skipping = bool(cursor.get("skipping", False))
        # Read the state first: once it says ended, the whole output is in the file, and
        # a last line without a newline can be given too.
        ended = (read_json(job_dir / "state.json") or {}).get("state") in ENDED_STATES
        try:
            log_file = open(job_dir / "output.log", "rb")  # closed by the with below
        except FileNotFoundError:
            return LogChunk(lines=[], cursor=log_cursor(offset, skipping))
        with log_file:
            lines, offset, skipping = read_lines(log_file, offset, skipping, ended)
        return LogChunk(lines=lines, cursor=log_cursor(offset, skipping))

    def cancel(self, external_id: str) -> None:
        job_dir = self._job_dir(external_id)
        state = read_json(job_dir / "state.json") or {}
        if state.get("state") in ENDED_STATES:
            return
        # The marker is what the supervisor acts on (it looks every fraction of a
        # second); the signal only wakes it sooner.
        (job_dir / "cancel").touch()
        if not state or state.get("host") != socket.gethostname():
            return
        if process_alive(state.get("pid"), state.get("pid_start")):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.kill(state["pid"], signal.SIGTERM)
        else:
            self._check_running(job_dir, state)

    # --- Helpers.

    def _job_dir(self, external_id: str) -> Path:
        """The job's directory, only when it is one of this backend's: an id naming any
        other path is unknown, whatever it points at."""
        try:
            job_dir = Path(external_id).resolve()
            work_dir = self.work_dir.resolve()
        except (OSError, RuntimeError, ValueError):
            raise JobNotFound(f"no local job {external_id!r}") from None
        if job_dir.parent != work_dir or not _JOB_DIR_NAME.match(job_dir.name) or not job_dir.is_dir():
            raise JobNotFound(f"no local job {external_id!r}")
        return job_dir

    def _check_running(self, job_dir: Path, state: dict) -> dict:
        """The state of a job whose supervisor has not recorded an end: still running
        while the supervisor lives; if it died (killed, host restarted), the job failed,
        and what is left of its command is stopped so it does not hold the GPU."""
        host = state.get("host")
        if host != socket.gethostname():
            raise BackendError(
                f"the local job runs on host {host}; the local backend must be polled from that host",
                retryable=True,
            )
        if process_alive(state.get("pid"), state.get("pid_start")):
            return state
        # The supervisor may have ended between the two reads.
        latest = read_json(job_dir / "state.json") or state
        if latest.get("state") in ENDED_STATES:
            return latest
        kill_group(latest.get("command_pid"), signal.SIGKILL)
        remove_workspace(job_dir, (read_json(job_dir / "spec.json") or {}).get("workspace"))
        cancelled = (job_dir / "cancel").exists()
        ended = {
            **latest,
            "state": "cancelled" if cancelled else "failed",
            "exit_code": None,
            "ended_at": time.time(),
            "message": "cancelled" if cancelled else "the process died without an exit code",
        }
        write_json(job_dir / "state.json", ended)
        return ended
