"""The local backend: a job is a subprocess on the worker's host, for development and
for teams with their own GPU box.

Every job gets a directory, ``<work_dir>/job-<id>-<random>``, and that directory is the
job's whole state, so any worker process on the host (including one started after a
restart) finds it again from its path, the job's ``external_id``:

- ``spec.json``      what to run (never the environment: it holds secrets);
- ``state.json``     written by the job's supervisor: its pid, the command's process
                     group, when it started and, once it ended, its state and exit code;
- ``output.log``     the command's stdout and stderr, as written;
- ``gpu.jsonl``      one sample per GPU every few seconds, when ``nvidia-smi`` exists;
- ``gpu.offset``     how far ``status`` has read ``gpu.jsonl``;
- ``cancel``         present once a cancel was asked for;
- ``supervisor.log`` the supervisor's own errors, if any.

``submit`` starts ``python -m jobs.backends.local run <job dir>``, which forks a
*supervisor* in a new session (so it is no child of the worker and outlives it) and
returns once the command is started. The supervisor runs the command in its own
process group, samples the GPUs, enforces the time limit and a cancel (SIGTERM to the
group, SIGKILL after a grace period), and writes the exit code when the command ends.
This module's top level imports only the standard library and ``jobs.backends.base``,
so the supervisor starts without Django.

Isolation (docs/jobs.md says what it covers and what it does not): the command runs as
``JOBS_LOCAL_USER``, a separate unprivileged user, never as root and never as the
worker's own user in production, in a *workspace* of its own
(``<tmp>/agentops-jobs-<worker uid>/job-...``, 0700, that user's, removed when the job
ends), with a clean environment: a fixed PATH, HOME = the workspace, the job's own
variables and secrets, and nothing of the worker's but the GPU selection
(``CUDA_VISIBLE_DEVICES``, ``NVIDIA_VISIBLE_DEVICES``) and what the backend's
``inherit_env`` names. The job's directory above stays the worker's (0700): the
command writes its output through the file descriptor it was given, and reads none of
the backend's files. The supervisor itself runs as the worker's user.

The hardware a local backend offers is what the host has: the CPU catalog entries, and
a GPU entry when ``nvidia-smi`` reports that GPU (its name, and at least nine tenths of
the catalog's memory); a backend's ``hardware`` setting can only narrow that.

POSIX only (process groups, signals, users). The image is ignored: the command runs on
the host.
"""

from __future__ import annotations

import contextlib
import json
import logging
import os
import pwd
import re
import secrets
import shutil
import signal
import socket
import stat
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass
from pathlib import Path

from jobs.backends.base import BackendError, JobNotFound, JobSpec, LogChunk, RemoteStatus

logger = logging.getLogger(__name__)

PROJECT_ROOT = Path(__file__).resolve().parents[2]
ENDED_STATES = ("succeeded", "failed", "cancelled")

# Logs: at most this many lines per call, each at most this many bytes.
MAX_LINES_PER_CALL = 2000
MAX_LINE_BYTES = 8192
_READ_CHUNK_BYTES = 1024 * 1024
_MAX_READ_BYTES_PER_CALL = 16 * 1024 * 1024
MAX_GPU_SAMPLES_PER_CALL = 1000

DEFAULT_GPU_SAMPLE_SECONDS = 5.0
DEFAULT_CANCEL_GRACE_SECONDS = 10.0
_SUBMIT_TIMEOUT_SECONDS = 30
_SUPERVISOR_TICK_SECONDS = 0.2

