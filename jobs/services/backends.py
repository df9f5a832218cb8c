"""Compute backends an organization configures: ``backend_create`` and
``backend_update`` (settings checked by the backend's own ``validate``, credentials
encrypted and never shown again, a saved credential kept only where it went before),
who may configure a local backend (platform staff, where the installation allows one),
and the hardware a backend offers (``offered_hardware``, which submission checks).

The backend implementations themselves are ``jobs.backends``; this module and
``polling`` are the services that build them (``backend_class``, ``backend_for``).
"""

from __future__ import annotations

import re

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentops import crypto
from agentops.destinations import check_credential_destination
from agentops.errors import Conflict, Forbidden, InvalidRequest
from agentops.jsonsafe import storage_problem
from agentops.services.audit import audit_record, audited_create
from jobs import hardware as catalog
from jobs.backends import BackendError, backend_class, backend_for
from jobs.models import ComputeBackend


def _implementation(kind: str):
    """The backend class of ``kind`` (its static ``validate`` and ``hardware_map``)."""
    try:
        return backend_class(kind)
    except BackendError as exc:
        raise InvalidRequest(exc.message) from None


def check_allowed(kind: str) -> None:
    """Whether jobs may run on a backend of ``kind`` on this installation."""
    if kind == ComputeBackend.Kind.LOCAL and not settings.JOBS_LOCAL_BACKEND:
        raise InvalidRequest(
            "the local backend is turned off on this installation (JOBS_LOCAL_BACKEND=false); "
            "the operator turns it on (it is on by default only with DEBUG)"
        )


def _check_may_configure(kind: str, actor) -> None:
    """A local backend runs commands on the platform's own host: only platform staff
    (or the platform itself: ``actor`` None, as in management commands) add or change
    one, and only where the installation allows it."""
    check_allowed(kind)
    if kind != ComputeBackend.Kind.LOCAL or actor is None:
        return
    if not (getattr(actor, "is_staff", False) or getattr(actor, "is_superuser", False)):
        raise Forbidden(
            "only platform staff may add or change a local backend: it runs commands on the platform's own host"
        )


def offered_hardware(backend: ComputeBackend) -> list[str]:
    """The catalog hardware ``backend`` offers, in catalog order (a local backend: what
    its host has)."""
    offered = backend_for(backend).hardware_map
    return [name for name in catalog.CATALOG if name in offered]


def not_offered(backend: ComputeBackend, hardware: str, offered: list[str]) -> str:
    return (
        f"backend {backend.name!r} ({backend.kind}) does not offer {hardware}; "
        f"it offers: {', '.join(offered) or 'nothing'}"
    )


def _check_storable(config, credentials) -> None:
    for what, value in (("config", config), ("credentials", credentials)):
        if problem := storage_problem(value):
            raise InvalidRequest(f"the {what} cannot be stored: {problem}")


def backend_create(*, organization, actor, name: str, kind: str, config=None, credentials=None, ip=None):
    """Add a compute backend to the organization; credentials are encrypted and never
    shown again."""
    name = (name or "").strip()
    if not re.fullmatch(r"[A-Za-z0-9][A-Za-z0-9 _.-]{0,63}", name):
        raise InvalidRequest("name the backend with 1 to 64 letters, digits, spaces, dots, dashes or underscores")
    if kind not in ComputeBackend.Kind.values:
        raise InvalidRequest(f"kind must be one of {', '.join(ComputeBackend.Kind.values)}")
    _check_may_configure(kind, actor)
    _check_storable(config, credentials)
    config, credentials = _implementation(kind).validate(dict(config or {}), dict(credentials or {}))
    if ComputeBackend.objects.filter(organization=organization, name=name).exists():
        raise Conflict(f"a backend named {name!r} already exists")
    with transaction.atomic():
        return audited_create(
            ComputeBackend,
            organization=organization,
            actor=actor,
            action="compute_backend.create",
            data={"kind": kind, "config": config},
            ip=ip,
            name=name,
            kind=kind,
            config=config,
            credentials_ciphertext=crypto.encrypt_json(credentials),
            credentials_hint=", ".join(sorted(credentials)) if credentials else "",
        )


def backend_update(*, backend: ComputeBackend, actor, config=None, credentials=None, enabled=None, ip=None):
    """Change a backend's settings, replace its credentials (None keeps them), or turn
    it off (its running jobs go on; no new ones). Saved credentials are kept only where
    they went before: changing the address they go to needs them again. Anyone who may
    change backends may turn a local one off; changing it otherwise is for platform staff."""
    if not (enabled is False and config is None and credentials is None):
        _check_may_configure(backend.kind, actor)
    new_config = dict(backend.config) if config is None else dict(config)
    current = crypto.decrypt_json(backend.credentials_ciphertext)
    new_credentials = current if credentials is None else dict(credentials)
    _check_storable(new_config, new_credentials)
    implementation = _implementation(backend.kind)
    new_config, new_credentials = implementation.validate(new_config, new_credentials)
    # The local backend has no credentials, hence no destination.
    destination = getattr(implementation, "credential_destination", None)
    if destination is not None:
        check_credential_destination(
            before=destination(backend.config or {}),
            after=destination(new_config),
            stored=bool(backend.credentials_ciphertext),
            supplied=credentials is not None,
            credential=implementation.credential_label,
        )
    with transaction.atomic():
        backend.config = new_config
        if credentials is not None:
            backend.credentials_ciphertext = crypto.encrypt_json(new_credentials)
            backend.credentials_hint = ", ".join(sorted(new_credentials))
        if enabled is not None:
            backend.enabled = bool(enabled)
        backend.updated_at = timezone.now()
        backend.save()
        audit_record(
            organization=backend.organization,
            actor=actor,
            action="compute_backend.update",
            target=backend,
            data={"config": new_config, "credentials_replaced": credentials is not None, "enabled": backend.enabled},
            ip=ip,
        )
    return backend
