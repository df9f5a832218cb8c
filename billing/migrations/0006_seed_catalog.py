"""Seed the catalog beyond Mistral: OpenAI, Anthropic and Google list prices, tool units
and GPU hours (unverified and illustrative rows say so in their source).

The rows are literals, frozen as this migration first created them (billing/seed.py only
seeds tests now). OpenAI, Anthropic and Google: their widely published list prices,
written from memory without network access. Tool units and GPU hours are illustrative
list prices, to be replaced by the contracted ones. Prices are data: staff edit them in
the admin (a change adds a version)."""

from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

# Every row starts on the same date as the Mistral rows of 0002, so a step is priced by
# the same rule whatever its provider.
EFFECTIVE_FROM = datetime(2026, 7, 2, tzinfo=UTC)
UNVERIFIED = "list price as widely published, unverified (no network when seeded 2026-07-02)"
OPENAI_SOURCE = f"openai.com/api/pricing: {UNVERIFIED}"
ANTHROPIC_SOURCE = f"anthropic.com/pricing (cached = cache read): {UNVERIFIED}"
GOOGLE_SOURCE = f"ai.google.dev/gemini-api/docs/pricing (paid tier, prompts up to 200k tokens): {UNVERIFIED}"
TOOL_SOURCE = "illustrative list price (AgentOps Studio example, 2026-07-02): replace with the contracted one"
GPU_SOURCE = "illustrative on-demand hourly list price (AgentOps Studio example, 2026-07-02), unverified"

# (provider, source, pattern, match, input, cached input, output): per million tokens.
# Prefixes overlap on purpose (``gpt-4.1`` and ``gpt-4.1-mini``): the longer one wins,
# and an exact name wins over any prefix or regular expression.
OTHER_LLM_PRICES = [
    ("openai", OPENAI_SOURCE, "gpt-4o", "exact", "2.50", "1.25", "10.00"),
    ("openai", OPENAI_SOURCE, r"gpt-4o-\d{4}-\d{2}-\d{2}", "regex", "2.50", "1.25", "10.00"),
    ("openai", OPENAI_SOURCE, "gpt-4o-2024-05-13", "exact", "5.00", None, "15.00"),
    ("openai", OPENAI_SOURCE, "gpt-4o-mini", "prefix", "0.15", "0.075", "0.60"),
    ("openai", OPENAI_SOURCE, "gpt-4.1", "prefix", "2.00", "0.50", "8.00"),
    ("openai", OPENAI_SOURCE, "gpt-4.1-mini", "prefix", "0.40", "0.10", "1.60"),
    ("openai", OPENAI_SOURCE, "gpt-4.1-nano", "prefix", "0.10", "0.025", "0.40"),
    ("anthropic", ANTHROPIC_SOURCE, "claude-opus-4", "prefix", "15.00", "1.50", "75.00"),
    ("anthropic", ANTHROPIC_SOURCE, "claude-opus-4-5", "prefix", "5.00", "0.50", "25.00"),
    ("anthropic", ANTHROPIC_SOURCE, "claude-sonnet-4", "prefix", "3.00", "0.30", "15.00"),
    ("anthropic", ANTHROPIC_SOURCE, "claude-haiku-4-5", "prefix", "1.00", "0.10", "5.00"),
    ("anthropic", ANTHROPIC_SOURCE, "claude-3-7-sonnet", "prefix", "3.00", "0.30", "15.00"),
    ("anthropic", ANTHROPIC_SOURCE, "claude-3-5-sonnet", "prefix", "3.00", "0.30", "15.00"),
    ("anthropic", ANTHROPIC_SOURCE, "claude-3-5-haiku", "prefix", "0.80", "0.08", "4.00"),
    ("anthropic", ANTHROPIC_SOURCE, "claude-3-opus", "prefix", "15.00", "1.50", "75.00"),
    ("anthropic", ANTHROPIC_SOURCE, "claude-3-haiku", "prefix", "0.25", "0.03", "1.25"),
    ("google", GOOGLE_SOURCE, "gemini-2.5-pro", "prefix", "1.25", "0.31", "10.00"),
    ("google", GOOGLE_SOURCE, "gemini-2.5-flash", "prefix", "0.30", "0.075", "2.50"),
    ("google", GOOGLE_SOURCE, "gemini-2.5-flash-lite", "prefix", "0.10", "0.025", "0.40"),
    ("google", GOOGLE_SOURCE, "gemini-2.0-flash", "prefix", "0.10", "0.025", "0.40"),
    ("google", GOOGLE_SOURCE, "gemini-2.0-flash-lite", "prefix", "0.075", None, "0.30"),
    ("google", GOOGLE_SOURCE, "gemini-1.5-pro", "prefix", "1.25", None, "5.00"),
    ("google", GOOGLE_SOURCE, "gemini-1.5-flash", "prefix", "0.075", None, "0.30"),
]

