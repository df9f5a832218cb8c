"""Secrets an organization saves for its jobs: ``secret_set`` (create or replace,
encrypted, only a hint of the value kept in clear) and ``secret_delete``. A job names
the secrets it receives; the poller decrypts them into the job's environment when it
submits it (``polling``). A secret's name is an environment variable name, outside the
``AGENTOPS_`` names the platform sets (``ENV_NAME``, ``RESERVED_ENV_PREFIX``, which
submission checks a job's own env against too).
"""

from __future__ import annotations

import re

from django.db import transaction
from django.utils import timezone

from agentops import crypto
from agentops.errors import InvalidRequest, NotFound
from agentops.services.audit import acting_user, audit_record, audited_delete
from jobs.models import JobSecret

ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]{0,127}$")
RESERVED_ENV_PREFIX = "AGENTOPS_"


def secret_set(*, organization, actor, name: str, value: str, ip=None) -> JobSecret:
    """Save (or replace) a secret jobs can receive as the environment variable ``name``."""
    if not ENV_NAME.fullmatch(name or "") or name.startswith(RESERVED_ENV_PREFIX):
        raise InvalidRequest(
            f"a secret's name is an environment variable name (letters, digits, _; not starting with "
            f"{RESERVED_ENV_PREFIX})"
        )
    if not value:
        raise InvalidRequest("give the secret a value")
    with transaction.atomic():
        secret, created = JobSecret.objects.select_for_update().get_or_create(
            organization=organization, name=name, defaults={"value_ciphertext": ""}
        )
        secret.value_ciphertext = crypto.encrypt(value)
        secret.hint = value[-4:] if len(value) >= 12 else ""
        secret.updated_by = acting_user(actor)
        secret.updated_at = timezone.now()
        secret.save()
        audit_record(
            organization=organization,
            actor=actor,
            action="job_secret.create" if created else "job_secret.update",
            target=secret,
            data={"name": name},
            ip=ip,
        )
    return secret


def secret_delete(*, organization, actor, name: str, ip=None) -> None:
    with transaction.atomic():
        secret = JobSecret.objects.filter(organization=organization, name=name).first()
        if secret is None:
            raise NotFound(f"no secret named {name!r}")
        audited_delete(
            secret, organization=organization, actor=actor, action="job_secret.delete", data={"name": name}, ip=ip
        )
