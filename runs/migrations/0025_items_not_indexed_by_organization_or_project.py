"""The item tables (steps, messages, tool calls, memory snapshots) lose the indexes
Django made for their organization and project links, and the snapshots the one of their
run link (memory_unique_id and memory_run_sequence lead with it). An item's organization
and project are its run's, and it is deleted with its run (the links become DO_NOTHING in
Django: an organization's or a project's deletion reaches the items through their runs,
by the indexes that lead with run_id). Nothing reads items by organization or project
alone: each index was an entry written per item row for nothing, two to three per span
ingested. docs/performance.md has the figures.

Not atomic: the indexes are dropped (and, backwards, built) CONCURRENTLY, without
blocking ingestion. The links change in Django's state only: they have no constraint in
the database (db_constraint=False), and on_delete is Django's.
"""

import django.db.models.deletion
from django.db import migrations, models

# (table, column, index name as Django named it)
OLD_INDEXES = [
    ("runs_step", "organization_id", "runs_step_organization_id_a5e40907"),
    ("runs_message", "organization_id", "runs_message_organization_id_0c10a7aa"),
    ("runs_message", "project_id", "runs_message_project_id_98e61e82"),
    ("runs_toolcall", "organization_id", "runs_toolcall_organization_id_23f5f425"),
    ("runs_toolcall", "project_id", "runs_toolcall_project_id_64464d75"),
    ("runs_memorysnapshot", "organization_id", "runs_memorysnapshot_organization_id_5d7cac9c"),
    ("runs_memorysnapshot", "project_id", "runs_memorysnapshot_project_id_75309e90"),
    ("runs_memorysnapshot", "run_id", "runs_memorysnapshot_run_id_dabd8f72"),
]

# The links as they become in Django's state: (model, field, on_delete, related_name, to).
ITEMS = ("memorysnapshot", "message", "step", "toolcall")
DO_NOTHING = django.db.models.deletion.DO_NOTHING
LINKS = [
    ("memorysnapshot", "run", django.db.models.deletion.CASCADE, "memory_snapshots", "runs.run"),
    *((item, "organization", DO_NOTHING, "%(app_label)s_%(class)s_set", "agentops.organization") for item in ITEMS),
    *((item, "project", DO_NOTHING, "+", "agentops.project") for item in ITEMS),
]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("agentops", "0005_invitation_email_delivery"),
        ("runs", "0024_items_run_checked_by_triggers"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    f"DROP INDEX CONCURRENTLY IF EXISTS {name}",
                    reverse_sql=f"CREATE INDEX CONCURRENTLY IF NOT EXISTS {name} ON {table} ({column})",
                )
                for table, column, name in OLD_INDEXES
            ],
            state_operations=[
                migrations.AlterField(
                    model_name=model,
                    name=name,
                    field=models.ForeignKey(
                        db_constraint=False,
                        db_index=False,
                        on_delete=on_delete,
                        related_name=related_name,
                        to=to,
                    ),
                )
                for model, name, on_delete, related_name, to in LINKS
            ],
        ),
    ]
