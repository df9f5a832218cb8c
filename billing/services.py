"""The cost function: every step's cost is computed here, from the price table."""

from __future__ import annotations

import re
import threading
import time
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.utils import timezone

from billing import models as catalog

MILLION = Decimal(1_000_000)
# The price table is small and read for every stored step: each process keeps it in
# memory for a minute, so an edit in the admin applies everywhere within a minute.
_CACHE_SECONDS = 60
_cache: dict[str, object] = {"loaded_at": 0.0, "prices": None}
_cache_lock = threading.Lock()


@dataclass(frozen=True)
class Price:
    id: int
    pattern: str
    match: str
    priority: int
    input_per_million: Decimal
    cached_input_per_million: Decimal | None
    output_per_million: Decimal
    effective_from: datetime


@dataclass(frozen=True)
class Cost:
    amount: Decimal | None  # None: the model has no price (unpriced, never silently zero)
    price_id: int | None


def _prices() -> list[Price]:
    with _cache_lock:
        if _cache["prices"] is None or time.monotonic() - _cache["loaded_at"] > _CACHE_SECONDS:
            _cache["prices"] = [
                Price(
                    p.pk,
                    p.pattern,
                    p.match,
                    p.priority,
                    p.input_per_million,
                    p.cached_input_per_million,
                    p.output_per_million,
                    p.effective_from,
                )
                for p in catalog.Price.objects.filter(
                    kind=catalog.Price.Kind.LLM, status=catalog.Price.Status.PUBLISHED, organization__isnull=True
                )
            ]
            _cache["loaded_at"] = time.monotonic()
        return _cache["prices"]


def prices_changed() -> None:
    """Forget this process's copy of the table (call after editing prices)."""
    with _cache_lock:
        _cache["prices"] = None


def _matches(price: Price, model: str) -> bool:
    """Whether ``price`` applies to ``model`` (lowercased): names and prefixes entered
    with capitals in the admin match too."""
    if price.match == catalog.Price.Match.EXACT:
        return model == price.pattern.lower()
    if price.match == catalog.Price.Match.PREFIX:
        return model.startswith(price.pattern.lower())
    try:
        return re.fullmatch(price.pattern, model, re.IGNORECASE) is not None
    except re.error:
        return False


_MATCH_RANK = {catalog.Price.Match.EXACT: 2, catalog.Price.Match.PREFIX: 1, catalog.Price.Match.REGEX: 0}


def price_for(*, model: str, at: datetime | None = None) -> Price | None:
    """The price in effect for ``model`` at ``at``: exact names first, then the highest
    priority, then the longest pattern, then the newest effective date."""
    if not model:
        return None
    at = at or timezone.now()
    model = model.strip().lower()
    matching = [p for p in _prices() if _matches(p, model)]
    if not matching:
        return None
    candidates = [p for p in matching if p.effective_from <= at]
    if not candidates:
        # A call older than the first price recorded for its model (the seed's date, a
        # client's clock behind ours): that first price is the best estimate, and
        # "unpriced" would say the model has no price at all.
        first = min(p.effective_from for p in matching)
        candidates = [p for p in matching if p.effective_from == first]
    return max(candidates, key=lambda p: (_MATCH_RANK[p.match], p.priority, len(p.pattern), p.effective_from))


def step_cost(
    *, model: str, input_tokens: int, cached_input_tokens: int, output_tokens: int, at: datetime | None = None
) -> Cost:
    """The cost of one model call. Cached input tokens are part of ``input_tokens``
    (as OpenTelemetry reports them) and are billed at the cached rate when there is one."""
    price = price_for(model=model, at=at)
    if price is None:
        return Cost(amount=None, price_id=None)
    cached = min(max(cached_input_tokens, 0), max(input_tokens, 0))
    uncached = max(input_tokens, 0) - cached
    cached_rate = (
        price.cached_input_per_million if price.cached_input_per_million is not None else price.input_per_million
    )
    amount = (
        Decimal(uncached) * price.input_per_million
        + Decimal(cached) * cached_rate
        + Decimal(max(output_tokens, 0)) * price.output_per_million
    ) / MILLION
    return Cost(amount=amount.quantize(Decimal("0.000000001")), price_id=price.id)
