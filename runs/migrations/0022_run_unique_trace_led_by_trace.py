"""run_unique_trace leads with the trace id: ingest looks a batch's runs up by trace id
alone in it and checks the project after (runs.ingest.run_rows._RUNS_OF_TRACES), so the
planner has no project index to take instead (see there)."""

from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("runs", "0021_waiting_runs_only"),
    ]

    operations = [
        migrations.RemoveConstraint(
            model_name="run",
            name="run_unique_trace",
        ),
        migrations.AddConstraint(
            model_name="run",
            constraint=models.UniqueConstraint(fields=("trace_id", "project"), name="run_unique_trace"),
        ),
    ]