# A job's environment is built, not inherited (the worker holds the platform's own
# secrets: SECRET_KEY, ENCRYPTION_KEYS, DATABASE_URL, ...): this PATH, HOME and TMPDIR
# = its workspace, USER, a UTF-8 locale, and from the worker only which GPUs the host
# gives jobs. Config "inherit_env" adds names, never the platform's own secrets.
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"
GPU_SELECTION_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
PLATFORM_SECRET_ENV = frozenset(
    {"SECRET_KEY", "ENCRYPTION_KEYS", "DATABASE_URL", "REDIS_URL", "EMAIL_HOST_PASSWORD", "DJANGO_SETTINGS_MODULE"}
)
# nvidia-smi's answer (the host's GPUs) is kept this long per executable.
HARDWARE_CACHE_SECONDS = 60.0
# A GPU is the catalog's when its name says so and it has at least this share of the
# catalog's memory (an A100 40GB is no "a100", which is the 80 GB one).
_GPU_MEMORY_SHARE = 0.9
# The Linux capabilities a worker that is not root needs to start a job as another user,
# give it its workspace and remove that afterwards: CAP_CHOWN, CAP_DAC_OVERRIDE,
# CAP_SETGID, CAP_SETUID.
_SWITCH_USER_CAPABILITIES = (0, 1, 6, 7)

CONFIG_KEYS = ("work_dir", "nvidia_smi", "gpu_sample_seconds", "cancel_grace_seconds", "hardware", "inherit_env")
_COMMAND_NAME = re.compile(r"^[A-Za-z0-9._+/-]+$")
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_JOB_DIR_NAME = re.compile(r"^job-\d+-[0-9a-f]+$")


@dataclass(frozen=True)
class HostPolicy:
    """What the operator allows on this host (settings JOBS_LOCAL_BACKEND,
    JOBS_LOCAL_USER, DEBUG) and where workspaces go."""

    enabled: bool
    user: str
    debug: bool
    workspace_root: Path

    @classmethod
    def from_settings(cls) -> HostPolicy:
        from django.conf import settings

        return cls(
            enabled=bool(settings.JOBS_LOCAL_BACKEND),
            user=str(settings.JOBS_LOCAL_USER or ""),
            debug=bool(settings.DEBUG),
            workspace_root=default_workspace_root(),
        )