# (provider, pattern, match, unit, price per unit).
TOOL_PRICES = [
    ("", "tts", "prefix", "character", "0.000015"),  # 15 USD per million characters
    ("", "web_search", "exact", "call", "0.010000"),  # 10 USD per thousand searches
    ("", "transcribe", "prefix", "second", "0.000100"),  # 0.006 USD per minute of audio
]

# (backend, hardware, hourly). Backend "": any backend; a backend's own row wins.
GPU_PRICES = [
    ("", "cpu-basic", "0.05"),
    ("", "t4", "0.35"),
    ("", "l4", "0.70"),
    ("", "a10g", "1.00"),
    ("", "a100", "3.00"),
    ("", "h100", "4.00"),
    ("", "h200", "5.50"),
    ("huggingface", "cpu-basic", "0.00"),
    ("huggingface", "t4", "0.40"),
    ("huggingface", "l4", "0.80"),
    ("huggingface", "a100", "2.50"),
    ("huggingface", "h100", "4.50"),
    ("huggingface", "h200", "5.00"),
]

CATALOG_SOURCES = [OPENAI_SOURCE, ANTHROPIC_SOURCE, GOOGLE_SOURCE, TOOL_SOURCE, GPU_SOURCE]


def _decimal(value: str | None) -> Decimal | None:
    return Decimal(value) if value is not None else None


def create_rows(model_price) -> None:
    """Create the rows that are missing (``model_price``: the ``Price`` model class,
    historical here, live when the test suite seeds again, billing/seed.py)."""

    def ensure(kind, provider, pattern, match, **values) -> None:
        model_price.objects.get_or_create(
            kind=kind,
            organization=None,
            pattern=pattern,
            match=match,
            provider=provider,
            effective_from=EFFECTIVE_FROM,
            status="published",
            defaults=values,
        )

    for provider, source, pattern, match, input_price, cached_price, output_price in OTHER_LLM_PRICES:
        ensure(
            "llm",
            provider,
            pattern,
            match,
            input_per_million=_decimal(input_price),
            cached_input_per_million=_decimal(cached_price),
            output_per_million=_decimal(output_price),
            source=source,
        )
    for provider, pattern, match, unit, unit_price in TOOL_PRICES:
        ensure("tool", provider, pattern, match, unit=unit, unit_price=Decimal(unit_price), source=TOOL_SOURCE)
    for backend, hardware, hourly in GPU_PRICES:
        ensure("gpu", backend, hardware, "exact", hourly=Decimal(hourly), source=GPU_SOURCE)


def seed(apps, schema_editor):
    create_rows(apps.get_model("billing", "Price"))


def unseed(apps, schema_editor):
    # Rows that priced steps are protected by the steps' foreign key: unseeding then
    # fails loudly rather than leaving steps without their price.
    apps.get_model("billing", "Price").objects.filter(organization=None, source__in=CATALOG_SOURCES).delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0005_catalog_ledger_budgets")]

    operations = [migrations.RunPython(seed, unseed)]
