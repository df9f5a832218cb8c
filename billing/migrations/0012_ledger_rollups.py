"""The ledger's rollups of ``UsageDaily`` (``billing.UsageMonthly`` per calendar month,
``billing.UsageDailyByModel`` per organization, day, category, unit and model), kept by
statement triggers on ``billing_usagedaily`` and filled from the rows already stored."""

import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models

# Frozen here (a migration never imports live code): billing.ledger.MEASURES as of now.
MEASURES = (
    "input_tokens",
    "cached_input_tokens",
    "output_tokens",
    "cost",
    "steps",
    "unpriced_steps",
    "reported_cost",
    "reported_computed_cost",
)
# Each rollup: its table, its key as selected from UsageDaily's rows, and the key's
# columns with their types.
ROLLUPS = {
    "monthly": (
        "billing_usagemonthly",
        "organization_id, project_id, date_trunc('month', day::timestamp)::date AS month, agent_name, model, api_key_id, "
        "category, unit",
        [
            ("organization_id", "bigint"),
            ("project_id", "bigint"),
            ("month", "date"),
            ("agent_name", "varchar"),
            ("model", "varchar"),
            ("api_key_id", "bigint"),
            ("category", "varchar"),
            ("unit", "varchar"),
        ],
    ),
    "daily_by_model": (
        "billing_usagedailybymodel",
        "organization_id, day, category, unit, model",
        [
            ("organization_id", "bigint"),
            ("day", "date"),
            ("category", "varchar"),
            ("unit", "varchar"),
            ("model", "varchar"),
        ],
    ),
}
# The statement's changes to UsageDaily with a sign: inserted rows count up, deleted
# rows down, an update both (its old rows down, its new rows up).
CHANGES = {
    "INSERT": "SELECT *, 1 AS sign FROM new_rows",
    "DELETE": "SELECT *, -1 AS sign FROM old_rows",
    "UPDATE": "SELECT *, 1 AS sign FROM new_rows UNION ALL SELECT *, -1 AS sign FROM old_rows",
}


def _apply(table: str, key: str, columns: list, changes: str) -> str:
    """One statement adding the statement's changes (``changes``, rows with a sign) to
    one rollup, set-based: per key, its delta goes to a row of the key that no other
    transaction holds (``FOR UPDATE SKIP LOCKED``, taken in key order), else to a new
    row (there is no unique key, so an insert never waits either). A delta that removes
    daily rows from a key with no rollup row left (deleted first, as when a project is
    deleted) has nothing to correct."""
    names = [column for column, _kind in columns]
    positions = ", ".join(str(position) for position in range(1, len(names) + 1))
    changed = " OR ".join(["sum(sign) <> 0", *(f"sum(sign * {m}) <> 0" for m in MEASURES)])

    # api_key_id may be NULL (and is, for most rows): IS NOT DISTINCT FROM.
    def match(delta: str) -> str:
        return " AND ".join(
            f"x.{column} IS NOT DISTINCT FROM {delta}.{column}"
            if column == "api_key_id"
            else f"x.{column} = {delta}.{column}"
            for column in names
        )

    values = [*names, *MEASURES, "day_rows"]
    return f"""
        WITH delta AS (
            SELECT {", ".join(names)}, {", ".join(f"sum(sign * {m}) AS {m}" for m in MEASURES)}, sum(sign) AS day_rows
              FROM (SELECT {key}, {", ".join(MEASURES)}, sign FROM ({changes}) AS changes) AS keyed
             GROUP BY {positions}
            HAVING {changed}
             ORDER BY {positions}
        ), placed AS MATERIALIZED (
            SELECT delta.*, (SELECT x.id FROM {table} AS x WHERE {match("delta")} LIMIT 1 FOR UPDATE SKIP LOCKED) AS target
              FROM delta
        ), updated AS (
            UPDATE {table} AS r
               SET {", ".join(f"{m} = r.{m} + placed.{m}" for m in MEASURES)}, day_rows = r.day_rows + placed.day_rows
              FROM placed WHERE r.id = placed.target
        )
        INSERT INTO {table} ({", ".join(values)})
        SELECT {", ".join(values)} FROM placed
         WHERE target IS NULL AND (day_rows > 0 OR EXISTS (SELECT 1 FROM {table} AS x WHERE {match("placed")}));"""  # noqa: S608


# An upsert fires the INSERT and the UPDATE trigger, one of them often with no row (each
# statement is planned when it runs: a trigger names only its own transition tables).
NOTHING_CHANGED = """
    IF TG_OP = 'DELETE' THEN
        IF NOT EXISTS (SELECT FROM old_rows) THEN
            RETURN NULL;
        END IF;
    ELSIF NOT EXISTS (SELECT FROM new_rows) THEN
        RETURN NULL;
    END IF;"""

