"""The cost of a model call, part by part: each provider family's published arithmetic for
a call with cache reads, cache writes and reasoning tokens, at the rates the catalog seeds
(billing/migrations/0011_seed_price_parts_and_tiers.py), long-context tiers, and no token
ever priced twice."""

from __future__ import annotations

import random
from datetime import UTC, datetime
from decimal import Decimal

import pytest
from django.core.exceptions import ValidationError

from billing.models import Price
from billing.services import check_tiers, cost_parts, price_for, step_cost, tokens_cost

# After the seeded part rates took effect (2026-11-25).
AT = datetime(2026, 11, 26, tzinfo=UTC)
M = Decimal(1_000_000)


def _cost(model: str, **tokens) -> Decimal:
    cost = step_cost(model=model, at=AT, **tokens)
    assert cost.price_id is not None, f"{model} has a price"
    return cost.amount


def test_anthropic_prices_cache_reads_writes_and_thinking_as_published(db):
    # anthropic.com/pricing, Claude Sonnet 4.5: input $3, 5-minute cache write $3.75 (1.25x),
    # cache hit $0.30 (0.1x), output $15 per million tokens; thinking is billed as output.
    # 10,000 input tokens of which 6,000 read from the cache and 2,000 written to it;
    # 3,000 output tokens of which 1,000 thinking.
    expected = (
        2_000 * Decimal("3")
        + 6_000 * Decimal("0.30")
        + 2_000 * Decimal("3.75")
        + 2_000 * Decimal("15")
        + 1_000 * Decimal("15")
    ) / M
    assert expected == Decimal("0.0603")
    amount = _cost(
        "claude-sonnet-4-5-20250929",
        input_tokens=10_000,
        cached_input_tokens=6_000,
        cache_write_input_tokens=2_000,
        output_tokens=3_000,
        reasoning_output_tokens=1_000,
    )
    assert amount == expected


def test_anthropic_long_context_tier_prices_the_whole_call_at_its_rates(db):
    # Above 200k input tokens Sonnet 4/4.5 bill input $6, cache hit $0.60, cache write
    # $7.50 and output $22.50 per million, for every token of the request.
    expected = (
        150_000 * Decimal("6")
        + 100_000 * Decimal("0.60")
        + 50_000 * Decimal("7.50")
        + 1_500 * Decimal("22.50")
        + 500 * Decimal("22.50")
    ) / M
    assert expected == Decimal("1.38")
    amount = _cost(
        "claude-sonnet-4-5",
        input_tokens=300_000,
        cached_input_tokens=100_000,
        cache_write_input_tokens=50_000,
        output_tokens=2_000,
        reasoning_output_tokens=500,
    )
    assert amount == expected


def test_openai_prices_cached_input_and_reasoning_as_published(db):
    # openai.com/api/pricing, o3: input $2, cached input $0.50, output $8 per million;
    # writing the cache costs nothing extra (input rate); reasoning tokens are output tokens.
    # 10,000 input (4,000 cached, 1,000 written), 5,000 output of which 4,000 reasoning.
    expected = (
        5_000 * Decimal("2")
        + 4_000 * Decimal("0.50")
        + 1_000 * Decimal("2")
        + 1_000 * Decimal("8")
        + 4_000 * Decimal("8")
    ) / M
    assert expected == Decimal("0.054")
    amount = _cost(
        "o3-2025-04-16",
        input_tokens=10_000,
        cached_input_tokens=4_000,
        cache_write_input_tokens=1_000,
        output_tokens=5_000,
        reasoning_output_tokens=4_000,
    )
    assert amount == expected


def test_google_prices_thinking_as_output_and_switches_tier_above_200k(db):
    # ai.google.dev pricing, Gemini 2.5 Pro, prompts up to 200k: input $1.25, context cache
    # $0.125, output (thinking included) $10; above 200k: $2.50, $0.25 and $15.
    # Creating a cache bills its tokens at the input rate (its hourly storage is no per-call cost).
    small = (
        50_000 * Decimal("1.25") + 40_000 * Decimal("0.125") + 10_000 * Decimal("1.25") + 8_000 * Decimal("10")
    ) / M
    assert small == Decimal("0.16")
    assert small == _cost(
        "gemini-2.5-pro",
        input_tokens=100_000,
        cached_input_tokens=40_000,
        cache_write_input_tokens=10_000,
        output_tokens=8_000,
        reasoning_output_tokens=6_000,
    )
    large = (
        140_000 * Decimal("2.50") + 100_000 * Decimal("0.25") + 10_000 * Decimal("2.50") + 10_000 * Decimal("15")
    ) / M
    assert large == Decimal("0.55")
    assert large == _cost(
        "gemini-2.5-pro",
        input_tokens=250_000,
        cached_input_tokens=100_000,
        cache_write_input_tokens=10_000,
        output_tokens=10_000,
        reasoning_output_tokens=4_000,
    )


