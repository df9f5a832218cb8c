"""The usage ledger: each run's contribution (``RunUsage``) and the daily rollup
(``UsageDaily``), kept in step with the trace store incrementally.

Ingest marks the runs it touched (``ledger_mark``, in its own transaction); the ledger
task drains the marks (``ledger_refresh``): for each marked run it recomputes the run's
usage from its steps, applies the difference with what the run contributed before to
``UsageDaily`` and stores the new contribution. Applying differences keeps the rollup
exact (Decimal in, ``numeric`` in SQL) whatever order or how often the data arrives.

Concurrency: a refresher claims marks with ``FOR UPDATE SKIP LOCKED`` (two refreshers
never take the same run) and locks each run ``FOR SHARE SKIP LOCKED``: a run that an
ingest batch holds is left marked for the next pass, so a refresher never waits for
ingest (ingest holds the run, then writes its mark, which waits for the refresher's
claim: waiting the other way round would deadlock) and the steps it reads cannot change
under it. A run deleted since it was marked (retention) keeps its contribution.

Every statement here is raw SQL across organizations: the ledger is system bookkeeping,
called by ingest (one organization) and by the ledger task (all of them).
"""

from __future__ import annotations

from django.db import connection, transaction

# Ledger dimensions, in UsageDaily's unique constraint order.
DIMENSIONS = ("organization_id", "project_id", "day", "agent_name", "model", "api_key_id", "end_user_id")
MEASURES = ("input_tokens", "cached_input_tokens", "output_tokens", "cost", "steps", "unpriced_steps")
_DIMENSIONS = ", ".join(DIMENSIONS)
_MEASURES = ", ".join(MEASURES)

# One run's usage per UTC day and model, from its steps. A step with no start time
# counts on its run's start day, or the day it was stored.
_USAGE_SELECT = """
    SELECT s.organization_id, r.project_id,
           (coalesce(s.started_at, r.started_at, s.created_at) AT TIME ZONE 'UTC')::date AS day,
           r.agent_name, s.model, r.api_key_id, r.end_user_id, s.run_id,
           sum(s.input_tokens) AS input_tokens,
           sum(s.cached_input_tokens) AS cached_input_tokens,
           sum(s.output_tokens) AS output_tokens,
           coalesce(sum(s.cost), 0) AS cost,
           count(*) AS steps,
           count(*) FILTER (WHERE s.unpriced) AS unpriced_steps
    FROM runs_step s JOIN runs_run r ON r.id = s.run_id
    {where}
    GROUP BY s.organization_id, r.project_id, 3, r.agent_name, s.model, r.api_key_id, r.end_user_id, s.run_id
"""

# Add the rows of ``source`` (dimensions + measures) to UsageDaily.
_UPSERT_DAILY = f"""
    INSERT INTO billing_usagedaily ({_DIMENSIONS}, {_MEASURES})
    {{source}}
    ON CONFLICT (project_id, day, agent_name, model, api_key_id, end_user_id) DO UPDATE SET
        {", ".join(f"{m} = billing_usagedaily.{m} + EXCLUDED.{m}" for m in MEASURES)}
"""  # noqa: S608 - constant column names


def ledger_mark(*, organization_id: int, run_ids) -> None:
    """Mark runs whose ledger contribution must be recomputed. Called by ingest inside
    its transaction, so a mark exists exactly when the steps it stands for do."""
    run_ids = sorted(set(run_ids))
    if not run_ids:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO billing_ledgerbacklog (run_id, organization_id, marked_at) "
            "SELECT run_id, %s, now() FROM unnest(%s::bigint[]) AS run_id "
            "ON CONFLICT (run_id) DO NOTHING",
            [organization_id, run_ids],
        )


def ledger_refresh(limit: int = 500, *, organizations: set[int] | None = None) -> int:
    """Recompute the ledger contribution of up to ``limit`` marked runs; return how many
    marks were done. ``organizations``, when given, receives the organizations touched."""
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, run_id, organization_id FROM billing_ledgerbacklog ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
            [limit],
        )
        claimed = cursor.fetchall()
        if not claimed:
            return 0
        run_ids = sorted({row[1] for row in claimed})
        cursor.execute("SELECT id FROM runs_run WHERE id = ANY(%s)", [run_ids])
        existing = {row[0] for row in cursor.fetchall()}
        cursor.execute("SELECT id FROM runs_run WHERE id = ANY(%s) ORDER BY id FOR SHARE SKIP LOCKED", [run_ids])
        locked = sorted(row[0] for row in cursor.fetchall())
        # Done: the runs locked now, and the runs deleted since (their contribution stays).
        # A run an ingest batch holds stays marked: that batch's mark is already there.
        done = [row for row in claimed if row[1] in locked or row[1] not in existing]
        if locked:
            _refresh_runs(cursor, locked)
        if done:
            cursor.execute("DELETE FROM billing_ledgerbacklog WHERE id = ANY(%s)", [[row[0] for row in done]])
        if organizations is not None:
            organizations.update(row[2] for row in done)
        return len(done)


