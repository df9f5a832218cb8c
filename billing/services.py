"""The cost functions: every step's, tool call's and GPU hour's cost is computed here,
from the published price catalog (``billing.models.Price``, see docs/billing.md)."""

from __future__ import annotations

import re
import threading
import time
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any, NamedTuple

from django.conf import settings
from django.core.exceptions import ValidationError
from django.utils import timezone

from billing import models as catalog

MILLION = Decimal(1_000_000)
NANO = Decimal("0.000000001")
ZERO = Decimal(0)
# The catalog is small and read for every stored step: each process keeps it in memory
# for a minute, so an edit in the admin applies everywhere within a minute.
_CACHE_SECONDS = 60
_cache: dict[str, Any] = {"loaded_at": 0.0, "prices": None, "candidates": {}}
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
    cache_write_per_million: Decimal | None = None
    reasoning_output_per_million: Decimal | None = None
    tiers: tuple = ()
    kind: str = LLM
    provider: str = ""
    organization_id: int | None = None
    unit: str = ""
    unit_price: Decimal | None = None
    hourly: Decimal | None = None
    currency: str = "USD"


class Cost(NamedTuple):
    """A cost and the price version it was computed with (a tuple: every priced step
    builds one, and a frozen dataclass's construction costs several times more)."""

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
        cache_write_per_million=row.cache_write_per_million,
        reasoning_output_per_million=row.reasoning_output_per_million,
        tiers=tuple(row.tiers or ()),
        effective_from=row.effective_from,
        kind=row.kind,
        provider=row.provider,
        organization_id=row.organization_id,
        unit=row.unit,
        unit_price=row.unit_price,
        hourly=row.hourly,
        currency=row.currency,
    )


def _catalog() -> dict[tuple[str, int | None], list[PublishedPrice]]:
    """The published versions by (kind, owner: None for public), loaded again after
    ``_CACHE_SECONDS``; the caller holds ``_cache_lock``. Drafts are never loaded: they
    only serve recompute previews."""
    if _cache["prices"] is None or time.monotonic() - _cache["loaded_at"] > _CACHE_SECONDS:
        grouped: dict[tuple[str, int | None], list[PublishedPrice]] = defaultdict(list)
        for row in catalog.Price.objects.filter(status=catalog.Price.Status.PUBLISHED):
            grouped[(row.kind, row.organization_id)].append(_version(row))
        _cache["prices"] = dict(grouped)
        _cache["loaded_at"] = time.monotonic()
        _cache["candidates"] = {}
    return _cache["prices"]


def prices_changed() -> None:
    """Forget this process's copy of the catalog (call after editing prices)."""
    with _cache_lock:
        _cache["prices"] = None


def _candidates(
    kind: str, name: str, organization_id: int | None, providers: tuple[str, ...] | None
) -> tuple[list[list[PublishedPrice]], list[list[PublishedPrice]]]:
    """(the organization's groups, the public groups) of versions whose pattern matches
    ``name`` (lowercased), each best first (``_rank``): one group, or one per provider
    of ``providers`` in that order. Kept with the catalog's copy: a batch prices the same
    few models hundreds of times, and each call then costs one dictionary lookup."""
    key = (kind, name, organization_id, providers)
    with _cache_lock:
        prices = _catalog()
        memo = _cache["candidates"]
        found = memo.get(key)
        if found is None:
            if len(memo) > 10_000:  # names are the clients': bound the memory
                memo.clear()

            def groups(owner: int | None) -> list[list[PublishedPrice]]:
                rows = sorted((p for p in prices.get((kind, owner), ()) if _matches(p, name)), key=_rank, reverse=True)
                if providers is None:
                    return [rows]
                return [[p for p in rows if p.provider.lower() == provider] for provider in providers]

            found = memo[key] = (groups(organization_id) if organization_id is not None else [], groups(None))
        return found


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


def _rank(price: PublishedPrice) -> tuple:
    """Which of two versions in effect wins: exact names first, then the highest
    priority, then the longest pattern, then the newest effective date."""
    return (_MATCH_RANK[price.match], price.priority, len(price.pattern), price.effective_from)


