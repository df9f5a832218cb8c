"""Seed the catalog beyond Mistral: OpenAI, Anthropic and Google list prices, tool units
and GPU hours (see billing/seed.py; unverified and illustrative rows say so in their
source)."""

from django.db import migrations

from billing.seed import CATALOG_SOURCES, seed_catalog_additions


def seed(apps, schema_editor):
    seed_catalog_additions(apps.get_model("billing", "Price"))


def unseed(apps, schema_editor):
    # Rows that priced steps are protected by the steps' foreign key: unseeding then
    # fails loudly rather than leaving steps without their price.
    apps.get_model("billing", "Price").objects.filter(organization=None, source__in=CATALOG_SOURCES).delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0005_catalog_ledger_budgets")]

    operations = [migrations.RunPython(seed, unseed)]
