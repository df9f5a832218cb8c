"""The price table becomes the versioned catalog: ModelPrice is renamed Price (rows, ids
and the steps' references kept); the other changes are in the next migration."""

from django.db import migrations


class Migration(migrations.Migration):
    dependencies = [("billing", "0003_seed_offline_price"), ("runs", "0008_run_executed_and_replay_of")]

    operations = [
        migrations.RemoveConstraint(model_name="modelprice", name="model_price_unique"),
        migrations.RenameModel("ModelPrice", "Price"),
    ]