FORWARD = (
    """
CREATE FUNCTION billing_usage_rollups_apply() RETURNS trigger AS $$
BEGIN"""
    + NOTHING_CHANGED
    + "".join(
        f"""
    {"IF" if position == 0 else "ELSIF"} TG_OP = '{operation}' THEN"""
        + "".join(_apply(table, key, columns, changes) for table, key, columns in ROLLUPS.values())
        for position, (operation, changes) in enumerate(CHANGES.items())
    )
    + """
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql
-- Its plans are made once per session, for the first statement's number of changed rows,
-- and kept: joined through the indexes (a key's row, a row by id), the same plan serves
-- one row (a judge call) and a refresh's thousands; a hash join planned for thousands
-- would scan the whole rollup for every single row after it.
SET enable_hashjoin = off SET enable_mergejoin = off;

CREATE TRIGGER billing_usagedaily_rollups_insert AFTER INSERT ON billing_usagedaily
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION billing_usage_rollups_apply();
CREATE TRIGGER billing_usagedaily_rollups_update AFTER UPDATE ON billing_usagedaily
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows
    FOR EACH STATEMENT EXECUTE FUNCTION billing_usage_rollups_apply();
CREATE TRIGGER billing_usagedaily_rollups_delete AFTER DELETE ON billing_usagedaily
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION billing_usage_rollups_apply();

-- The rows stored before: the triggers above already hold the table (no row can be
-- written meanwhile), so nothing is counted twice or missed.
"""
    + "".join(
        f"""
INSERT INTO {table} ({", ".join(column for column, _kind in columns)}, {", ".join(MEASURES)}, day_rows)
SELECT {key}, {", ".join(f"sum({m})" for m in MEASURES)}, count(*)
  FROM billing_usagedaily GROUP BY {", ".join(str(position) for position in range(1, len(columns) + 1))};
"""  # noqa: S608 - constant names
        for table, key, columns in ROLLUPS.values()
    )
)

BACKWARD = """
DROP TRIGGER IF EXISTS billing_usagedaily_rollups_insert ON billing_usagedaily;
DROP TRIGGER IF EXISTS billing_usagedaily_rollups_update ON billing_usagedaily;
DROP TRIGGER IF EXISTS billing_usagedaily_rollups_delete ON billing_usagedaily;
DROP FUNCTION IF EXISTS billing_usage_rollups_apply();
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0005_invitation_email_delivery"),
        ("billing", "0011_seed_price_parts_and_tiers"),
    ]

    operations = [
        migrations.CreateModel(
            name="UsageDailyByModel",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("input_tokens", models.BigIntegerField(default=0)),
                ("cached_input_tokens", models.BigIntegerField(default=0)),
                ("output_tokens", models.BigIntegerField(default=0)),
                ("cost", models.DecimalField(decimal_places=9, default=0, max_digits=24)),
                ("steps", models.BigIntegerField(default=0)),
                ("unpriced_steps", models.BigIntegerField(default=0)),
                ("reported_cost", models.DecimalField(decimal_places=9, default=0, max_digits=24)),
                ("reported_computed_cost", models.DecimalField(decimal_places=9, default=0, max_digits=24)),
                ("day_rows", models.BigIntegerField(default=0, help_text="UsageDaily rows of the key.")),
                ("day", models.DateField()),
                (
                    "category",
                    models.CharField(
                        choices=[
                            ("llm", "LLM calls"),
                            ("tool", "Tools"),
                            ("gpu", "GPU jobs"),
                            ("evaluation", "Evaluation"),
                        ],
                        default="llm",
                        max_length=12,
                    ),
                ),
                (
                    "unit",
                    models.CharField(
                        blank=True,
                        help_text="What the spend is counted in: token, call, character, second, hour.",
                        max_length=16,
                    ),
                ),
                ("model", models.CharField(blank=True, max_length=200)),
                (
                    "organization",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="%(app_label)s_%(class)s_set",
                        to="agentops.organization",
                    ),
                ),
            ],
            options={
                "indexes": [models.Index(fields=["organization", "day", "model"], name="usage_daily_model_key")],
            },
            managers=[
                ("objects", django.db.models.manager.Manager()),
                ("dangerously_unscoped_objects", django.db.models.manager.Manager()),
            ],
        ),
        migrations.CreateModel(
            name="UsageMonthly",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("input_tokens", models.BigIntegerField(default=0)),
                ("cached_input_tokens", models.BigIntegerField(default=0)),
                ("output_tokens", models.BigIntegerField(default=0)),
                ("cost", models.DecimalField(decimal_places=9, default=0, max_digits=24)),
                ("steps", models.BigIntegerField(default=0)),
                ("unpriced_steps", models.BigIntegerField(default=0)),
                ("reported_cost", models.DecimalField(decimal_places=9, default=0, max_digits=24)),
                ("reported_computed_cost", models.DecimalField(decimal_places=9, default=0, max_digits=24)),
                ("day_rows", models.BigIntegerField(default=0, help_text="UsageDaily rows of the key.")),
                ("month", models.DateField()),
                ("agent_name", models.CharField(blank=True, max_length=200)),
                ("model", models.CharField(blank=True, max_length=200)),
                ("api_key_id", models.BigIntegerField(blank=True, null=True)),
                (
                    "category",
                    models.CharField(
                        choices=[
                            ("llm", "LLM calls"),
                            ("tool", "Tools"),
                            ("gpu", "GPU jobs"),
                            ("evaluation", "Evaluation"),
                        ],
                        default="llm",
                        max_length=12,
                    ),
                ),
                (
                    "unit",
                    models.CharField(
                        blank=True,
                        help_text="What the spend is counted in: token, call, character, second, hour.",
                        max_length=16,
                    ),
                ),
                (
                    "organization",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="%(app_label)s_%(class)s_set",
                        to="agentops.organization",
                    ),
                ),
                (
                    "project",
                    models.ForeignKey(
                        on_delete=django.db.models.deletion.CASCADE, related_name="+", to="agentops.project"
                    ),
                ),
            ],
            options={
                "indexes": [
                    models.Index(
                        fields=["organization", "month", "project", "model", "agent_name"], name="usage_monthly_key"
                    ),
                ],
            },
            managers=[
                ("objects", django.db.models.manager.Manager()),
                ("dangerously_unscoped_objects", django.db.models.manager.Manager()),
            ],
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
