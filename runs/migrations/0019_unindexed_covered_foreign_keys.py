"""Foreign keys whose own index is covered by another index leading with the same column
lose it (their constraint, if any, stays): each was written on every ingest for nothing, and the
runs' project index let the planner read a whole project's runs to lock a batch's when
the table's statistics were not yet gathered (docs/performance.md).

Only the indexes are dropped (and recreated backwards): Django's AlterField would also
drop and re-validate each foreign key constraint, a scan of the whole table."""

import django.db.models.deletion
from django.db import migrations, models

# (table, column, index name as Django named it)
INDEXES = [
    ("runs_run", "project_id", "runs_run_project_id_f1a383ab"),
    ("runs_step", "run_id", "runs_step_run_id_2764751d"),
    ("runs_step", "project_id", "runs_step_project_id_c3d00976"),
    ("runs_message", "run_id", "runs_message_run_id_23cc6942"),
    ("runs_toolcall", "run_id", "runs_toolcall_run_id_d2fbb3a3"),
]


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0005_invitation_email_delivery"),
        ("runs", "0018_agent_platform"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f'DROP INDEX IF EXISTS "{index}"', f'CREATE INDEX IF NOT EXISTS "{index}" ON "{table}" ("{column}")'
                )
                for table, column, index in INDEXES
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="message",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="messages",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="project",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs",
                        to="agentops.project",
                    ),
                ),
                migrations.AlterField(
                    model_name="step",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="steps",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="step",
                    name="project",
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="+",
                        to="agentops.project",
                    ),
                ),
                migrations.AlterField(
                    model_name="toolcall",
                    name="run",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="tool_calls",
                        to="runs.run",
                    ),
                ),
            ],
        )
    ]
