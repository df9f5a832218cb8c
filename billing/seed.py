"""The public prices the catalog starts with (USD; tokens per million).

Mistral: models.dev (anomalyco/models.dev providers/mistral, commit of 2026-07-02),
cross-checked with developer.puter.com "Mistral API Pricing (Jun 2026)"; unverified
against mistral.ai. OpenAI, Anthropic and Google: their widely published list prices,
written from memory without network access: every row says "unverified" in its source.
Tool units and GPU hours are illustrative list prices, to be replaced by the contracted
ones. Prices are data: staff edit them in the admin (a change adds a version).

Used by the seed migrations (0002 and 0003: ``seed_prices``, written for the historical
``ModelPrice``; 0006: ``seed_catalog_additions``) and by the test suite
(``seed_catalog``), whose transactional tests empty every table between tests."""

from datetime import UTC, datetime
from decimal import Decimal

SOURCE = "models.dev providers/mistral (2026-07-02), unverified"
EFFECTIVE_FROM = datetime(2026, 7, 2, tzinfo=UTC)
# (pattern, match, input, output)
MISTRAL_PRICES = [
    ("mistral-large-", "prefix", "0.50", "1.50"),
    ("mistral-medium-2604", "exact", "1.50", "7.50"),
    ("mistral-medium-latest", "exact", "1.50", "7.50"),
    ("mistral-medium-2508", "exact", "0.40", "2.00"),
    ("mistral-small-", "prefix", "0.15", "0.60"),
    ("codestral-", "prefix", "0.30", "0.90"),
    ("ministral-3b-", "prefix", "0.04", "0.04"),
    ("ministral-8b-", "prefix", "0.10", "0.10"),
    ("open-mistral-nemo", "prefix", "0.15", "0.15"),
    ("magistral-medium-", "prefix", "2.00", "5.00"),
    ("magistral-small-", "prefix", "0.50", "1.50"),
    ("pixtral-large-", "prefix", "2.00", "6.00"),
    ("pixtral-12b", "prefix", "0.15", "0.15"),
]


# The platform's scripted offline model (agentops/llm/offline.py) costs nothing.
OFFLINE_SOURCE = "AgentOps Studio offline model: free"


def seed_prices(model_price) -> None:
    """Create the seed rows that are missing (``model_price`` is the model class,
    historical in a migration)."""
    for pattern, match, input_price, output_price in MISTRAL_PRICES:
        model_price.objects.get_or_create(
            pattern=pattern,
            match=match,
            effective_from=EFFECTIVE_FROM,
            defaults={
                "provider": "mistral_ai",
                "input_per_million": Decimal(input_price),
                "output_per_million": Decimal(output_price),
                "source": SOURCE,
            },
        )
    model_price.objects.get_or_create(
        pattern="offline",
        match="exact",
        effective_from=EFFECTIVE_FROM,
        defaults={
            "provider": "agentops",
            "input_per_million": Decimal(0),
            "output_per_million": Decimal(0),
            "source": OFFLINE_SOURCE,
        },
    )


# --- Added by migration 0006: other providers, tool units, GPU hours ------------------

# Every row of 0006 starts on the same date as the Mistral rows, so a step is priced by
# the same rule whatever its provider.
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


def seed_catalog_additions(model_price) -> None:
    """Create the public rows of migration 0006 that are missing (``model_price`` is the
    ``Price`` model class, historical in a migration)."""

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


def seed_catalog(model_price) -> None:
    """The whole public catalog of a fresh install: what migrations 0002, 0003 and 0006
    create (the test suite's fixture)."""
    seed_prices(model_price)
    seed_catalog_additions(model_price)
