"""The cost functions: every step's, tool call's and GPU hour's cost is computed here,
from the published price catalog (``billing.models.Price``, see docs/billing.md)."""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from billing import models as catalog

MILLION = Decimal(1_000_000)
NANO = Decimal("0.000000001")
# The catalog is small and read for every stored step: each process keeps it in memory
# for a minute, so an edit in the admin applies everywhere within a minute.
_CACHE_SECONDS = 60
_cache: dict[str, object] = {"loaded_at": 0.0, "prices": None}
_cache_lock = threading.Lock()

LLM = catalog.Price.Kind.LLM
TOOL = catalog.Price.Kind.TOOL
GPU = catalog.Price.Kind.GPU


@dataclass(frozen=True)
class PublishedPrice:
    """One published version of a catalog row (``billing.models.Price``), as the cost
    functions read it: a frozen copy this process caches for a minute."""

    id: int
    pattern: str
    match: str
    priority: int
    input_per_million: Decimal | None
    cached_input_per_million: Decimal | None
    output_per_million: Decimal | None
    effective_from: datetime
    kind: str = LLM
    provider: str = ""
    organization_id: int | None = None
    unit: str = ""
    unit_price: Decimal | None = None
    hourly: Decimal | None = None
    currency: str = "USD"


@dataclass(frozen=True)
class Cost:
    amount: Decimal | None  # None: no price (for a model: unpriced, never silently zero)
    price_id: int | None


def _version(row: catalog.Price) -> PublishedPrice:
    return PublishedPrice(
        id=row.pk,
        pattern=row.pattern,
        match=row.match,
        priority=row.priority,
        input_per_million=row.input_per_million,
        cached_input_per_million=row.cached_input_per_million,
        output_per_million=row.output_per_million,
        effective_from=row.effective_from,
        kind=row.kind,
        provider=row.provider,
        organization_id=row.organization_id,
        unit=row.unit,
        unit_price=row.unit_price,
        hourly=row.hourly,
        currency=row.currency,
    )


def _prices(kind: str, organization_id: int | None) -> list[PublishedPrice]:
    """The published versions of ``kind`` owned by ``organization_id`` (None: public).
    Drafts are never loaded: they only serve recompute previews."""
    with _cache_lock:
        if _cache["prices"] is None or time.monotonic() - _cache["loaded_at"] > _CACHE_SECONDS:
            grouped: dict[tuple[str, int | None], list[PublishedPrice]] = defaultdict(list)
            for row in catalog.Price.objects.filter(status=catalog.Price.Status.PUBLISHED):
                grouped[(row.kind, row.organization_id)].append(_version(row))
            _cache["prices"] = dict(grouped)
            _cache["loaded_at"] = time.monotonic()
        return _cache["prices"].get((kind, organization_id), [])


def prices_changed() -> None:
    """Forget this process's copy of the catalog (call after editing prices)."""
    with _cache_lock:
        _cache["prices"] = None


def _matching(kind: str, owner: int | None, name: str) -> list[PublishedPrice]:
    """The versions of ``kind`` owned by ``owner`` whose pattern matches ``name``, kept
    with the catalog's copy (a batch prices the same few models hundreds of times)."""
    prices = _prices(kind, owner)
    key = (kind, owner, name)
    with _cache_lock:
        memo = _cache.setdefault("matching", {})
        if memo.get("for") is not _cache["prices"]:
            memo.clear()
            memo["for"] = _cache["prices"]
        if key not in memo:
            if len(memo) > 10_000:  # names are the clients': bound the memory
                memo.clear()
                memo["for"] = _cache["prices"]
            memo[key] = [p for p in prices if _matches(p, name)]
        return memo[key]


def _matches(price: PublishedPrice, name: str) -> bool:
    """Whether ``price`` applies to ``name`` (lowercased): names and prefixes entered
    with capitals in the admin match too."""
    if price.match == catalog.Price.Match.EXACT:
        return name == price.pattern.lower()
    if price.match == catalog.Price.Match.PREFIX:
        return name.startswith(price.pattern.lower())
    try:
        return re.fullmatch(price.pattern, name, re.IGNORECASE) is not None
    except re.error:
        return False


_MATCH_RANK = {catalog.Price.Match.EXACT: 2, catalog.Price.Match.PREFIX: 1, catalog.Price.Match.REGEX: 0}


def _best(matching: list[PublishedPrice], at: datetime) -> PublishedPrice | None:
    """The version in effect at ``at`` among ``matching``: exact names first, then the
    highest priority, then the longest pattern, then the newest effective date."""
    in_effect = [p for p in matching if p.effective_from <= at]
    if not in_effect:
        return None
    return max(in_effect, key=lambda p: (_MATCH_RANK[p.match], p.priority, len(p.pattern), p.effective_from))


