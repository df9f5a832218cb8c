"""The dashboard's rollup of LLM calls per project, hour and model (``runs.LlmHourly``),
kept by statement triggers on ``runs_step`` and filled from the steps already stored;
and the index the dashboard's run aggregates read alone."""

import django.db.models.deletion
import django.db.models.manager
from django.db import migrations, models

# The steps the rollup counts, and their key.
LLM_STEPS = "kind = 'llm' AND model <> '' AND started_at IS NOT NULL"
KEY = "organization_id, project_id, date_trunc('hour', started_at, 'UTC') AS hour, model"

FORWARD = f"""
-- Add one delta to the key's rollup: to a row no other transaction holds, else to a
-- new row (there is no unique key, so an insert never waits either). A delta that
-- subtracts from a key with no row left (its rows were deleted first, as when a
-- project is deleted) has nothing to correct.
CREATE FUNCTION runs_llm_hourly_add(
    org bigint, proj bigint, at_hour timestamptz, model_name varchar, n bigint, priced bigint, amount numeric
) RETURNS void AS $$
DECLARE
    target bigint;
BEGIN
    SELECT id INTO target FROM runs_llmhourly
     WHERE project_id = proj AND hour = at_hour AND model = model_name
     LIMIT 1 FOR UPDATE SKIP LOCKED;
    IF FOUND THEN
        UPDATE runs_llmhourly
           SET calls = calls + n, priced_calls = priced_calls + priced, cost = cost + amount
         WHERE id = target;
    ELSIF n > 0 OR EXISTS (
        SELECT 1 FROM runs_llmhourly WHERE project_id = proj AND hour = at_hour AND model = model_name
    ) THEN
        INSERT INTO runs_llmhourly (organization_id, project_id, hour, model, calls, priced_calls, cost)
        VALUES (org, proj, at_hour, model_name, n, priced, amount);
    END IF;
END;
$$ LANGUAGE plpgsql;

-- The statement's changes to LLM calls, summed per key: inserted rows count up,
-- deleted rows down, an update both (its old rows down, its new rows up).
CREATE FUNCTION runs_llm_hourly_apply() RETURNS trigger AS $$
DECLARE
    d record;
BEGIN
    IF TG_OP = 'INSERT' THEN
        FOR d IN
            SELECT {KEY}, count(*) AS n, count(cost) AS priced, coalesce(sum(cost), 0) AS amount
              FROM new_rows WHERE {LLM_STEPS} GROUP BY 1, 2, 3, 4 ORDER BY 2, 3, 4
        LOOP
            PERFORM runs_llm_hourly_add(d.organization_id, d.project_id, d.hour, d.model, d.n, d.priced, d.amount);
        END LOOP;
    ELSIF TG_OP = 'DELETE' THEN
        FOR d IN
            SELECT {KEY}, count(*) AS n, count(cost) AS priced, coalesce(sum(cost), 0) AS amount
              FROM old_rows WHERE {LLM_STEPS} GROUP BY 1, 2, 3, 4 ORDER BY 2, 3, 4
        LOOP
            PERFORM runs_llm_hourly_add(d.organization_id, d.project_id, d.hour, d.model, -d.n, -d.priced, -d.amount);
        END LOOP;
    ELSE
        FOR d IN
            SELECT organization_id, project_id, hour, model,
                   sum(sign) AS n, sum(sign * (cost IS NOT NULL)::int) AS priced, coalesce(sum(sign * cost), 0) AS amount
              FROM (
                  SELECT {KEY}, cost, 1 AS sign FROM new_rows WHERE {LLM_STEPS}
                  UNION ALL
                  SELECT {KEY}, cost, -1 AS sign FROM old_rows WHERE {LLM_STEPS}
              ) AS changes
             GROUP BY 1, 2, 3, 4
            HAVING sum(sign) <> 0 OR sum(sign * (cost IS NOT NULL)::int) <> 0 OR coalesce(sum(sign * cost), 0) <> 0
             ORDER BY 2, 3, 4
        LOOP
            PERFORM runs_llm_hourly_add(d.organization_id, d.project_id, d.hour, d.model, d.n, d.priced, d.amount);
        END LOOP;
    END IF;
    RETURN NULL;
END;
$$ LANGUAGE plpgsql;

CREATE TRIGGER runs_step_llm_hourly_insert AFTER INSERT ON runs_step
    REFERENCING NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION runs_llm_hourly_apply();
CREATE TRIGGER runs_step_llm_hourly_update AFTER UPDATE ON runs_step
    REFERENCING OLD TABLE AS old_rows NEW TABLE AS new_rows FOR EACH STATEMENT EXECUTE FUNCTION runs_llm_hourly_apply();
CREATE TRIGGER runs_step_llm_hourly_delete AFTER DELETE ON runs_step
    REFERENCING OLD TABLE AS old_rows FOR EACH STATEMENT EXECUTE FUNCTION runs_llm_hourly_apply();

-- The steps stored before: the triggers above already hold the table (no step can be
-- written meanwhile), so nothing is counted twice or missed.
INSERT INTO runs_llmhourly (organization_id, project_id, hour, model, calls, priced_calls, cost)
SELECT {KEY}, count(*), count(cost), coalesce(sum(cost), 0)
  FROM runs_step WHERE {LLM_STEPS} GROUP BY 1, 2, 3, 4;
"""  # noqa: S608 - constant SQL

