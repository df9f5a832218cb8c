"""Price the offline model at zero, on installs seeded before it existed.

Literal rows, frozen as this migration first ran: it created the rows of 0002 that were
missing, the offline model's among them, so it still does (on a fresh install 0002 has
created them all and this adds nothing)."""

from datetime import UTC, datetime
from decimal import Decimal

from django.db import migrations

SOURCE = "models.dev providers/mistral (2026-07-02), unverified"
OFFLINE_SOURCE = "AgentOps Studio offline model: free"
EFFECTIVE_FROM = datetime(2026, 7, 2, tzinfo=UTC)
# (pattern, match, input, output): USD per million tokens, as in 0002.
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
    apps.get_model("billing", "ModelPrice").objects.filter(source=OFFLINE_SOURCE).delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0002_seed_mistral_prices")]

    operations = [migrations.RunPython(seed, unseed)]
