"""The totals of runs (steps, errors, tokens, cost, models), their time span, latency,
status, error and search text, recomputed from their steps in one statement.

``ingest()`` calls it for every run it touched (in the same transaction); ``runs.usage``
after it re-prices steps.
"""

from __future__ import annotations

from collections.abc import Iterable
from datetime import datetime

from django.db import connection

from runs.models import Run


def _link_to_steps_sql(tables: Iterable[str]) -> list[str]:
    """WITH queries that tie the items of ``tables`` (messages, tool calls, snapshots) of
    the runs ``%(run_ids)s`` to their step by span id, whichever arrived first."""
    return [
        f"""
        {table}_linked AS (
            UPDATE {table} AS item SET step_id = step.id
            FROM runs_step AS step
            WHERE item.run_id = ANY(%(run_ids)s) AND item.span_id <> '' AND item.step_id IS NULL
              AND step.run_id = item.run_id AND step.span_id = item.span_id
        )"""  # noqa: S608 - table names are constants
        for table in tables
    ]


# The run's time span as recompute_run_totals() sets it, for its latency in the same
# statement: the run's own times widened by its steps' (totals.* are NULL without steps,
# and LEAST and GREATEST skip NULLs). A status the client stated and that is not final
# keeps the run's end as stated.
_RUN_STARTED = "LEAST(run.started_at, totals.first_start)"
_ENDED_SQL = ", ".join(f"'{status}'" for status in sorted(Run.ENDED))
_RUN_ENDED = (
    f"CASE WHEN run.status_explicit AND run.status NOT IN ({_ENDED_SQL}) "
    "THEN run.ended_at ELSE GREATEST(run.ended_at, totals.last_end) END"
)


