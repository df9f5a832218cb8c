"""The usage ledger: each run's contribution (``RunUsage``) and the daily rollup
(``UsageDaily``), kept in step with the trace store incrementally.

Ingest marks the runs it touched (``ledger_mark``, in its own transaction); the ledger
task drains the marks (``ledger_refresh``): for each marked run it recomputes the run's
usage from its steps, applies the difference with what the run contributed before to
``UsageDaily`` and stores the new contribution. Applying differences keeps the rollup
exact (Decimal in, ``numeric`` in SQL) whatever order or how often the data arrives.

The runs and steps are runs' tables, read through the usage source runs registers
(``billing.usage``): it locks the runs and hands the SELECT of their usage, which the
ledger runs inside its own statements, so a batch of marks costs the same ten
statements whatever its size (claim the marks, find and lock the runs, then the
temporary table of their usage and the writes of ``_refresh_runs``, then delete the
marks). With no source registered the ledger reads no run: marks stay, a rebuild keeps
the contributions it has.

Concurrency: a refresher claims marks with ``FOR UPDATE SKIP LOCKED`` (two refreshers
never take the same run) and locks each run ``FOR SHARE SKIP LOCKED``: a run that an
ingest batch holds is left marked for the next pass, so a refresher never waits for
ingest (ingest holds the run, then writes its mark, which waits for the refresher's
claim: waiting the other way round would deadlock) and the steps it reads cannot change
under it. A run deleted since it was marked (retention) keeps its contribution.

GPU jobs: ``compute_usage_record`` stores a job's seconds and cost per UTC day
(``ComputeUsage``) and applies the difference with what the job contributed before to
``UsageDaily`` at once, in the caller's transaction or its own (a job is one row per day,
not thousands of steps: nothing to batch). Its ledger rows carry the agent
``COMPUTE_AGENT`` and the model ``gpu:<hardware>``, so pages, budgets and alerts count
them like model usage; a rebuild sums them with the runs' contributions.

Evaluation: ``evaluation_usage_record`` stores one LLM-judge call (``EvaluationUsage``)
and adds it to ``UsageDaily`` at once (category ``evaluation``, agent
``EVALUATION_AGENT``, the judge's model), in its own transaction; evals calls it through
its evaluators, since evals sits above billing. A rebuild sums these rows too.

Categories: every ledger row has one (``billing.models.Category``) and a unit: a run's
model calls are ``llm`` (unit ``token``), its tool steps ``tool`` (the unit of the tool's
price, empty when it has none), GPU jobs ``gpu`` (``hour``), judge calls ``evaluation``
(``token``). Budgets and alerts count every category.

Every statement here is raw SQL across organizations: the ledger is system bookkeeping,
called by ingest (one organization), by the job poller (one job) and by the ledger task
(all of them).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta
from decimal import Decimal

from django.db import connection, transaction

from billing.tasks import evaluate_budget_alerts
from billing.usage import usage_source

# Ledger dimensions, in UsageDaily's unique constraint order.
DIMENSIONS = (
    "organization_id",
    "project_id",
    "day",
    "agent_name",
    "model",
    "api_key_id",
    "end_user_id",
    "category",
    "unit",
)
# ``cost`` is what budgets count (the organization's ``BillingSettings.budget_cost``);
# ``reported_cost`` sums the costs clients reported and ``reported_computed_cost`` the
# computed cost of those same steps, so pages show both.
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
_DIMENSIONS = ", ".join(DIMENSIONS)
_MEASURES = ", ".join(MEASURES)

# Add the rows of ``source`` (dimensions + measures) to UsageDaily.
_UPSERT_DAILY = f"""
    INSERT INTO billing_usagedaily ({_DIMENSIONS}, {_MEASURES})
    {{source}}
    ON CONFLICT (project_id, day, agent_name, model, api_key_id, end_user_id, category, unit) DO UPDATE SET
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
    marks were done. ``organizations``, when given, receives the organizations touched.
    With no usage source registered there is nothing to read the runs from: the marks
    stay."""
    source = usage_source()
    if source is None:
        return 0
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "SELECT id, run_id, organization_id FROM billing_ledgerbacklog ORDER BY id LIMIT %s FOR UPDATE SKIP LOCKED",
            [limit],
        )
        claimed = cursor.fetchall()
        if not claimed:
            return 0
        run_ids = sorted({row[1] for row in claimed})
        existing, locked = source.lock_runs(cursor, run_ids)
        # Done: the runs locked now, and the runs deleted since (their contribution stays).
        # A run an ingest batch holds stays marked: that batch's mark is already there.
        done = [row for row in claimed if row[1] in locked or row[1] not in existing]
        if locked:
            _refresh_runs(cursor, locked, source.usage_query(listed_runs=True))
        if done:
            cursor.execute("DELETE FROM billing_ledgerbacklog WHERE id = ANY(%s)", [[row[0] for row in done]])
        if organizations is not None:
            organizations.update(row[2] for row in done)
        return len(done)


def _refresh_runs(cursor, run_ids: list[int], usage_query: str) -> None:
    """Replace the RunUsage rows of ``run_ids`` (locked by the caller) by their usage now
    (``usage_query``, the source's, of the runs listed), applying the difference to
    UsageDaily."""
    # Belt and braces against any other writer of RunUsage (a rebuild): take its rows.
    cursor.execute("SELECT id FROM billing_runusage WHERE run_id = ANY(%s) ORDER BY id FOR UPDATE", [run_ids])
    cursor.execute("DROP TABLE IF EXISTS pg_temp.billing_ledger_new")
    cursor.execute(
        "CREATE TEMP TABLE billing_ledger_new ON COMMIT DROP AS " + usage_query,
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
    UsageDaily is summed again from the contributions, GPU jobs' (``ComputeUsage``,
    which are their own record: nothing to recompute them from) included. Returns row
    counts. With no usage source registered, every run's contribution is kept as it is
    (as a deleted run's would be)."""
    source = usage_source()
    with transaction.atomic(), connection.cursor() as cursor:
        # One rebuild at a time, and no refresher or job writes meanwhile (they wait). In
        # the order compute_usage_record writes (ComputeUsage, then UsageDaily), so the
        # two cannot deadlock.
        cursor.execute(
            "LOCK TABLE billing_runusage, billing_computeusage, billing_evaluationusage, billing_usagedaily "
            "IN SHARE ROW EXCLUSIVE MODE"
        )
        run_usage_rows = 0
        if source is not None:
            # The marks made before now are covered by the steps read below, committed
            # before them; marks made later stay and are refreshed (harmlessly) again.
            cursor.execute("DELETE FROM billing_ledgerbacklog")
            existing_runs = source.existing_runs_query()
            cursor.execute(f"DELETE FROM billing_runusage u USING ({existing_runs}) AS r WHERE r.id = u.run_id")  # noqa: S608 - the source's constant query
            cursor.execute(
                f"INSERT INTO billing_runusage ({_DIMENSIONS}, run_id, {_MEASURES}) "  # noqa: S608 - constant queries
                + source.usage_query(listed_runs=False)
            )
            run_usage_rows = cursor.rowcount
        # TRUNCATE refuses to run with foreign key checks pending (deferred, from the
        # INSERT above): run them now, then defer again as Django expects.
        cursor.execute("SET CONSTRAINTS ALL IMMEDIATE")
        # A TRUNCATE fires no row trigger: the rollups (billing.models.LedgerRollup) go
        # with UsageDaily, and the triggers fill them again from the insert below.
        cursor.execute("TRUNCATE billing_usagedaily, billing_usagemonthly, billing_usagedailybymodel")
        cursor.execute("SET CONSTRAINTS ALL DEFERRED")
        summed = f"""
            SELECT {_DIMENSIONS}, {", ".join(f"sum({m})" for m in MEASURES)}
            FROM (
                SELECT {_DIMENSIONS}, {_MEASURES} FROM billing_runusage
                UNION ALL
                {_COMPUTE_CONTRIBUTION}
                UNION ALL
                {_EVALUATION_CONTRIBUTION}
            ) AS contributions
            GROUP BY {_DIMENSIONS}
        """  # noqa: S608 - constant column names
        cursor.execute(_UPSERT_DAILY.format(source=summed))
        daily_rows = cursor.rowcount
        cursor.execute("SELECT count(*) FROM billing_computeusage")
        (compute_usage_rows,) = cursor.fetchone()
        return {"run_usage_rows": run_usage_rows, "compute_usage_rows": compute_usage_rows, "daily_rows": daily_rows}


# --- GPU jobs ---------------------------------------------------------------------------

# The ledger dimensions of a GPU job: one agent for every job, its hardware as the model.
COMPUTE_AGENT = "gpu-job"
COMPUTE_MODEL_PREFIX = "gpu:"
HOUR = Decimal(3600)
NANO = Decimal("0.000000001")
MICRO = Decimal("0.000001")
# The first key of compute_usage_record's advisory lock (the job id is the second):
# "GPUJ", so no other lock of the platform shares it.
_COMPUTE_LOCK_NAMESPACE = 0x4750554A
_HARDWARE_MAX_LENGTH = _BACKEND_MAX_LENGTH = 32  # ComputeUsage.hardware and .backend

# What the ComputeUsage rows contribute to UsageDaily, as dimensions + measures. Each
# row (a job on a day) counts as one step, unpriced when its hardware had no price, so
# "N unpriced steps" also tells of jobs without a price.
_COMPUTE_CONTRIBUTION = f"""
    SELECT organization_id, project_id, day, '{COMPUTE_AGENT}' AS agent_name,
           '{COMPUTE_MODEL_PREFIX}' || hardware AS model, api_key_id, '' AS end_user_id,
           'gpu' AS category, 'hour' AS unit,
           0 AS input_tokens, 0 AS cached_input_tokens, 0 AS output_tokens, cost,
           1 AS steps, CASE WHEN hourly IS NULL THEN 1 ELSE 0 END AS unpriced_steps,
           0 AS reported_cost, 0 AS reported_computed_cost
    FROM billing_computeusage
"""  # noqa: S608 - constants


def compute_model(hardware: str) -> str:
    """The ledger's model name for a GPU job on ``hardware`` (``gpu:a100``)."""
    return f"{COMPUTE_MODEL_PREFIX}{hardware}"


def is_compute_usage(*, agent_name: str, model: str) -> bool:
    """Whether a ledger row's dimensions are a GPU job's (pages show it as a job)."""
    return agent_name == COMPUTE_AGENT and model.startswith(COMPUTE_MODEL_PREFIX)


def _seconds_per_day(started_at: datetime, ended_at: datetime) -> list[tuple]:
    """``[(day, seconds)]``: the time from ``started_at`` to ``ended_at`` cut at each UTC
    midnight, days with no time left out. Seconds are exact (microseconds)."""
    if started_at.tzinfo is None or ended_at.tzinfo is None:
        raise ValueError("started_at and ended_at must be aware datetimes")
    if ended_at < started_at:
        raise ValueError("ended_at is before started_at")
    start, end = started_at.astimezone(UTC), ended_at.astimezone(UTC)
    parts = []
    while start < end:
        midnight = datetime.combine(start.date() + timedelta(days=1), datetime.min.time(), tzinfo=UTC)
        part_end = min(end, midnight)
        parts.append((start.date(), Decimal((part_end - start) // timedelta(microseconds=1)) * MICRO))
        start = part_end
    return parts


def compute_usage_record(
    *,
    organization_id: int,
    project_id: int,
    job_id: int,
    started_at: datetime,
    ended_at: datetime,
    hardware: str,
    backend: str,
    hourly: Decimal | None,
    price_id: int | None,
    api_key_id: int | None = None,
) -> Decimal:
    """Record a GPU job's usage from ``started_at`` to ``ended_at`` at ``hourly`` (None:
    the hardware has no price; it costs 0 and counts as unpriced) in the ledger; return
    the job's total cost. The time is split at UTC midnights, each day costing its
    seconds / 3600 x ``hourly`` (rounded to 9 decimals, like step costs). What the job
    contributed before is replaced: calling it again with the same times changes nothing,
    with a later end adds only the rest. One transaction; budget alerts are evaluated
    once it commits."""
    hardware = hardware.strip().lower()
    if not hardware or len(hardware) > _HARDWARE_MAX_LENGTH:
        raise ValueError(f"invalid hardware name {hardware!r}")
    backend = backend.strip().lower()
    if len(backend) > _BACKEND_MAX_LENGTH:
        raise ValueError(f"invalid backend name {backend!r}")
    if hourly is not None and (not isinstance(hourly, Decimal) or not hourly.is_finite() or hourly < 0):
        raise ValueError("hourly must be a Decimal of at least 0, or None when unpriced")
    days = _seconds_per_day(started_at, ended_at)
    new_rows = [
        (day, seconds, Decimal(0) if hourly is None else (seconds * hourly / HOUR).quantize(NANO))
        for day, seconds in days
    ]
    with transaction.atomic(), connection.cursor() as cursor:
        # Two pollers finishing the same job must not both find no usage and add it twice.
        cursor.execute(
            "SELECT pg_advisory_xact_lock(%s::int, (%s::bigint %% 2147483647)::int)", [_COMPUTE_LOCK_NAMESPACE, job_id]
        )
        cursor.execute(
            "SELECT organization_id, project_id, day, hardware, api_key_id, cost, hourly IS NULL "
            "FROM billing_computeusage WHERE job_id = %s ORDER BY day FOR UPDATE",
            [job_id],
        )
        old_rows = cursor.fetchall()
        if any(row[0] != organization_id for row in old_rows):
            raise ValueError(f"job {job_id}'s usage belongs to another organization")

        # New minus old, per ledger row: cost, steps, unpriced steps.
        delta: dict[tuple, list] = defaultdict(lambda: [Decimal(0), 0, 0])
        for _organization, old_project, day, old_hardware, old_api_key, cost, unpriced in old_rows:
            change = delta[(old_project, day, compute_model(old_hardware), old_api_key)]
            change[0] -= cost
            change[1] -= 1
            change[2] -= int(unpriced)
        for day, _seconds, cost in new_rows:
            change = delta[(project_id, day, compute_model(hardware), api_key_id)]
            change[0] += cost
            change[1] += 1
            change[2] += int(hourly is None)

        # ComputeUsage first, then UsageDaily: the order ledger_rebuild locks them in.
        cursor.execute(
            "DELETE FROM billing_computeusage WHERE job_id = %s AND NOT (day = ANY(%s::date[]))",
            [job_id, [day for day, _seconds, _cost in new_rows]],
        )
        for day, seconds, cost in new_rows:
            cursor.execute(
                "INSERT INTO billing_computeusage (organization_id, project_id, job_id, day, hardware, backend, "
                "seconds, hourly, cost, price_id, api_key_id, created_at, updated_at) "
                "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now(), now()) "
                "ON CONFLICT (job_id, day) DO UPDATE SET project_id = EXCLUDED.project_id, "
                "hardware = EXCLUDED.hardware, backend = EXCLUDED.backend, seconds = EXCLUDED.seconds, "
                "hourly = EXCLUDED.hourly, cost = EXCLUDED.cost, price_id = EXCLUDED.price_id, "
                "api_key_id = EXCLUDED.api_key_id, updated_at = now()",
                [
                    organization_id,
                    project_id,
                    job_id,
                    day,
                    hardware,
                    backend,
                    seconds,
                    hourly,
                    cost,
                    price_id,
                    api_key_id,
                ],
            )
        # In the dimensions' order (no API key last, as PostgreSQL sorts), like the
        # refreshers, so concurrent writers lock UsageDaily rows in the same order.
        changes = sorted(
            ((key, change) for key, change in delta.items() if any(change)),
            key=lambda item: (*item[0][:3], item[0][3] is None, item[0][3] or 0),
        )
        for (row_project, day, model, row_api_key), (cost, steps, unpriced_steps) in changes:
            cursor.execute(
                _UPSERT_DAILY.format(
                    source="VALUES (%s, %s, %s, %s, %s, %s, %s, 'gpu', 'hour', 0, 0, 0, %s, %s, %s, 0, 0)"
                ),
                [organization_id, row_project, day, COMPUTE_AGENT, model, row_api_key, "", cost, steps, unpriced_steps],
            )
    if changes:
        transaction.on_commit(lambda: _evaluate_alerts(organization_id), robust=True)
    return sum((cost for _day, _seconds, cost in new_rows), Decimal(0))


def _evaluate_alerts(organization_id: int) -> None:
    evaluate_budget_alerts.delay(organization_id)


# --- Evaluation (LLM-judge calls) -------------------------------------------------------

EVALUATION_AGENT = "llm-judge"
_EVALUATION_CONTRIBUTION = f"""
    SELECT organization_id, project_id, day, '{EVALUATION_AGENT}' AS agent_name, model,
           NULL::bigint AS api_key_id, '' AS end_user_id, 'evaluation' AS category, 'token' AS unit,
           input_tokens, cached_input_tokens, output_tokens, cost,
           1 AS steps, CASE WHEN unpriced THEN 1 ELSE 0 END AS unpriced_steps,
           0 AS reported_cost, 0 AS reported_computed_cost
    FROM billing_evaluationusage
"""  # noqa: S608 - constants


def evaluation_usage_record(
    *,
    organization_id: int,
    project_id: int,
    model: str,
    input_tokens: int,
    cached_input_tokens: int,
    output_tokens: int,
    cost: Decimal | None,
    price_id: int | None,
    at: datetime,
    evaluator: str = "",
    source: str = "",
    experiment_id: int | None = None,
    run_id: int | None = None,
) -> None:
    """Record one judge call (``cost`` None: the judge's model has no price; it counts
    0 and as unpriced) and add it to ``UsageDaily``, in one transaction; budget alerts
    are evaluated once it commits. Every call is recorded: a judge asked twice was paid
    twice."""
    if at.tzinfo is None:
        raise ValueError("at must be an aware datetime")
    counts = [max(int(value or 0), 0) for value in (input_tokens, cached_input_tokens, output_tokens)]
    if cost is not None and (not isinstance(cost, Decimal) or not cost.is_finite() or cost < 0):
        raise ValueError("cost must be a Decimal of at least 0, or None when unpriced")
    model = (model or "")[:200]
    day = at.astimezone(UTC).date()
    amount = cost if cost is not None else Decimal(0)
    with transaction.atomic(), connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO billing_evaluationusage (organization_id, project_id, day, evaluator, source, experiment_id, "
            "run_id, model, input_tokens, cached_input_tokens, output_tokens, cost, unpriced, price_id, created_at) "
            "VALUES (%s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, %s, now())",
            [
                organization_id,
                project_id,
                day,
                (evaluator or "")[:64],
                (source or "")[:16],
                experiment_id,
                run_id,
                model,
                *counts,
                amount,
                cost is None,
                price_id,
            ],
        )
        cursor.execute(
            _UPSERT_DAILY.format(
                source="VALUES (%s, %s, %s, %s, %s, NULL::bigint, '', 'evaluation', 'token', "
                "%s, %s, %s, %s, 1, %s, 0, 0)"
            ),
            [organization_id, project_id, day, EVALUATION_AGENT, model, *counts, amount, int(cost is None)],
        )
        transaction.on_commit(lambda: _evaluate_alerts(organization_id), robust=True)