def _refresh_runs(cursor, run_ids: list[int]) -> None:
    """Replace the RunUsage rows of ``run_ids`` (locked by the caller) by their usage now,
    applying the difference to UsageDaily."""
    # Belt and braces against any other writer of RunUsage (a rebuild): take its rows.
    cursor.execute("SELECT id FROM billing_runusage WHERE run_id = ANY(%s) ORDER BY id FOR UPDATE", [run_ids])
    cursor.execute("DROP TABLE IF EXISTS pg_temp.billing_ledger_new")
    cursor.execute(
        "CREATE TEMP TABLE billing_ledger_new ON COMMIT DROP AS "
        + _USAGE_SELECT.format(where="WHERE s.run_id = ANY(%s)"),
        [run_ids],
    )
    # New usage minus old, per ledger row; rows whose difference is nothing are skipped
    # (a run re-sent unchanged writes nothing to UsageDaily).
    negated = ", ".join(f"-{m}" for m in MEASURES)
    delta = f"""
        SELECT {_DIMENSIONS}, {", ".join(f"sum({m})" for m in MEASURES)}
        FROM (
            SELECT {_DIMENSIONS}, {_MEASURES} FROM billing_ledger_new
            UNION ALL
            SELECT {_DIMENSIONS}, {negated} FROM billing_runusage WHERE run_id = ANY(%s)
        ) AS changes
        GROUP BY {_DIMENSIONS}
        HAVING {" OR ".join(f"sum({m}) <> 0" for m in MEASURES)}
        ORDER BY {_DIMENSIONS}
    """  # noqa: S608 - constant column names; ordered so two refreshers lock rows alike
    cursor.execute(_UPSERT_DAILY.format(source=delta), [run_ids])
    cursor.execute("DELETE FROM billing_runusage WHERE run_id = ANY(%s)", [run_ids])
    cursor.execute(
        f"INSERT INTO billing_runusage (run_id, {_DIMENSIONS}, {_MEASURES}) "  # noqa: S608 - constants
        f"SELECT run_id, {_DIMENSIONS}, {_MEASURES} FROM billing_ledger_new"
    )


def ledger_rebuild() -> dict:
    """Rebuild the ledger from every step stored: each existing run's contribution is
    recomputed, the contributions of runs deleted since (retention) are kept, and
    UsageDaily is summed again from the contributions. Returns row counts."""
    with transaction.atomic(), connection.cursor() as cursor:
        # One rebuild at a time, and no refresher writes meanwhile (they wait).
        cursor.execute("LOCK TABLE billing_runusage, billing_usagedaily IN SHARE ROW EXCLUSIVE MODE")
        # The marks made before now are covered by the steps read below, committed
        # before them; marks made later stay and are refreshed (harmlessly) again.
        cursor.execute("DELETE FROM billing_ledgerbacklog")
        cursor.execute("DELETE FROM billing_runusage u USING runs_run r WHERE r.id = u.run_id")
        cursor.execute(
            f"INSERT INTO billing_runusage (organization_id, project_id, day, agent_name, model, api_key_id, "  # noqa: S608
            f"end_user_id, run_id, {_MEASURES}) " + _USAGE_SELECT.format(where="")
        )
        run_usage_rows = cursor.rowcount
        # TRUNCATE refuses to run with foreign key checks pending (deferred, from the
        # INSERT above): run them now, then defer again as Django expects.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        cursor.execute("TRUNCATE billing_usagedaily")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        summed = f"""
            SELECT {_DIMENSIONS}, {", ".join(f"sum({m})" for m in MEASURES)}
            FROM billing_runusage GROUP BY {_DIMENSIONS}
        """  # noqa: S608 - constant column names
        cursor.execute(_UPSERT_DAILY.format(source=summed))
        return {"run_usage_rows": run_usage_rows, "daily_rows": cursor.rowcount}