def test_mistral_prices_reasoning_as_output_and_cached_input_at_the_input_rate(db):
    # mistral.ai/pricing, Magistral Medium: input $2, output $5 per million; no cache or
    # reasoning rate is published, so cached input costs the input rate and reasoning the
    # output rate.
    expected = (
        14_000 * Decimal("2")
        + 5_000 * Decimal("2")
        + 1_000 * Decimal("2")
        + 1_000 * Decimal("5")
        + 5_000 * Decimal("5")
    ) / M
    assert expected == Decimal("0.07")
    amount = _cost(
        "magistral-medium-2509",
        input_tokens=20_000,
        cached_input_tokens=5_000,
        cache_write_input_tokens=1_000,
        output_tokens=6_000,
        reasoning_output_tokens=5_000,
    )
    assert amount == expected


@pytest.mark.parametrize(
    ("input_tokens", "cached", "cache_write", "output_tokens", "reasoning"),
    [
        (1_000, 0, 0, 100, 0),
        (1_000, 1_000, 0, 100, 100),
        (1_000, 400, 600, 100, 40),
        (1_000, 900, 900, 100, 500),  # parts larger than their whole: capped, never added
        (0, 50, 50, 0, 10),
        (250_000, 100_000, 100_000, 30_000, 30_000),
    ],
)
def test_a_call_prices_each_token_exactly_once(db, input_tokens, cached, cache_write, output_tokens, reasoning):
    price = price_for(model="claude-sonnet-4-5", at=AT)
    parts = cost_parts(
        price=price,
        input_tokens=input_tokens,
        cached_input_tokens=cached,
        cache_write_input_tokens=cache_write,
        output_tokens=output_tokens,
        reasoning_output_tokens=reasoning,
    )
    tokens = {part.part: part.tokens for part in parts}
    assert tokens["input"] + tokens["cached_input"] + tokens["cache_write"] == input_tokens
    assert tokens["output"] + tokens["reasoning_output"] == output_tokens
    assert all(part.tokens >= 0 for part in parts)
    # With every part at its whole's rate the cost is the plain input + output arithmetic.
    flat = Price(input_per_million=Decimal("3"), output_per_million=Decimal("15"))
    assert (
        tokens_cost(
            price=flat,
            input_tokens=input_tokens,
            cached_input_tokens=cached,
            cache_write_input_tokens=cache_write,
            output_tokens=output_tokens,
            reasoning_output_tokens=reasoning,
        )
        == (input_tokens * Decimal("3") + output_tokens * Decimal("15")) / M
    )


def test_the_cost_is_the_sum_of_its_parts_for_every_seeded_price(db):
    # tokens_cost adds the parts without building them (ingestion prices every model
    # step): the same amount as cost_parts' sum, for every published LLM price, tiered
    # ones and calls above their thresholds among them.
    rng = random.Random(19)
    prices = list(Price.objects.filter(kind=Price.Kind.LLM, status=Price.Status.PUBLISHED))
    prices.append(
        Price(
            input_per_million=Decimal("1.25"),
            output_per_million=Decimal("10"),
            cached_input_per_million=Decimal("0.125"),
            tiers=[{"above_input_tokens": 200_000, "input_per_million": "2.5", "output_per_million": "15"}],
        )
    )
    assert any(price.tiers for price in prices)
    for price in prices:
        for _ in range(25):
            tokens = {
                "input_tokens": rng.choice([0, 1, rng.randrange(10**3), rng.randrange(10**7), -5]),
                "cached_input_tokens": rng.choice([0, rng.randrange(10**6)]),
                "cache_write_input_tokens": rng.choice([0, rng.randrange(10**6)]),
                "output_tokens": rng.choice([0, rng.randrange(10**5), 10**9]),
                "reasoning_output_tokens": rng.choice([0, rng.randrange(10**5)]),
            }
            parts = sum((part.amount for part in cost_parts(price=price, **tokens)), Decimal(0))
            assert tokens_cost(price=price, **tokens) == parts.quantize(Decimal("0.000000001")), (price, tokens)


def test_a_tier_applies_above_its_threshold_only():
    price = Price(
        input_per_million=Decimal("1"),
        output_per_million=Decimal("2"),
        tiers=[{"above_input_tokens": 1_000, "input_per_million": "10"}],
    )
    at_threshold = tokens_cost(price=price, input_tokens=1_000, cached_input_tokens=0, output_tokens=1_000)
    above = tokens_cost(price=price, input_tokens=1_001, cached_input_tokens=0, output_tokens=1_000)
    assert at_threshold == (1_000 * Decimal(1) + 1_000 * Decimal(2)) / M
    # The output rate the tier leaves out stays the base one.
    assert above == (1_001 * Decimal(10) + 1_000 * Decimal(2)) / M


@pytest.mark.parametrize(
    ("tiers", "message"),
    [
        ([{"above_input_tokens": -1, "input_per_million": "2"}], "above_input_tokens must be a whole number from 0"),
        ([{"above_input_tokens": 10, "input_per_million": "-2"}], "input_per_million must be a number from 0"),
        ([{"above_input_tokens": 10, "output_per_million": "many"}], "output_per_million must be a number from 0"),
        ([{"above_input_tokens": "10"}], "above_input_tokens must be a whole number from 0"),
        ([{"above_input_tokens": 10, "discount": "1"}], "unknown key(s) discount"),
        ({"above_input_tokens": 10}, "Tiers must be a list"),
    ],
)
def test_tiers_that_cannot_price_a_call_are_refused(tiers, message):
    with pytest.raises(ValidationError) as error:
        check_tiers(tiers)
    assert message in " ".join(error.value.messages)
