"""What keeps a local job away from the platform: who it runs as (``run_as_user``:
``JOBS_LOCAL_USER``, never root, never the worker's own user in production), where
(``make_workspace``: a workspace of its own, 0700 and that user's, removed with the job
by ``remove_workspace``), and with which environment (``job_environment``: built, not
inherited, so the worker's secrets never reach it). ``HostPolicy`` is what the operator
allows on this host. Standard library only at the top (the supervisor removes the
workspace without Django).
"""

from __future__ import annotations

import os
import pwd
import shutil
import stat
import tempfile
from dataclasses import dataclass
from pathlib import Path

from jobs.backends.base import BackendError, JobSpec

# A job's environment is built, not inherited (the worker holds the platform's own
# secrets: SECRET_KEY, ENCRYPTION_KEYS, DATABASE_URL, ...): this PATH, HOME and TMPDIR
# = its workspace, USER, a UTF-8 locale, and from the worker only which GPUs the host
# gives jobs. Config "inherit_env" adds names, never the platform's own secrets.
JOB_PATH = "/usr/local/bin:/usr/bin:/bin"
GPU_SELECTION_ENV = ("CUDA_VISIBLE_DEVICES", "NVIDIA_VISIBLE_DEVICES")
PLATFORM_SECRET_ENV = frozenset(
    {"SECRET_KEY", "ENCRYPTION_KEYS", "DATABASE_URL", "REDIS_URL", "EMAIL_HOST_PASSWORD", "DJANGO_SETTINGS_MODULE"}
)
# The Linux capabilities a worker that is not root needs to start a job as another user,
# give it its workspace and remove that afterwards: CAP_CHOWN, CAP_DAC_OVERRIDE,
# CAP_SETGID, CAP_SETUID.
_SWITCH_USER_CAPABILITIES = (0, 1, 6, 7)


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


def run_as_user(policy: HostPolicy) -> dict | None:
    """The user the command runs as ({"user", "uid", "gid"}), or None for the
    worker's own user (a development machine only). Refused (BackendError): root,
    the worker's own user in production, a user this worker cannot switch to."""
    name = policy.user
    if not name:
        if os.geteuid() == 0:
            raise BackendError(
                "local jobs never run as root: set JOBS_LOCAL_USER to an unprivileged user "
                "(e.g. nobody) for the worker to run them as"
            )
        if not policy.debug:
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


def make_workspace(policy: HostPolicy, name: str, run_as: dict | None) -> Path:
    """The command's working directory (and HOME): ``<root>/<job dir name>``, 0700 and
    the job user's, in a root folder of the worker's that others may only traverse."""
    root = policy.workspace_root
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


def job_environment(
    spec: JobSpec, run_as: dict | None, workspace: Path, inherit_env: tuple[str, ...]
) -> dict[str, str]:
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
    env.update({name: os.environ[name] for name in (*GPU_SELECTION_ENV, *inherit_env) if name in os.environ})
    env.update({str(name): str(value) for name, value in spec.env.items()})
    return env


def remove_workspace(job_dir: Path, workspace: str | None) -> None:
    """The workspace goes with the job: the next job of the same user must not find this
    one's files. Only the job's own (named like its directory); rmtree does not follow
    the links a job may leave there."""
    if workspace and Path(workspace).name == job_dir.name and Path(workspace) != job_dir:
        shutil.rmtree(workspace, ignore_errors=True)


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