def default_workspace_root() -> Path:
    return Path(tempfile.gettempdir()) / f"agentops-jobs-{os.geteuid()}"


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
        run_as = self._run_as()
        job_dir = self.work_dir / f"job-{int(spec.job_id)}-{secrets.token_hex(4)}"
        workspace = self._make_workspace(job_dir.name, run_as)
        try:
            self.work_dir.mkdir(mode=0o700, parents=True, exist_ok=True)
            job_dir.mkdir(mode=0o700)
        except OSError as error:
            _remove_workspace(job_dir, str(workspace))
            raise BackendError(f"could not create the job's directory under {self.work_dir}: {error}") from None
        try:
            _write_json(
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
                env=self._environment(spec, run_as, workspace),
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
            _remove_workspace(job_dir, str(workspace))  # no command was started in it
            reason = launcher.stderr.decode("utf-8", "replace").strip()[-500:] or f"exit code {launcher.returncode}"
            raise BackendError(f"could not start the job's supervisor: {reason}", retryable=True)
        logger.info("local job %s started in %s", spec.job_id, job_dir)
        return str(job_dir)

    def status(self, external_id: str) -> RemoteStatus:
        job_dir = self._job_dir(external_id)
        state = _read_json(job_dir / "state.json")
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
            gpu_samples=_read_new_gpu_samples(job_dir),
        )

    def logs(self, external_id: str, cursor: dict) -> LogChunk:
        job_dir = self._job_dir(external_id)
        cursor = cursor or {}
        offset = int(cursor.get("offset", 0))
        skipping = bool(cursor.get("skipping", False))
        # Read the state first: once it says ended, the whole output is in the file, and
        # a last line without a newline can be given too.
        ended = (_read_json(job_dir / "state.json") or {}).get("state") in ENDED_STATES
        try:
            log_file = open(job_dir / "output.log", "rb")  # closed by the with below
        except FileNotFoundError:
            return LogChunk(lines=[], cursor=_log_cursor(offset, skipping))
        with log_file:
            lines, offset, skipping = _read_lines(log_file, offset, skipping, ended)
        return LogChunk(lines=lines, cursor=_log_cursor(offset, skipping))

    def cancel(self, external_id: str) -> None:
        job_dir = self._job_dir(external_id)
        state = _read_json(job_dir / "state.json") or {}
        if state.get("state") in ENDED_STATES:
            return
        # The marker is what the supervisor acts on (it looks every fraction of a
        # second); the signal only wakes it sooner.
        (job_dir / "cancel").touch()
        if not state or state.get("host") != socket.gethostname():
            return
        if _process_alive(state.get("pid"), state.get("pid_start")):
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

    def _run_as(self) -> dict | None:
        """The user the command runs as ({"user", "uid", "gid"}), or None for the
        worker's own user (a development machine only). Refused (BackendError): root,
        the worker's own user in production, a user this worker cannot switch to."""
        name = self.policy.user
        if not name:
            if os.geteuid() == 0:
                raise BackendError(
                    "local jobs never run as root: set JOBS_LOCAL_USER to an unprivileged user "
                    "(e.g. nobody) for the worker to run them as"
                )
            if not self.policy.debug:
                raise BackendError(
                    "local jobs need JOBS_LOCAL_USER (a separate unprivileged user) when DEBUG is off: "
                    "as the worker's own user a job could read the platform's data and keys"
                )
            return None
        try:
            entry = pwd.getpwnam(name)
        except KeyError:
            raise BackendError(f"JOBS_LOCAL_USER names no user of this host: {name!r}") from None
        if entry.pw_uid == 0 or entry.pw_gid == 0:
            raise BackendError(f"JOBS_LOCAL_USER must be an unprivileged user; {name!r} is root or in root's group")
        if entry.pw_uid == os.geteuid():
            raise BackendError(
                f"JOBS_LOCAL_USER ({name}) is the worker's own user: it must be a separate user, "
                "who cannot read the worker's environment or DATA_DIR"
            )
        if os.geteuid() != 0 and not _can_switch_users():
            raise BackendError(
                f"this worker (uid {os.geteuid()}) cannot start processes as {name}: run it as root "
                "(jobs still never run as root) or give it the capabilities CAP_SETUID, CAP_SETGID, "
                "CAP_CHOWN and CAP_DAC_OVERRIDE"
            )
        return {"user": name, "uid": entry.pw_uid, "gid": entry.pw_gid}

    def _make_workspace(self, name: str, run_as: dict | None) -> Path:
        """The command's working directory (and HOME): ``<root>/<job dir name>``, 0700 and
        the job user's, in a root folder of the worker's that others may only traverse."""
        root = self.policy.workspace_root
        if run_as is not None and not _reachable_by_all(root):
            raise BackendError(
                f"the job's user cannot reach {root}: give the worker a TMPDIR every user may traverse (e.g. /tmp)"
            )
        try:
            root.mkdir(mode=0o711, parents=True, exist_ok=True)
            found = os.lstat(root)
            if not stat.S_ISDIR(found.st_mode) or found.st_uid != os.geteuid():
                raise BackendError(f"{root} is not a folder of the worker's own user: remove it")
            os.chmod(root, 0o711)  # noqa: S103 - others may traverse to their own workspace, not list
            workspace = root / name
            workspace.mkdir(mode=0o700)
            if run_as is not None:
                os.chown(workspace, run_as["uid"], run_as["gid"])
        except OSError as error:
            raise BackendError(f"could not create the job's workspace under {root}: {error}") from None
        return workspace

    def _environment(self, spec: JobSpec, run_as: dict | None, workspace: Path) -> dict[str, str]:
        user = run_as["user"] if run_as else _user_name(os.geteuid())
        env = {
            "PATH": JOB_PATH,
            "HOME": str(workspace),
            "TMPDIR": str(workspace),
            "USER": user,
            "LOGNAME": user,
            "LANG": "C.UTF-8",
            "PYTHONUNBUFFERED": "1",
        }
        env.update({name: os.environ[name] for name in (*GPU_SELECTION_ENV, *self.inherit_env) if name in os.environ})
        env.update({str(name): str(value) for name, value in spec.env.items()})
        return env

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
        if _process_alive(state.get("pid"), state.get("pid_start")):
            return state
        # The supervisor may have ended between the two reads.
        latest = _read_json(job_dir / "state.json") or state
        if latest.get("state") in ENDED_STATES:
            return latest
        _kill_group(latest.get("command_pid"), signal.SIGKILL)
        _remove_workspace(job_dir, (_read_json(job_dir / "spec.json") or {}).get("workspace"))
        cancelled = (job_dir / "cancel").exists()
        ended = {
            **latest,
            "state": "cancelled" if cancelled else "failed",
            "exit_code": None,
            "ended_at": time.time(),
            "message": "cancelled" if cancelled else "the process died without an exit code",
        }
        _write_json(job_dir / "state.json", ended)
        return ended


