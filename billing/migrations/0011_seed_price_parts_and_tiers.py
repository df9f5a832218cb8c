"""Seed the per-part rates and long-context tiers of the catalog's families (docs/billing.md,
"Prices per part and per tier"): a new version of each row, effective 2026-11-25, so the
steps priced before keep the version that priced them.

The rows are literals (a migration never imports seed code; billing/seed.py runs this
``create_rows`` for the test suite). Written from the providers' pricing pages as widely
published, without network access: each row's source says so.

- Anthropic: a cache write (5-minute) is 1.25x the input rate, a cache read 0.1x;
  extended thinking is billed as output. Sonnet 4 and 4.5 bill a request above 200k input
  tokens at the long-context rates (input x2, output x1.5).
- OpenAI: cached input at its own rate, no surcharge to write the cache (the input rate);
  reasoning tokens are billed as output.
- Google: Gemini 2.5 Pro doubles input and cache rates and bills output x1.5 above 200k
  prompt tokens; thinking tokens are billed as output; creating a cache bills its tokens at
  the input rate (storage per hour is not a per-call cost and is left out).
- Mistral: no separate cache or reasoning rate is published: reasoning (Magistral) is
  billed as output, cached input at the input rate.
"""

from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

EFFECTIVE_FROM = datetime(2026, 11, 25, tzinfo=UTC)
UNVERIFIED = "as widely published, unverified (no network when seeded 2026-11-25)"
ANTHROPIC = f"anthropic.com/pricing (cache write = 5-minute write, thinking = output): {UNVERIFIED}"
OPENAI = f"openai.com/api/pricing (cache write free = input rate, reasoning = output): {UNVERIFIED}"
GOOGLE = f"ai.google.dev/gemini-api/docs/pricing (paid tier; thinking = output; tier above 200k): {UNVERIFIED}"
MISTRAL = f"mistral.ai/pricing (no cache or reasoning rate published: input and output rates): {UNVERIFIED}"

# (provider, source, pattern, match, input, cached input, cache write, output, reasoning, tiers)
# per million tokens; a tier: (above input tokens, input, cached, cache write, output, reasoning).
ROWS = [
    (
        "anthropic",
        ANTHROPIC,
        "claude-sonnet-4",
        "prefix",
        "3.00",
        "0.30",
        "3.75",
        "15.00",
        "15.00",
        [(200_000, "6.00", "0.60", "7.50", "22.50", "22.50")],
    ),
    ("anthropic", ANTHROPIC, "claude-opus-4", "prefix", "15.00", "1.50", "18.75", "75.00", "75.00", []),
    ("anthropic", ANTHROPIC, "claude-opus-4-5", "prefix", "5.00", "0.50", "6.25", "25.00", "25.00", []),
    ("anthropic", ANTHROPIC, "claude-haiku-4-5", "prefix", "1.00", "0.10", "1.25", "5.00", "5.00", []),
    ("anthropic", ANTHROPIC, "claude-3-7-sonnet", "prefix", "3.00", "0.30", "3.75", "15.00", "15.00", []),
    ("anthropic", ANTHROPIC, "claude-3-5-haiku", "prefix", "0.80", "0.08", "1.00", "4.00", "4.00", []),
    ("openai", OPENAI, "gpt-4o", "exact", "2.50", "1.25", "2.50", "10.00", "10.00", []),
    ("openai", OPENAI, "gpt-4o-mini", "prefix", "0.15", "0.075", "0.15", "0.60", "0.60", []),
    ("openai", OPENAI, "gpt-4.1", "prefix", "2.00", "0.50", "2.00", "8.00", "8.00", []),
    ("openai", OPENAI, "o3", "prefix", "2.00", "0.50", "2.00", "8.00", "8.00", []),
    ("openai", OPENAI, "o3-mini", "prefix", "1.10", "0.55", "1.10", "4.40", "4.40", []),
    ("openai", OPENAI, "o4-mini", "prefix", "1.10", "0.275", "1.10", "4.40", "4.40", []),
    ("openai", OPENAI, "gpt-5", "prefix", "1.25", "0.125", "1.25", "10.00", "10.00", []),
    ("openai", OPENAI, "gpt-5-mini", "prefix", "0.25", "0.025", "0.25", "2.00", "2.00", []),
    ("openai", OPENAI, "gpt-5-nano", "prefix", "0.05", "0.005", "0.05", "0.40", "0.40", []),
    (
        "google",
        GOOGLE,
        "gemini-2.5-pro",
        "prefix",
        "1.25",
        "0.125",
        "1.25",
        "10.00",
        "10.00",
        [(200_000, "2.50", "0.25", "2.50", "15.00", "15.00")],
    ),
    ("google", GOOGLE, "gemini-2.5-flash", "prefix", "0.30", "0.03", "0.30", "2.50", "2.50", []),
    ("google", GOOGLE, "gemini-2.5-flash-lite", "prefix", "0.10", "0.01", "0.10", "0.40", "0.40", []),
    ("mistral_ai", MISTRAL, "magistral-medium-", "prefix", "2.00", None, None, "5.00", "5.00", []),
    ("mistral_ai", MISTRAL, "magistral-small-", "prefix", "0.50", None, None, "1.50", "1.50", []),
    ("mistral_ai", MISTRAL, "mistral-medium-2508", "exact", "0.40", None, None, "2.00", "2.00", []),
    ("mistral_ai", MISTRAL, "mistral-small-", "prefix", "0.15", None, None, "0.60", "0.60", []),
]
SOURCES = [ANTHROPIC, OPENAI, GOOGLE, MISTRAL]
RATES = ("input_per_million", "cached_input_per_million", "cache_write_per_million", "output_per_million",
         "reasoning_output_per_million")  # fmt: skip


def _decimal(value):
    return Decimal(value) if value is not None else None


def create_rows(model_price) -> None:
    """Create the rows that are missing (``model_price``: the historical ``Price`` here, the
    live one when the test suite seeds again, billing/seed.py)."""
    for provider, source, pattern, match, *rates, tiers in ROWS:
        model_price.objects.get_or_create(
            kind="llm",
            organization=None,
            pattern=pattern,
            match=match,
            provider=provider,
            effective_from=EFFECTIVE_FROM,
            status="published",
            defaults={
                **{name: _decimal(rate) for name, rate in zip(RATES, rates, strict=True)},
                "tiers": [
                    {"above_input_tokens": above, **{name: rate for name, rate in zip(RATES, tier, strict=True)}}
                    for above, *tier in tiers
                ],
                "source": source,
            },
        )


def seed(apps, schema_editor):
    create_rows(apps.get_model("billing", "Price"))


def unseed(apps, schema_editor):
    apps.get_model("billing", "Price").objects.filter(
        organization=None, source__in=SOURCES, effective_from=EFFECTIVE_FROM
    ).delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0010_price_parts_tiers_and_billing_settings")]
    operations = [migrations.RunPython(seed, unseed)]
