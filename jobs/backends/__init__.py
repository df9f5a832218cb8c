"""Compute backends, one interface (``base.Backend``): submit, status, logs, cancel.
``backend_for(compute_backend)`` builds the right one from an organization's settings."""

from __future__ import annotations

from jobs.backends.base import Backend, BackendError, JobNotFound, JobSpec, LogChunk, RemoteStatus  # noqa: F401


def backend_class(kind: str) -> type[Backend]:
    """The implementation of a backend ``kind`` (its static ``validate`` and
    ``hardware_map`` too). SDKs are imported by each module only when it calls them."""
    from jobs.models import ComputeBackend

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
    return implementation


def backend_for(compute_backend) -> Backend:
    """The backend implementation of a ``jobs.models.ComputeBackend`` row, with its
    credentials decrypted (for the code that calls the backend only)."""
    from agentops import crypto

    credentials = crypto.decrypt_json(compute_backend.credentials_ciphertext)
    implementation = backend_class(compute_backend.kind)
    return implementation(config=dict(compute_backend.config or {}), credentials=credentials)
