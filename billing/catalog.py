"""Writes to the price catalog: a published price is never changed in place (steps point
at the version that priced them), so a change adds a version; each write is audited."""

from __future__ import annotations

from datetime import datetime

from django.core.exceptions import ValidationError
from django.db import transaction
from django.forms.models import model_to_dict
from django.utils import timezone

from agentops.errors import InvalidRequest
from agentops.services.audit import audit_record
from billing.models import Price
from billing.services import check_tiers, prices_changed

# Fields that are bookkeeping, not the price: never compared nor copied by hand.
_BOOKKEEPING = {"id", "created_by", "created_at"}


def _values(price: Price) -> dict:
    return {name: value for name, value in model_to_dict(price).items() if name not in _BOOKKEEPING}


def _json(value):
    return value if value is None or isinstance(value, (bool, int, str)) else str(value)


def _snapshot(price: Price) -> dict:
    return {name: _json(value) for name, value in _values(price).items()}


def _audit(*, price: Price, actor, action: str, data: dict, ip: str | None) -> None:
    """Record the change in the audit log: the organization's for its negotiated price,
    the platform's (no organization, read by staff in the admin) for a public one."""
    audit_record(organization=price.organization, actor=actor, action=action, target=price, data=data, ip=ip)


def _check(price: Price) -> None:
    """Refuse a price whose tiers cannot price a call (the admin's form says so first)."""
    try:
        check_tiers(price.tiers)
    except ValidationError as error:
        raise InvalidRequest(" ".join(error.messages)) from None


def _refresh_prices() -> None:
    # Now for this process, and again once committed: another request of this process
    # could reload the catalog before the transaction commits.
    prices_changed()
    transaction.on_commit(prices_changed)


def price_create(*, price: Price, actor, ip: str | None = None) -> Price:
    """Add a price (a new name, a new version or a draft)."""
    _check(price)
    with transaction.atomic():
        price.pk = None
        price._state.adding = True
        price.created_by = actor
        price.created_at = timezone.now()
        price.save()
        _audit(price=price, actor=actor, action="price.create", data=_snapshot(price), ip=ip)
    _refresh_prices()
    return price


def price_update(*, price: Price, actor, ip: str | None = None) -> Price:
    """Apply the edits made to ``price`` (a modified copy of a stored row; nothing
    happens if no value differs). A published price becomes a new version, effective
    from the ``effective_from`` given if it was changed, else from now, and the stored
    one stays as it was; a draft is edited in place (nothing was priced with it)."""
    _check(price)
    with transaction.atomic():
        stored = Price.objects.select_for_update().get(pk=price.pk)
        before, after = _values(stored), _values(price)
        changes = {name: [_json(before[name]), _json(value)] for name, value in after.items() if before[name] != value}
        if not changes:
            return price
        if stored.status == Price.Status.DRAFT:
            price.save()
            action = "price.change"
        else:
            changed_from = price.effective_from if price.effective_from != stored.effective_from else None
            _new_version(price=price, actor=actor, effective_from=changed_from)
            action = "price.version"
        _audit(
            price=price,
            actor=actor,
            action=action,
            data={"previous_id": stored.pk, "effective_from": price.effective_from.isoformat(), "changes": changes},
            ip=ip,
        )
    _refresh_prices()
    return price


def _new_version(*, price: Price, actor, effective_from: datetime | None) -> Price:
    price.pk = None
    price._state.adding = True
    price.effective_from = effective_from or timezone.now()
    price.created_by = actor
    price.created_at = timezone.now()
    price.save()
    return price


def price_delete(*, price: Price, actor, ip: str | None = None) -> None:
    """Delete a price version (refused, PROTECT, when steps were priced with it)."""
    with transaction.atomic():
        _audit(price=price, actor=actor, action="price.delete", data=_snapshot(price), ip=ip)
        price.delete()
    _refresh_prices()