def _earliest(matching: list[PublishedPrice]) -> PublishedPrice | None:
    if not matching:
        return None
    first = min(p.effective_from for p in matching)
    return max(
        (p for p in matching if p.effective_from == first),
        key=lambda p: (_MATCH_RANK[p.match], p.priority, len(p.pattern)),
    )


def _lookup(
    *, kind: str, name: str, at: datetime | None, organization_id: int | None, providers: tuple[str, ...] | None = None
) -> PublishedPrice | None:
    """The price of ``name`` at ``at``: the organization's negotiated prices in effect
    win over every public one, whatever their match or priority. ``providers`` (GPU
    backends) restricts the rows, the first provider with a match winning."""
    if not name:
        return None
    at = at or timezone.now()
    name = name.strip().lower()

    def groups(owner: int | None) -> list[list[PublishedPrice]]:
        rows = _matching(kind, owner, name)
        if providers is None:
            return [rows]
        return [[p for p in rows if p.provider.lower() == provider] for provider in providers]

    negotiated = groups(organization_id) if organization_id is not None else []
    public = groups(None)
    for group in negotiated + public:
        if found := _best(group, at):
            return found
    # A call older than every price recorded for its name (the seed's date, a client's
    # clock behind ours): the first price is the best estimate, and "unpriced" would say
    # the model has no price at all. Public first: the negotiation came later.
    for group in public + negotiated:
        if found := _earliest(group):
            return found
    return None


def price_for(*, model: str, at: datetime | None = None, organization_id: int | None = None) -> PublishedPrice | None:
    """The LLM price in effect for ``model`` at ``at`` (now by default), the
    organization's negotiated price first."""
    return _lookup(kind=LLM, name=model, at=at, organization_id=organization_id)


def tokens_cost(*, price, input_tokens: int, cached_input_tokens: int, output_tokens: int) -> Decimal:
    """The cost of a model call at ``price`` (a ``PublishedPrice`` or a catalog row, a draft
    too: recompute previews use it). Cached input tokens are part of ``input_tokens``
    (as OpenTelemetry reports them) and cost the cached rate when there is one."""
    input_rate = price.input_per_million or Decimal(0)
    output_rate = price.output_per_million or Decimal(0)
    cached_rate = price.cached_input_per_million if price.cached_input_per_million is not None else input_rate
    cached = min(max(cached_input_tokens, 0), max(input_tokens, 0))
    uncached = max(input_tokens, 0) - cached
    amount = (
        Decimal(uncached) * input_rate + Decimal(cached) * cached_rate + Decimal(max(output_tokens, 0)) * output_rate
    ) / MILLION
    return amount.quantize(NANO)


def step_cost(
    *,
    model: str,
    input_tokens: int,
    cached_input_tokens: int,
    output_tokens: int,
    at: datetime | None = None,
    organization_id: int | None = None,
) -> Cost:
    """The cost of one model call and the price version used; ``amount`` None means
    the model has no price (the step is unpriced, never silently free)."""
    price = price_for(model=model, at=at, organization_id=organization_id)
    if price is None:
        return Cost(amount=None, price_id=None)
    amount = tokens_cost(
        price=price, input_tokens=input_tokens, cached_input_tokens=cached_input_tokens, output_tokens=output_tokens
    )
    return Cost(amount=amount, price_id=price.id)


def tool_cost(
    *,
    tool_name: str,
    calls: int = 1,
    characters: int = 0,
    seconds: float = 0.0,
    at: datetime | None = None,
    organization_id: int | None = None,
) -> Cost:
    """The cost of a tool's use, by its price's unit (call, character or second).
    A tool without a price costs nothing by design (most tools are the agent's own
    code): ``amount`` is None and the call is not unpriced, unlike a model's."""
    price = _lookup(kind=TOOL, name=tool_name, at=at, organization_id=organization_id)
    if price is None or price.unit_price is None:
        return Cost(amount=None, price_id=None)
    quantity = {
        catalog.Price.Unit.CHARACTER: Decimal(max(characters, 0)),
        catalog.Price.Unit.SECOND: Decimal(str(max(seconds, 0.0))),
    }.get(price.unit, Decimal(max(calls, 0)))
    return Cost(amount=(quantity * price.unit_price).quantize(NANO), price_id=price.id)


def gpu_hourly_rate(
    *, hardware: str, backend: str = "", at: datetime | None = None, organization_id: int | None = None
) -> PublishedPrice | None:
    """The hourly price of ``hardware`` (``a100``, ``h100``...) on ``backend`` at ``at``:
    a price for that backend (its ``provider``) first, then one for any backend
    (``provider`` empty); None when the hardware has no price."""
    backend = backend.strip().lower()
    providers = (backend, "") if backend else ("",)
    return _lookup(kind=GPU, name=hardware, at=at, organization_id=organization_id, providers=providers)