def _remove_workspace(job_dir: Path, workspace: str | None) -> None:
    """The workspace goes with the job: the next job of the same user must not find this
    one's files. Only the job's own (named like its directory); rmtree does not follow
    the links a job may leave there."""
    if workspace and Path(workspace).name == job_dir.name and Path(workspace) != job_dir:
        shutil.rmtree(workspace, ignore_errors=True)


def _log_cursor(offset: int, skipping: bool) -> dict:
    return {"offset": offset, "skipping": True} if skipping else {"offset": offset}


def _read_lines(log_file, offset: int, skipping: bool, ended: bool) -> tuple[list[str], int, bool]:
    """Whole lines from ``offset``: a partial last line waits for its end (or for the
    job's end). ``skipping``: the head of an over-long line was already given, the rest
    up to its newline is dropped."""
    lines: list[str] = []
    read_bytes = 0
    while len(lines) < MAX_LINES_PER_CALL and read_bytes < _MAX_READ_BYTES_PER_CALL:
        log_file.seek(offset)
        data = log_file.read(_READ_CHUNK_BYTES)
        if not data:
            break
        read_bytes += len(data)
        position = 0
        while len(lines) < MAX_LINES_PER_CALL:
            newline = data.find(b"\n", position)
            if newline == -1:
                break
            if skipping:
                skipping = False
            else:
                lines.append(_decode_line(data[position:newline]))
            position = newline + 1
        offset += position
        rest = data[position:]
        if len(lines) >= MAX_LINES_PER_CALL or not rest:
            continue
        at_end = len(data) < _READ_CHUNK_BYTES
        if skipping:
            offset += len(rest)
        elif len(rest) > MAX_LINE_BYTES:
            # A line too long to wait for (a progress bar that never ends its line):
            # give its head now and drop the rest of it.
            lines.append(_decode_line(rest))
            offset += len(rest)
            skipping = True
        elif at_end:
            if ended:
                lines.append(_decode_line(rest))
                offset += len(rest)
            break
    return lines, offset, skipping


def _decode_line(raw: bytes) -> str:
    # A carriage return rewrites the line on a terminal (progress bars): keep what the
    # terminal would show last.
    if b"\r" in raw:
        raw = next((piece for piece in reversed(raw.split(b"\r")) if piece), b"")
    if len(raw) > MAX_LINE_BYTES:
        return raw[:MAX_LINE_BYTES].decode("utf-8", "replace") + " … [line truncated]"
    return raw.decode("utf-8", "replace")


