"""Links most runs leave empty (parent run, agent version, API key, source run, session)
and a step's price are indexed for the rows that have one only, and the runs' own
organization index goes (run_organization_cost leads with it): a btree holds NULLs too,
so each new run wrote five entries for nothing at its insert and five more at its
totals' update, and every step one. The step's price loses its database constraint
(Django still refuses to delete a price that priced steps: PROTECT): its check at each
commit locked the shared price rows. docs/performance.md has the figures.

Not atomic: the new indexes are built without blocking ingestion (CONCURRENTLY) before the
old ones go. The runs' links change only in Django's state, their indexes by hand:
Django's AlterField of a link's index would also drop and re-validate its foreign key, a
scan of the whole table. The price's constraint goes by Django's AlterField (dropping a
constraint scans nothing)."""

import django.db.models.deletion
from django.contrib.postgres.operations import AddIndexConcurrently
from django.db import migrations, models

# (table, column, index name as Django named it)
OLD_INDEXES = [
    ("runs_run", "organization_id", "runs_run_organization_id_f8dd9ba6"),
    ("runs_run", "parent_run_id", "runs_run_parent_run_id_c4a76b50"),
    ("runs_run", "executed_version_id", "runs_run_executed_version_id_6ea0773e"),
    ("runs_run", "api_key_id", "runs_run_api_key_id_db5528d6"),
    ("runs_run", "replay_of_id", "runs_run_replay_of_id_7b879e88"),
    ("runs_run", "agent_session_id", "runs_run_agent_session_id_1b72cd02"),
    ("runs_step", "price_id", "runs_step_price_id_be8a479a"),
]


class Migration(migrations.Migration):
    atomic = False

    dependencies = [
        ("agentops", "0005_invitation_email_delivery"),
        ("billing", "0012_ledger_rollups"),
        ("runs", "0022_run_unique_trace_led_by_trace"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            # The price's constraint dropped as Django drops one (its index stays until
            # step_priced is built, below).
            database_operations=[
                migrations.AlterField(
                    model_name="step",
                    name="price",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="billing.price",
                    ),
                ),
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="run",
                    name="agent_session",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="turns",
                        to="runs.session",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="api_key",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="+",
                        to="agentops.apikey",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="executed_version",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="runs",
                        to="runs.agentversion",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="organization",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="runs_run_set",
                        to="agentops.organization",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="parent_run",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="children",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="run",
                    name="replay_of",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.SET_NULL,
                        related_name="replays",
                        to="runs.run",
                    ),
                ),
                migrations.AlterField(
                    model_name="step",
                    name="price",
                    field=models.ForeignKey(
                        blank=True,
                        db_constraint=False,
                        db_index=False,
                        null=True,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="+",
                        to="billing.price",
                    ),
                ),
            ],
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("parent_run__isnull", False)), fields=["parent_run"], name="run_parent_run"
            ),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("executed_version__isnull", False)),
                fields=["executed_version"],
                name="run_executed_version",
            ),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(condition=models.Q(("api_key__isnull", False)), fields=["api_key"], name="run_api_key"),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("replay_of__isnull", False)), fields=["replay_of"], name="run_replay_of"
            ),
        ),
        AddIndexConcurrently(
            model_name="run",
            index=models.Index(
                condition=models.Q(("agent_session__isnull", False)), fields=["agent_session"], name="run_agent_session"
            ),
        ),
        AddIndexConcurrently(
            model_name="step",
            index=models.Index(condition=models.Q(("price__isnull", False)), fields=["price"], name="step_priced"),
        ),
        migrations.RunSQL(
            [f'DROP INDEX CONCURRENTLY IF EXISTS "{index}"' for _, _, index in OLD_INDEXES],
            [
                f'CREATE INDEX CONCURRENTLY IF NOT EXISTS "{index}" ON "{table}" ("{column}")'
                for table, column, index in OLD_INDEXES
            ],
        ),
    ]
