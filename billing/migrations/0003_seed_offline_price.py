"""Price the offline model at zero (see billing/seed.py), on installs seeded before it existed."""

from django.db import migrations

from billing.seed import OFFLINE_SOURCE, seed_prices


def seed(apps, schema_editor):
    seed_prices(apps.get_model("billing", "ModelPrice"))


def unseed(apps, schema_editor):
    apps.get_model("billing", "ModelPrice").objects.filter(source=OFFLINE_SOURCE).delete()


class Migration(migrations.Migration):
    dependencies = [("billing", "0002_seed_mistral_prices")]

    operations = [migrations.RunPython(seed, unseed)]