def recompute_run_totals(
    run_ids: list[int],
    *,
    updated_at: datetime | None = None,
    search_run_ids: list[int] | None = None,
    link_tables: Iterable[str] = (),
) -> None:
    """Recompute totals, time span, latency, status, error and search text of ``run_ids``
    from their steps, in one statement. Runs whose client stated a status or an error
    keep it; runs without steps keep theirs.

    The search text is recomputed for ``search_run_ids`` (by default all of ``run_ids``)
    and for runs that have none yet: it reads up to 500 kB of name, input and output, and
    only a change of those changes it; ingest() names the runs whose name, input or
    output it wrote. The other writers of runs (the executor, approvals) never write
    those.

    ``updated_at``: set it too. ``link_tables``: in the same statement, tie the items of
    these tables to their steps (see _link_to_steps_sql; the totals do not read them)."""
    if not run_ids:
        return
    if search_run_ids is None:
        search_run_ids = run_ids
    links = "".join(f"{cte}," for cte in _link_to_steps_sql(link_tables))
    with connection.cursor() as cursor:
        cursor.execute(
            f"""
            WITH {links} totals AS (
                SELECT run_id,
                       count(*) AS step_count,
                       count(*) FILTER (WHERE status = 'error') AS error_count,
                       count(*) FILTER (WHERE kind = 'llm') AS llm_call_count,
                       coalesce(sum(input_tokens), 0) AS input_tokens,
                       coalesce(sum(cached_input_tokens), 0) AS cached_input_tokens,
                       coalesce(sum(output_tokens), 0) AS output_tokens,
                       coalesce(sum(cache_write_input_tokens), 0) AS cache_write_input_tokens,
                       coalesce(sum(reasoning_output_tokens), 0) AS reasoning_output_tokens,
                       coalesce(sum(cost), 0) AS total_cost,
                       -- What clients reported, and the computed cost of those same steps.
                       sum(reported_cost) AS reported_cost,
                       sum(coalesce(cost, 0)) FILTER (WHERE reported_cost IS NOT NULL)
                           AS reported_steps_computed_cost,
                       count(*) FILTER (WHERE unpriced) AS unpriced_step_count,
                       coalesce(array_agg(DISTINCT model) FILTER (WHERE model <> ''), '{{}}') AS models_used,
                       min(started_at) AS first_start,
                       max(ended_at) AS last_end,
                       -- A root step has ended when it has an end time or a final status (a
                       -- status is only known at the end, and scripts may send no times).
                       bool_or(parent_span_id = '' AND status = 'error') AS root_failed,
                       bool_or(parent_span_id = '' AND (ended_at IS NOT NULL OR status <> 'unset')) AS root_ended,
                       max(error) FILTER (WHERE parent_span_id = '' AND status = 'error') AS root_error
                FROM runs_step WHERE run_id = ANY(%(run_ids)s) GROUP BY run_id
            )
            UPDATE runs_run AS run SET
                -- totals.* are NULL for a run without steps: it keeps its own.
                step_count = coalesce(totals.step_count, run.step_count),
                error_count = coalesce(totals.error_count, run.error_count),
                llm_call_count = coalesce(totals.llm_call_count, run.llm_call_count),
                input_tokens = coalesce(totals.input_tokens, run.input_tokens),
                cached_input_tokens = coalesce(totals.cached_input_tokens, run.cached_input_tokens),
                output_tokens = coalesce(totals.output_tokens, run.output_tokens),
                cache_write_input_tokens = coalesce(totals.cache_write_input_tokens, run.cache_write_input_tokens),
                reasoning_output_tokens = coalesce(totals.reasoning_output_tokens, run.reasoning_output_tokens),
                total_cost = coalesce(totals.total_cost, run.total_cost),
                reported_cost = CASE WHEN totals.run_id IS NULL THEN run.reported_cost ELSE totals.reported_cost END,
                reported_steps_computed_cost = CASE WHEN totals.run_id IS NULL THEN run.reported_steps_computed_cost
                                                    ELSE totals.reported_steps_computed_cost END,
                unpriced_step_count = coalesce(totals.unpriced_step_count, run.unpriced_step_count),
                models_used = coalesce(totals.models_used, run.models_used),
                started_at = {_RUN_STARTED},
                ended_at = {_RUN_ENDED},
                -- Never negative: a client clock stepping back can end a run before it starts.
                latency_ms = CASE WHEN {_RUN_STARTED} IS NOT NULL AND {_RUN_ENDED} IS NOT NULL
                                  THEN GREATEST(extract(epoch FROM ({_RUN_ENDED}) - {_RUN_STARTED}) * 1000, 0)::bigint
                             END,
                status = CASE
                    WHEN run.status_explicit OR totals.run_id IS NULL THEN run.status
                    WHEN totals.root_failed THEN 'failed'
                    WHEN totals.root_ended THEN 'succeeded'
                    ELSE 'running' END,
                -- Unless the client stated it, the error is the root step's as it is now: a
                -- root re-sent as succeeded must not leave its old error on the run.
                error = CASE WHEN 'error' = ANY(run.explicit_fields) OR totals.run_id IS NULL THEN run.error
                             WHEN totals.root_failed THEN coalesce(totals.root_error, '')
                             ELSE '' END,
                -- The payloads as JSON text, where a newline, a tab or a carriage return is
                -- a backslash and a letter: as they are, "a\\nrefund" would index "nrefund".
                search = CASE WHEN run.search IS NULL OR run.id = ANY(%(search_run_ids)s)
                    THEN to_tsvector('simple', replace(replace(replace(
                        left(coalesce(name, '') || ' ' || coalesce(input::text, '') || ' '
                             || coalesce(output::text, ''), 500000),
                        '\\n', ' '), '\\t', ' '), '\\r', ' '))
                    ELSE run.search END,
                updated_at = coalesce(%(updated_at)s::timestamptz, run.updated_at)
            FROM unnest(%(run_ids)s::bigint[]) AS touched(id) LEFT JOIN totals ON totals.run_id = touched.id
            WHERE run.id = touched.id
            """,  # noqa: S608 - the interpolated fragments are constants
            {"run_ids": run_ids, "search_run_ids": search_run_ids, "updated_at": updated_at},
        )
