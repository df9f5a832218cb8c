"""The one interface every compute backend implements.

A backend is stateless between calls: everything it needs to find a job again is the
``external_id`` it returned from ``submit`` and the ``cursor`` it returned from
``logs``, both stored on the job. The poller (``jobs.services.polling``) calls it from any
worker, any number of times.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Protocol


def redact_secrets(text: str, secrets: Iterable[str], mask: str = "[redacted]") -> str:
    """``text`` (a backend's error, a log line) with every secret of four characters or
    more replaced by ``mask``, the longest first (so a secret inside another leaves no
    part of the longer one)."""
    for secret in sorted({value for value in secrets if value and len(value) >= 4}, key=len, reverse=True):
        text = text.replace(secret, mask)
    return text


class BackendError(Exception):
    """The backend refused or failed a call; ``message`` is shown to the user."""

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.message = message
        self.retryable = retryable


class JobNotFound(BackendError):
    """The backend does not know the job (anymore): after a few polls in a row the job
    is marked ``lost``."""


@dataclass
class JobSpec:
    """What to run. ``env`` holds plain variables and decrypted secrets alike (never
    logged). ``hardware`` is a catalog name (jobs.hardware): each backend maps it to
    its own flavor / resources."""

    job_id: int
    name: str
    image: str
    command: list[str]
    env: dict[str, str]
    hardware: str
    time_limit_seconds: int
    labels: dict[str, str] = field(default_factory=dict)


@dataclass
class RemoteStatus:
    """The backend's view of a job. ``state``: one of "pending" (accepted, not started),
    "running", "succeeded", "failed", "cancelled"."""

    state: str
    exit_code: int | None = None
    message: str = ""
    started_at: float | None = None  # epoch seconds, when the backend knows
    ended_at: float | None = None
    gpu_samples: list[dict] = field(
        default_factory=list
    )  # {"gpu_index", "utilization_percent", "memory_used_mib", "memory_total_mib"}


@dataclass
class LogChunk:
    """New whole lines since ``cursor`` (a JSON-able dict the backend understands), and
    the cursor to pass next time."""

    lines: list[str]
    cursor: dict


class Backend(Protocol):
    def __init__(self, *, config: dict, credentials: dict): ...

    def submit(self, spec: JobSpec) -> str:
        """Start the job; return the backend's id for it. Raise BackendError."""
        ...

    def status(self, external_id: str) -> RemoteStatus:
        """Raise JobNotFound when the backend does not know the id."""
        ...

    def logs(self, external_id: str, cursor: dict) -> LogChunk:
        """Lines written since ``cursor`` ({} at first)."""
        ...

    def cancel(self, external_id: str) -> None:
        """Ask the backend to stop the job; idempotent (a finished job is not an error)."""
        ...
