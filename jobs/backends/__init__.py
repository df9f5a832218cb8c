"""Compute backends, one interface (``base.Backend``): submit, status, logs, cancel.
``backend_for(compute_backend)`` builds the right one from an organization's settings."""

from __future__ import annotations

from jobs.backends.base import Backend, BackendError, JobNotFound, JobSpec, LogChunk, RemoteStatus  # noqa: F401


def backend_for(compute_backend) -> Backend:
    """The backend implementation of a ``jobs.models.ComputeBackend`` row, with its
    credentials decrypted (for the code that calls the backend only)."""
    import json

    from agentops import crypto
    from jobs.models import ComputeBackend

    credentials = (
        json.loads(crypto.decrypt(compute_backend.credentials_ciphertext))
        if (compute_backend.credentials_ciphertext)
        else {}
    )
    kind = compute_backend.kind
    if kind == ComputeBackend.Kind.LOCAL:
        from jobs.backends.local import LocalBackend as implementation
    elif kind == ComputeBackend.Kind.RAY:
        from jobs.backends.ray import RayBackend as implementation
    elif kind == ComputeBackend.Kind.HF_JOBS:
        from jobs.backends.hf_jobs import HfJobsBackend as implementation
    elif kind == ComputeBackend.Kind.KUBERNETES:
        from jobs.backends.kubernetes import KubernetesBackend as implementation
    elif kind == ComputeBackend.Kind.MODAL:
        from jobs.backends.modal import ModalBackend as implementation
    else:
        raise BackendError(f"unknown backend kind {kind!r}")
    return implementation(config=dict(compute_backend.config or {}), credentials=credentials)
