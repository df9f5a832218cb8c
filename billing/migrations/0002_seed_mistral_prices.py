"""Seed the price table with Mistral's public prices (see billing/seed.py)."""

from django.db import migrations

from billing.seed import SOURCE, seed_prices


def seed(apps, schema_editor):
    seed_prices(apps.get_model("billing", "ModelPrice"))


def unseed(apps, schema_editor):
    apps.get_model("billing", "ModelPrice").objects.filter(source=SOURCE).delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0001_initial")]

    operations = [migrations.RunPython(seed, unseed)]
