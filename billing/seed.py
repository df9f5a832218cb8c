"""The public prices the price table starts with (USD per million tokens).

Source: models.dev (anomalyco/models.dev providers/mistral, commit of 2026-07-02),
cross-checked with developer.puter.com "Mistral API Pricing (Jun 2026)"; unverified
against mistral.ai. Prices are data: staff edit them in the admin. Used by the seed
migration (billing/migrations/0002) and by the test suite, whose transactional tests
empty every table between tests."""

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