def _read_new_gpu_samples(job_dir: Path) -> list[dict]:
    """GPU samples written since the last call (the read position is kept in the job's
    directory, under a lock, so two pollers never return the same sample)."""
    samples_path = job_dir / "gpu.jsonl"
    if not samples_path.exists():
        return []
    import fcntl

    samples: list[dict] = []
    with open(job_dir / "gpu.offset", "a+") as position_file:
        fcntl.flock(position_file, fcntl.LOCK_EX)
        position_file.seek(0)
        text = position_file.read().strip()
        offset = int(text) if text.isdigit() else 0
        with open(samples_path, "rb") as samples_file:
            samples_file.seek(offset)
            for raw in samples_file:
                if not raw.endswith(b"\n") or len(samples) >= MAX_GPU_SAMPLES_PER_CALL:
                    break
                offset += len(raw)
                with contextlib.suppress(ValueError):
                    samples.append(json.loads(raw))
        position_file.seek(0)
        position_file.truncate()
        position_file.write(str(offset))
    return samples


_detected: dict[str, tuple[float, tuple[str, ...]]] = {}


def detect_hardware(nvidia_smi: str = "nvidia-smi") -> tuple[str, ...]:
    """The catalog hardware this host has, in catalog order: every CPU entry, and each
    GPU entry ``nvidia-smi`` reports (by name, with enough memory). Asked again after
    HARDWARE_CACHE_SECONDS."""
    from jobs.hardware import CATALOG

    now = time.monotonic()
    cached = _detected.get(nvidia_smi)
    if cached is not None and now - cached[0] < HARDWARE_CACHE_SECONDS:
        return cached[1]
    gpus = query_gpus(nvidia_smi)
    offered = []
    for name, hardware in CATALOG.items():
        if hardware.gpus == 0:
            offered.append(name)
            continue
        pattern = re.compile(rf"(?<![A-Z0-9]){re.escape(name.upper())}(?![A-Z0-9])")
        needed_mib = hardware.gpu_memory_gib * 1024 * _GPU_MEMORY_SHARE
        if any(pattern.search(gpu_name.upper()) and memory >= needed_mib for gpu_name, memory in gpus):
            offered.append(name)
    _detected[nvidia_smi] = (now, tuple(offered))
    return tuple(offered)