def _best(matching: list[PublishedPrice], at: datetime) -> PublishedPrice | None:
    """The version in effect at ``at`` among ``matching`` (best first, ``_candidates``):
    the first in effect."""
    for price in matching:
        if price.effective_from <= at:
            return price
    return None


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
    negotiated, public = _candidates(kind, name.strip().lower(), organization_id, providers)
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


# The rates of a price's parts, in the order a call's cost is explained.
RATE_FIELDS = (
    "input_per_million",
    "cached_input_per_million",
    "cache_write_per_million",
    "output_per_million",
    "reasoning_output_per_million",
)
TIER_THRESHOLD = "above_input_tokens"


def check_tiers(tiers) -> None:
    """Refuse tiers that cannot price a call: a list of objects, each with a whole
    ``above_input_tokens`` from 0 and rates (those of ``RATE_FIELDS``) from 0."""
    if tiers in (None, ""):
        return
    if not isinstance(tiers, list):
        raise ValidationError({"tiers": "Tiers must be a list of objects."})
    seen = set()
    for index, tier in enumerate(tiers):
        where = f"tier {index + 1}"
        if not isinstance(tier, dict):
            raise ValidationError({"tiers": f"{where} must be an object."})
        unknown = set(tier) - {TIER_THRESHOLD, *RATE_FIELDS}
        if unknown:
            raise ValidationError({"tiers": f"{where}: unknown key(s) {', '.join(sorted(unknown))}."})
        threshold = tier.get(TIER_THRESHOLD)
        if isinstance(threshold, bool) or not isinstance(threshold, int) or threshold < 0:
            raise ValidationError({"tiers": f"{where}: {TIER_THRESHOLD} must be a whole number from 0."})
        if threshold in seen:
            raise ValidationError({"tiers": f"{where}: two tiers start above {threshold} input tokens."})
        seen.add(threshold)
        for name in RATE_FIELDS:
            if name in tier and tier[name] is not None:
                try:
                    rate = Decimal(str(tier[name]))
                except InvalidOperation:
                    rate = None
                if isinstance(tier[name], bool) or rate is None or not rate.is_finite() or rate < 0:
                    raise ValidationError({"tiers": f"{where}: {name} must be a number from 0."})


def _rates(price, input_tokens: int) -> tuple[Decimal | None, ...]:
    """The rates of ``price`` (in ``RATE_FIELDS``' order) for a call of ``input_tokens``
    input tokens: the base ones, overridden by those of the highest tier the call is
    above. A tuple of attributes read directly: every priced step asks."""
    base = (
        price.input_per_million,
        price.cached_input_per_million,
        price.cache_write_per_million,
        price.output_per_million,
        price.reasoning_output_per_million,
    )
    if not price.tiers:
        return base  # most prices
    tiers = [tier for tier in price.tiers if input_tokens > tier[TIER_THRESHOLD]]
    if not tiers:
        return base
    tier = max(tiers, key=lambda tier: tier[TIER_THRESHOLD])
    return tuple(
        rate if tier.get(name) is None else Decimal(str(tier[name]))
        for name, rate in zip(RATE_FIELDS, base, strict=True)
    )


@dataclass(frozen=True)
class CostPart:
    """One part of a call's cost: its tokens, the rate they were priced at and the amount."""

    part: str
    tokens: int
    per_million: Decimal
    amount: Decimal


def _priced_parts(
    *,
    price,
    input_tokens: int,
    cached_input_tokens: int,
    output_tokens: int,
    cache_write_input_tokens: int = 0,
    reasoning_output_tokens: int = 0,
) -> tuple[tuple[str, int, Decimal], ...]:
    """(part, tokens, rate per million) of each part of a model call: the split that
    ``cost_parts`` and ``tokens_cost`` share (their token arguments are these)."""
    input_tokens, output_tokens = max(input_tokens, 0), max(output_tokens, 0)
    input_rate, cached_rate, cache_write_rate, output_rate, reasoning_rate = _rates(price, input_tokens)
    input_rate = input_rate or ZERO
    output_rate = output_rate or ZERO
    cache_read = min(max(cached_input_tokens, 0), input_tokens)
    cache_write = min(max(cache_write_input_tokens, 0), input_tokens - cache_read)
    reasoning = min(max(reasoning_output_tokens, 0), output_tokens)
    return (
        ("input", input_tokens - cache_read - cache_write, input_rate),
        ("cached_input", cache_read, input_rate if cached_rate is None else cached_rate),
        ("cache_write", cache_write, input_rate if cache_write_rate is None else cache_write_rate),
        ("output", output_tokens - reasoning, output_rate),
        ("reasoning_output", reasoning, output_rate if reasoning_rate is None else reasoning_rate),
    )


