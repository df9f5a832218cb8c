"""run_unique_trace leads with the trace id: ingest looks a batch's runs up by trace id
alone in it and checks the project after (runs.ingest.run_rows._RUNS_OF_TRACES), so the
planner has no project index to take instead (see there).

The new index is built CONCURRENTLY, without blocking ingestion however large runs_run
is (this migration is therefore not atomic), then takes the constraint's place in one
statement: the table is never without its unique constraint. A build that failed midway
leaves an invalid index, which the next attempt drops first."""

from django.db import migrations, models

NEW_INDEX = "run_unique_trace_new"


def _swap(columns: str) -> list[str]:
    return [
        f"DROP INDEX CONCURRENTLY IF EXISTS {NEW_INDEX}",
        f"CREATE UNIQUE INDEX CONCURRENTLY {NEW_INDEX} ON runs_run ({columns})",
        "ALTER TABLE runs_run DROP CONSTRAINT run_unique_trace, "
        f"ADD CONSTRAINT run_unique_trace UNIQUE USING INDEX {NEW_INDEX}",
    ]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("runs", "0021_waiting_runs_only"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    sql=_swap("trace_id, project_id"),
                    reverse_sql=_swap("project_id, trace_id"),
                ),
            ],
            state_operations=[
                migrations.RemoveConstraint(
                    model_name="run",
                    name="run_unique_trace",
                ),
                migrations.AddConstraint(
                    model_name="run",
                    constraint=models.UniqueConstraint(fields=("trace_id", "project"), name="run_unique_trace"),
                ),
            ],
        ),
    ]