def query_gpus(nvidia_smi: str = "nvidia-smi") -> list[tuple[str, float]]:
    """(name, memory in MiB) of each GPU ``nvidia-smi`` lists; [] without one."""
    executable = shutil.which(nvidia_smi)
    if executable is None:
        return []
    try:
        result = subprocess.run(
            [executable, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if result.returncode != 0:
        return []
    gpus = []
    for line in result.stdout.decode("utf-8", "replace").splitlines():
        name, _, memory = line.rpartition(",")
        try:
            gpus.append((name.strip(), float(memory)))
        except ValueError:
            continue
    return gpus


def _can_switch_users() -> bool:
    """Whether this process holds the capabilities of _SWITCH_USER_CAPABILITIES (Linux)."""
    try:
        for line in Path("/proc/self/status").read_text().splitlines():
            if line.startswith("CapEff:"):
                effective = int(line.split()[1], 16)
                return all(effective & (1 << capability) for capability in _SWITCH_USER_CAPABILITIES)
    except (OSError, ValueError):
        pass
    return False


def _user_name(uid: int) -> str:
    try:
        return pwd.getpwuid(uid).pw_name
    except KeyError:  # a uid with no passwd entry (containers)
        return str(uid)


def _reachable_by_all(folder: Path) -> bool:
    """Whether any user may traverse every folder above ``folder`` (as the job's user
    must, to start in its workspace)."""
    return all(os.stat(parent).st_mode & stat.S_IXOTH for parent in folder.parents)


def _write_json(path: Path, data: dict) -> None:
    """Atomically: a reader sees the old file or the new one, never half of one."""
    temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    temporary.write_text(json.dumps(data))
    os.replace(temporary, path)


def _read_json(path: Path) -> dict | None:
    try:
        return json.loads(path.read_text())
    except FileNotFoundError:
        return None
    except ValueError:
        return None


def _proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in clock ticks) of a process, from /proc on Linux."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], fields[19]


def _process_alive(pid: int | None, start_ticks: str | None) -> bool:
    """True while the process runs. A zombie is dead, and so is a process with the same
    pid but another start time (the pid was reused after the job's process ended)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = _proc_stat(pid)
    if stat is None:
        return True
    state_letter, ticks = stat
    if state_letter in ("Z", "X"):
        return False
    return not (start_ticks and ticks != start_ticks)


def _kill_group(pgid: int | None, sig: int) -> None:
    if pgid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


# --- The supervisor: runs in its own session, without Django.


def _launch(job_dir: Path) -> int:
    """Fork the supervisor and wait until it has started the command (or failed to)."""
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(ready_write)
        with os.fdopen(ready_read, "rb") as ready:
            answer = ready.read()
        if answer == b"ok":
            return 0
        sys.stderr.write(f"the supervisor did not start; see {job_dir / 'supervisor.log'}\n")
        return 1
    os.close(ready_read)
    exit_code = 1
    try:
        os.setsid()
        # Nothing may hold submit's pipes open, and the supervisor's own errors need a home.
        log = os.open(job_dir / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        exit_code = _Supervisor(job_dir, ready_write).run()
    except BaseException:  # noqa: BLE001 - the forked child must never return into the launcher
        import traceback

        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(exit_code)


class _Supervisor:
    def __init__(self, job_dir: Path, ready_fd: int):
        self.job_dir = job_dir
        self.ready_fd = ready_fd
        self.spec = json.loads((job_dir / "spec.json").read_text())
        self.stop_reason: str | None = None  # "cancelled", "time_limit" or "terminated"
        self.signal_received = False
        stat = _proc_stat(os.getpid())
        self.state = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_start": stat[1] if stat else None,
            "state": "running",
            "started_at": time.time(),
        }

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        output = open(self.job_dir / "output.log", "ab", buffering=0)  # open for the job's life
        run_as = self.spec.get("run_as") or {}
        workspace = Path(self.spec.get("workspace") or self.job_dir)
        try:
            # As the job's user (no supplementary groups), in its workspace, with the
            # environment submit built (this process's own). Its output goes through the
            # descriptor: the job's directory stays closed to it.
            command = subprocess.Popen(
                self.spec["command"],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=workspace,
                env=dict(os.environ),
                process_group=0,
                umask=0o077,
                **({"user": run_as["uid"], "group": run_as["gid"], "extra_groups": []} if run_as else {}),
            )
        except OSError as error:
            exit_code = 126 if isinstance(error, PermissionError) else 127
            message = f"could not start the command: {error.strerror or error}"
            output.write(f"[local backend] {message}\n".encode())
            _remove_workspace(self.job_dir, str(workspace))
            self._end("failed", exit_code, message)
            self._ready()
            return 0
        self.state["command_pid"] = command.pid
        _write_json(self.job_dir / "state.json", self.state)
        self._ready()

        sampler_stop = threading.Event()
        sampler = threading.Thread(target=self._sample_gpus, args=(sampler_stop,), daemon=True)
        sampler.start()
        returncode = self._wait(command)
        _kill_group(command.pid, signal.SIGKILL)  # whatever the command left running in its group
        sampler_stop.set()
        sampler.join(timeout=15)
        _remove_workspace(self.job_dir, str(workspace))

        exit_code = returncode if returncode >= 0 else 128 - returncode
        if self.stop_reason == "cancelled":
            state, message = "cancelled", "cancelled"
        elif self.stop_reason == "time_limit":
            state, message = "failed", f"the time limit of {self.spec['time_limit_seconds']} s was reached"
        elif self.stop_reason == "terminated":
            state, message = "failed", "stopped: the job's supervisor received SIGTERM (the host shutting down?)"
        elif returncode == 0:
            state, message = "succeeded", ""
        elif returncode < 0:
            state, message = "failed", f"killed by {signal.Signals(-returncode).name}"
        else:
            state, message = "failed", f"exited with code {returncode}"
        if self.stop_reason:
            output.write(f"\n[local backend] {message}\n".encode())
        output.close()
        self._end(state, exit_code, message)
        return 0

    def _on_signal(self, signum, frame) -> None:
        self.signal_received = True

    def _ready(self) -> None:
        os.write(self.ready_fd, b"ok")
        os.close(self.ready_fd)

    def _end(self, state: str, exit_code: int | None, message: str) -> None:
        self.state.update(state=state, exit_code=exit_code, message=message, ended_at=time.time())
        _write_json(self.job_dir / "state.json", self.state)

    def _wait(self, command: subprocess.Popen) -> int:
        time_limit = self.spec.get("time_limit_seconds") or 0
        deadline = self.state["started_at"] + time_limit if time_limit > 0 else None
        grace = float(self.spec.get("cancel_grace_seconds", DEFAULT_CANCEL_GRACE_SECONDS))
        kill_at: float | None = None
        while True:
            try:
                return command.wait(timeout=_SUPERVISOR_TICK_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            now = time.time()
            if self.stop_reason is None:
                if (self.job_dir / "cancel").exists():
                    self.stop_reason = "cancelled"
                elif self.signal_received:
                    # Not a cancel (cancel leaves its marker first): the host is shutting down.
                    self.stop_reason = "terminated"
                elif deadline is not None and now >= deadline:
                    self.stop_reason = "time_limit"
                if self.stop_reason:
                    _kill_group(command.pid, signal.SIGTERM)
                    kill_at = now + grace
            elif kill_at is not None and now >= kill_at:
                _kill_group(command.pid, signal.SIGKILL)
                kill_at = None

    def _sample_gpus(self, stop: threading.Event) -> None:
        executable = shutil.which(self.spec.get("nvidia_smi") or "nvidia-smi")
        if executable is None:
            return
        arguments = [
            executable,
            "--query-gpu=index,utilization.gpu,memory.used,memory.total",
            "--format=csv,noheader,nounits",
        ]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if re.fullmatch(r"\d+(,\d+)*", visible):
            arguments.append(f"--id={visible}")
        interval = float(self.spec.get("gpu_sample_seconds") or DEFAULT_GPU_SAMPLE_SECONDS)
        failures = 0
        while not stop.is_set() and failures < 3:
            try:
                result = subprocess.run(arguments, capture_output=True, timeout=10, check=False, env=os.environ)
            except (OSError, subprocess.TimeoutExpired):
                result = None
            samples = parse_nvidia_smi(result.stdout.decode("utf-8", "replace")) if result else []
            if result is None or result.returncode != 0 or not samples:
                failures += 1  # no driver, or a broken one: give up after a few tries
            else:
                failures = 0
                at = time.time()
                text = "".join(json.dumps({"at": at, **sample}) + "\n" for sample in samples)
                with open(self.job_dir / "gpu.jsonl", "a") as samples_file:
                    samples_file.write(text)
            stop.wait(interval)


def parse_nvidia_smi(text: str) -> list[dict]:
    """Samples from ``nvidia-smi --query-gpu=index,utilization.gpu,memory.used,
    memory.total --format=csv,noheader,nounits`` ("[N/A]" becomes None)."""

    def number(value: str) -> float | None:
        try:
            return float(value)
        except ValueError:
            return None

    samples = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 4 or not fields[0].isdigit():
            continue
        samples.append(
            {
                "gpu_index": int(fields[0]),
                "utilization_percent": number(fields[1]),
                "memory_used_mib": number(fields[2]),
                "memory_total_mib": number(fields[3]),
            }
        )
    return samples


if __name__ == "__main__":
    if len(sys.argv) != 3 or sys.argv[1] != "run":
        sys.exit("usage: python -m jobs.backends.local run <job dir>")
    sys.exit(_launch(Path(sys.argv[2])))
