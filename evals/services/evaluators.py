"""Evaluators: create, edit and archive them. Configurations are checked by
``evals.scoring.validate_config``; a webhook evaluator gets a signing secret,
encrypted at rest and shown once."""

from __future__ import annotations

import re
from typing import Any

from django.db import IntegrityError, transaction
from django.utils import timezone

from agentops import crypto
from agentops.destinations import Destination, check_credential_destination
from agentops.errors import Conflict, InvalidRequest
from agentops.services.audit import acting_user, audit_record, audited_update
from evals.models import Evaluator, OnlineRule
from evals.scoring import get_kind, new_webhook_secret, validate_config

# A metric name is read back in gate conditions ("correctness.pass_rate") and CSV
# headers: no dots, spaces or commas, and none of the experiment-wide metrics' names.
NAME = re.compile(r"^[A-Za-z][A-Za-z0-9_-]{0,63}$")
RESERVED_NAMES = frozenset(
    {"pass_rate", "error_rate", "cost", "cost_per_item", "latency_p50", "latency_p95", "latency_ms", "tokens"}
    # Names a template would read as a dict's methods.
    | {"items", "keys", "values", "get"}
)
SECRET_LENGTH = (16, 200)


def _clean_name(name: str) -> str:
    name = (name or "").strip()
    if not NAME.match(name):
        raise InvalidRequest(
            "an evaluator's name is 1 to 64 letters, digits, _ or -, starting with a letter (e.g. correctness)"
        )
    if name.lower() in RESERVED_NAMES:
        raise InvalidRequest(f"{name!r} is the name of an experiment-wide metric; choose another name")
    return name


def _clean_threshold(threshold: Any) -> float:
    if isinstance(threshold, bool) or not isinstance(threshold, int | float) or not 0 <= threshold <= 1:
        raise InvalidRequest("the pass threshold is a number from 0 to 1")
    return float(threshold)


def _clean_secret(secret: str) -> str:
    low, high = SECRET_LENGTH
    if not isinstance(secret, str) or not low <= len(secret.strip()) <= high:
        raise InvalidRequest(f"a webhook secret is {low} to {high} characters")
    return secret.strip()


def _name_taken(project, name: str, *, exclude: int | None = None) -> Conflict:
    other = Evaluator.objects.filter(project=project, name=name).exclude(pk=exclude).first()
    archived = " (an archived one: restore it, or choose another name)" if other and other.archived else ""
    return Conflict(f"an evaluator named {name!r} already exists in this project{archived}")


def evaluator_input(data: dict) -> dict:
    """evaluator_create's and evaluator_update's name, description, config,
    pass_threshold and secret, from a checked page form or API body (both name the
    threshold ``threshold`` and send no secret as a blank)."""
    return {
        "name": data["name"],
        "description": data["description"],
        "config": data["config"],
        "pass_threshold": data["threshold"],
        "secret": data["secret"] or None,
    }


def evaluator_create(
    *,
    project,
    actor,
    name: str,
    kind: str,
    config: dict | None = None,
    description: str = "",
    pass_threshold: float = 0.5,
    secret: str | None = None,
    ip: str | None = None,
) -> tuple[Evaluator, str]:
    """Create an evaluator; return it with its webhook signing secret (webhook kind
    only, "" otherwise), which is shown this once and stored encrypted. A given
    ``secret`` is used instead of a generated one."""
    name = _clean_name(name)
    if kind not in Evaluator.Kind.values:
        raise InvalidRequest(f"unknown evaluator kind {kind!r}; use one of {', '.join(Evaluator.Kind.values)}")
    cleaned = validate_config(kind, config or {})
    threshold = _clean_threshold(pass_threshold)
    if get_kind(kind).signing_secret:
        secret = _clean_secret(secret) if secret else new_webhook_secret()
    elif secret:
        raise InvalidRequest("only webhook evaluators have a signing secret")
    else:
        secret = ""
    try:
        with transaction.atomic():
            evaluator = Evaluator.objects.create(
                organization_id=project.organization_id,
                project=project,
                name=name,
                kind=kind,
                description=description or "",
                config=cleaned,
                pass_threshold=threshold,
                secret_ciphertext=crypto.encrypt(secret) if secret else "",
                created_by=acting_user(actor),
            )
            audit_record(
                organization=project.organization,
                actor=actor,
                action="evaluator.create",
                target=evaluator,
                data={"project": project.slug, "kind": kind},
                ip=ip,
            )
    except IntegrityError:
        raise _name_taken(project, name) from None
    return evaluator, secret


def evaluator_update(
    *,
    evaluator: Evaluator,
    actor,
    name: str | None = None,
    description: str | None = None,
    config: dict | None = None,
    pass_threshold: float | None = None,
    secret: str | None = None,
    archived: bool | None = None,
    kind: str | None = None,
    ip: str | None = None,
) -> Evaluator:
    """Change an evaluator; fields left None keep their value, and a given ``config``
    replaces the whole configuration. The kind never changes (a metric keeps its
    meaning across experiments: create another evaluator instead). Experiments already
    started keep the evaluator as it was. A webhook's signing secret stays with its URL:
    a new URL needs the secret again."""
    if kind is not None and kind != evaluator.kind:
        raise InvalidRequest("an evaluator's kind cannot change (its scores would mean something else): create another")
    changes: dict[str, Any] = {}
    if name is not None:
        changes["name"] = _clean_name(name)
    if description is not None:
        changes["description"] = description
    if config is not None:
        changes["config"] = validate_config(evaluator.kind, config)
    if pass_threshold is not None:
        changes["pass_threshold"] = _clean_threshold(pass_threshold)
    if secret:
        if not get_kind(evaluator.kind).signing_secret:
            raise InvalidRequest("only webhook evaluators have a signing secret")
        changes["secret_ciphertext"] = crypto.encrypt(_clean_secret(secret))
    if archived is not None:
        changes["archived"] = bool(archived)
    try:
        with transaction.atomic():
            locked = Evaluator.objects.select_for_update().get(pk=evaluator.pk)
            if get_kind(locked.kind).signing_secret and "config" in changes:
                check_credential_destination(
                    before=Destination(addresses={"url": locked.config.get("url")}),
                    after=Destination(addresses={"url": changes["config"].get("url")}),
                    stored=bool(locked.secret_ciphertext),
                    supplied="secret_ciphertext" in changes,
                    credential="the signing secret (secret)",
                )
            audited_update(
                locked,
                changes,
                actor=actor,
                action="evaluator.update",
                # Which fields changed, never the secret or a configuration's values.
                data={"fields": sorted(field.replace("_ciphertext", "") for field in changes)},
                ip=ip,
            )
    except IntegrityError:
        raise _name_taken(evaluator.project, changes.get("name", evaluator.name), exclude=evaluator.pk) from None
    return locked


def evaluator_archive(*, evaluator: Evaluator, actor, ip: str | None = None) -> Evaluator:
    """Archive an evaluator: hidden from lists and new experiments, its online rules
    stop, and past scores keep it (rows are never deleted, so results stay explained)."""
    with transaction.atomic():
        locked = Evaluator.objects.select_for_update().get(pk=evaluator.pk)
        if not locked.archived:
            locked.archived = True
            locked.updated_at = timezone.now()
            locked.save(update_fields=["archived", "updated_at"])
            OnlineRule.objects.filter(evaluator=locked, enabled=True).update(enabled=False)
            audit_record(
                organization=locked.project.organization,
                actor=actor,
                action="evaluator.archive",
                target=locked,
                ip=ip,
            )
    return locked