BACKWARD = """
DROP TRIGGER IF EXISTS runs_step_llm_hourly_insert ON runs_step;
DROP TRIGGER IF EXISTS runs_step_llm_hourly_update ON runs_step;
DROP TRIGGER IF EXISTS runs_step_llm_hourly_delete ON runs_step;
DROP FUNCTION IF EXISTS runs_llm_hourly_apply();
DROP FUNCTION IF EXISTS runs_llm_hourly_add(bigint, bigint, timestamptz, varchar, bigint, bigint, numeric);
"""


class Migration(migrations.Migration):
    dependencies = [
        ("agentops", "0005_invitation_email_delivery"),
        ("runs", "0015_item_tenant_columns_unconstrained"),
    ]

    operations = [
        migrations.CreateModel(
            name="LlmHourly",
            fields=[
                ("id", models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name="ID")),
                ("hour", models.DateTimeField()),
                ("model", models.CharField(max_length=200)),
                ("calls", models.BigIntegerField(default=0)),
                (
                    "priced_calls",
                    models.BigIntegerField(default=0, help_text="Calls with a cost (an unpriced call has none)."),
                ),
                ("cost", models.DecimalField(decimal_places=9, default=0, max_digits=24)),
            ],
            managers=[
                ("objects", django.db.models.manager.Manager()),
                ("dangerously_unscoped_objects", django.db.models.manager.Manager()),
            ],
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["project", "started_at"],
                include=(
                    "organization",
                    "status",
                    "latency_ms",
                    "input_tokens",
                    "output_tokens",
                    "total_cost",
                    "unpriced_step_count",
                ),
                name="run_project_started_totals",
            ),
        ),
        migrations.AddIndex(
            model_name="run",
            index=models.Index(
                fields=["organization", "-total_cost", "-id"], include=("started_at",), name="run_organization_cost"
            ),
        ),
        migrations.AddField(
            model_name="llmhourly",
            name="organization",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE,
                related_name="%(app_label)s_%(class)s_set",
                to="agentops.organization",
            ),
        ),
        migrations.AddField(
            model_name="llmhourly",
            name="project",
            field=models.ForeignKey(
                on_delete=django.db.models.deletion.CASCADE, related_name="+", to="agentops.project"
            ),
        ),
        migrations.AddIndex(
            model_name="llmhourly",
            index=models.Index(fields=["project", "hour"], name="llm_hourly_project_hour"),
        ),
        migrations.RunSQL(FORWARD, BACKWARD),
    ]
