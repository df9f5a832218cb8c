"""The index of sub-agent runs waiting for their parent holds those runs only, not every
root run (their parent trace id is empty): the lock of a batch's runs (ingest) found it
too large before the table had statistics and read all of the project's runs instead."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0005_invitation_email_delivery"),
        ("runs", "0020_item_step_unconstrained"),
    ]

    operations = [
        migrations.RemoveIndex(
            model_name="run",
            name="run_waiting_for_parent",
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                condition=models.Q(("parent_run__isnull", True), models.Q(("parent_trace_id", ""), _negated=True)),
                fields=["project", "parent_trace_id"],
                name="run_waiting_for_parent",
            ),
        ),
    ]
