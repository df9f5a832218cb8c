"""Seed the price table with Mistral's public prices, and the offline model at zero.

The rows are literals, frozen as this migration first created them (a migration never
calls live code: billing/seed.py, which once held them, only seeds tests now). Mistral:
models.dev (anomalyco/models.dev providers/mistral, commit of 2026-07-02), cross-checked
with developer.puter.com "Mistral API Pricing (Jun 2026)"; unverified against mistral.ai.
The offline row is here too because this migration created it on every install since
the offline model existed (0003 adds it to installs seeded before)."""

from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

SOURCE = "models.dev providers/mistral (2026-07-02), unverified"
OFFLINE_SOURCE = "AgentOps Studio offline model: free"
EFFECTIVE_FROM = datetime(2026, 7, 2, tzinfo=UTC)
# (pattern, match, input, output): USD per million tokens.
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


def create_rows(model_price) -> None:
    """Create the rows that are missing (``model_price``: the historical ``ModelPrice``,
    or ``Price`` when the test suite seeds again, billing/seed.py)."""
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


def seed(apps, schema_editor):
    create_rows(apps.get_model("billing", "ModelPrice"))


def unseed(apps, schema_editor):
    apps.get_model("billing", "ModelPrice").objects.filter(source=SOURCE).delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