def cost_parts(*, price, **tokens) -> list[CostPart]:
    """A model call's cost, part by part (the token counts as ``_priced_parts`` takes
    them): every token in exactly one part. Cache reads and cache writes are part of
    ``input_tokens`` and reasoning tokens part of ``output_tokens`` (as OpenTelemetry
    reports them), so a part never exceeds what is left of its whole; an empty rate is
    the input's (cache) or the output's (reasoning)."""
    return [
        CostPart(part, count, rate, Decimal(count) * rate / MILLION)
        for part, count, rate in _priced_parts(price=price, **tokens)
    ]


def tokens_cost(*, price, **tokens) -> Decimal:
    """The cost of a model call at ``price`` (a ``PublishedPrice`` or a catalog row, a draft
    too: recompute previews use it): the sum of its ``cost_parts`` (same arguments), the
    same arithmetic without their objects (ingestion prices every model step). Parts of
    no tokens add nothing: their zero changes no digit of the quantized sum."""
    # Each part's tokens x rate is exact, and so is their sum divided by a million (a
    # power of ten): one division for the call rather than one per part.
    total = Decimal(0)
    for _part, count, rate in _priced_parts(price=price, **tokens):
        if count:
            total += count * rate
    return (total / MILLION).quantize(NANO)


def costs_differ(computed: Decimal | None, reported: Decimal | None) -> bool:
    """Whether a reported cost and the computed cost of the same calls are further apart
    than ``BILLING_COST_TOLERANCE`` (a fraction of the larger of the two)."""
    if computed is None or reported is None:
        return False
    larger = max(abs(computed), abs(reported))
    tolerance = Decimal(str(settings.BILLING_COST_TOLERANCE))
    return larger > 0 and abs(computed - reported) > tolerance * larger


def step_cost(
    *,
    model: str,
    input_tokens: int,
    cached_input_tokens: int,
    output_tokens: int,
    cache_write_input_tokens: int = 0,
    reasoning_output_tokens: int = 0,
    at: datetime | None = None,
    organization_id: int | None = None,
) -> Cost:
    """The cost of one model call and the price version used; ``amount`` None means
    the model has no price (the step is unpriced, never silently free)."""
    price = price_for(model=model, at=at, organization_id=organization_id)
    if price is None:
        return Cost(amount=None, price_id=None)
    amount = tokens_cost(
        price=price,
        input_tokens=input_tokens,
        cached_input_tokens=cached_input_tokens,
        output_tokens=output_tokens,
        cache_write_input_tokens=cache_write_input_tokens,
        reasoning_output_tokens=reasoning_output_tokens,
    )
    return Cost(amount=amount, price_id=price.id)


def tool_cost(
    *,
    tool_name: str,
    calls: int = 1,
    characters: int | Callable[[], int] = 0,
    seconds: float = 0.0,
    at: datetime | None = None,
    organization_id: int | None = None,
) -> Cost:
    """The cost of a tool's use, by its price's unit (call, character or second).
    A tool without a price costs nothing by design (most tools are the agent's own
    code): ``amount`` is None and the call is not unpriced, unlike a model's.
    ``characters`` may be a function giving the count, called only for a tool priced
    per character (counting may mean encoding the tool's input)."""
    price = _lookup(kind=TOOL, name=tool_name, at=at, organization_id=organization_id)
    if price is None or price.unit_price is None:
        return Cost(amount=None, price_id=None)
    if price.unit == catalog.Price.Unit.CHARACTER:
        quantity = Decimal(max(characters() if callable(characters) else characters, 0))
    elif price.unit == catalog.Price.Unit.SECOND:
        quantity = Decimal(str(max(seconds, 0.0)))
    else:
        quantity = Decimal(max(calls, 0))
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
