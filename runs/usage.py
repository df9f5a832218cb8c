"""Runs as billing's usage source (``billing.usage.UsageSource``): the usage of the
stored steps for the ledger, the runs and steps behind a spend number, and the
repricing of steps by a recompute. Registered by ``RunsConfig.ready()``, so billing,
below runs, never names a runs model or table: every query over them is here.

The ledger's queries are SQL text that ``billing.ledger`` runs inside its own
statements (one ``CREATE TEMP TABLE ... AS`` per refresh batch, one ``INSERT ...
SELECT`` per rebuild), so reading through the source adds no statement to a batch.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from datetime import datetime
from decimal import Decimal

from django.db import connection
from django.db.models import Count, Q, Sum
from django.db.models.functions import Coalesce

from agentops.models import Project
from agentops.scoping import dangerously_unscoped
from billing.usage import StepRepricing
from runs.ingest import recompute_run_totals
from runs.models import Run, Step

_BATCH = 2000

# One run's usage per UTC day, model and category, from its steps. A step with no start
# time counts on its run's start day, or the day it was stored. A tool step (no model) is
# category "tool", named by the tool, in its price's unit; every other step is "llm".
_USAGE_SELECT = """
    SELECT s.organization_id, r.project_id,
           (coalesce(s.started_at, r.started_at, s.created_at) AT TIME ZONE 'UTC')::date AS day,
           r.agent_name,
           CASE WHEN s.kind = 'tool' AND s.model = '' THEN left(s.name, 200) ELSE s.model END AS model,
           r.api_key_id, r.end_user_id,
           CASE WHEN s.kind = 'tool' AND s.model = '' THEN 'tool' ELSE 'llm' END AS category,
           CASE WHEN s.kind = 'tool' AND s.model = '' THEN coalesce(p.unit, '')
                WHEN s.model <> '' THEN 'token' ELSE '' END AS unit,
           s.run_id,
           sum(s.input_tokens) AS input_tokens,
           sum(s.cached_input_tokens) AS cached_input_tokens,
           sum(s.output_tokens) AS output_tokens,
           -- The cost budgets count: the organization's choice (billing.BillingSettings),
           -- the reported cost where a client sent one, else the computed cost.
           coalesce(sum(CASE WHEN bs.budget_cost = 'reported' THEN coalesce(s.reported_cost, s.cost)
                             ELSE s.cost END), 0) AS cost,
           count(*) AS steps,
           count(*) FILTER (WHERE s.unpriced) AS unpriced_steps,
           coalesce(sum(s.reported_cost), 0) AS reported_cost,
           coalesce(sum(s.cost) FILTER (WHERE s.reported_cost IS NOT NULL), 0) AS reported_computed_cost
    FROM runs_step s JOIN runs_run r ON r.id = s.run_id
    LEFT JOIN billing_price p ON p.id = s.price_id AND s.kind = 'tool'
    LEFT JOIN billing_billingsettings bs ON bs.organization_id = s.organization_id
    {where}
    GROUP BY s.organization_id, r.project_id, 3, r.agent_name, 5, r.api_key_id, r.end_user_id, 8, 9, s.run_id
"""


class RunsUsageSource:
    """What billing reads of runs and steps (see ``billing.usage.UsageSource``)."""

    # --- The ledger -------------------------------------------------------------------

    def usage_query(self, *, listed_runs: bool) -> str:
        return _USAGE_SELECT.format(where="WHERE s.run_id = ANY(%s)" if listed_runs else "")

    def existing_runs_query(self) -> str:
        return "SELECT id FROM runs_run"

    def lock_runs(self, cursor, run_ids: list[int]) -> tuple[set[int], list[int]]:
        cursor.execute("SELECT id FROM runs_run WHERE id = ANY(%s)", [run_ids])
        existing = {row[0] for row in cursor.fetchall()}
        cursor.execute("SELECT id FROM runs_run WHERE id = ANY(%s) ORDER BY id FOR SHARE SKIP LOCKED", [run_ids])
        return existing, sorted(row[0] for row in cursor.fetchall())

    # --- Drill-downs ------------------------------------------------------------------

    def top_runs(self, *, organization, starts_at: datetime, ends_at: datetime, limit: int) -> list[Run]:
        """Two queries: the ids of the most expensive runs of the period, read from the
        organization's runs by cost (``run_organization_cost``, an index-only scan that
        stops at ``limit`` runs of the period), then those runs."""
        ids = list(
            Run.objects.filter(
                organization=organization, started_at__gte=starts_at, started_at__lt=ends_at, total_cost__gt=0
            )
            .order_by("-total_cost", "-id")
            .values_list("id", flat=True)[:limit]
        )
        runs = (
            Run.objects.filter(pk__in=ids)
            .select_related("project")
            .only(
                "id",
                "name",
                "trace_id",
                "agent_name",
                "started_at",
                "total_cost",
                "input_tokens",
                "output_tokens",
                "project__slug",
                "project__name",
                "project__organization_id",
            )
        )
        return sorted(runs, key=lambda run: (-run.total_cost, -run.pk))

    def runs_behind(self, *, project, model: str, starts_at: datetime, ends_at: datetime, limit: int) -> list[dict]:
        """The range's steps of that model, summed per run: one day of one project's
        steps is a range of the (project, started_at) index."""
        with dangerously_unscoped("staff console: drill-down to runs"):
            rows = list(
                Step.objects.filter(
                    project=project,
                    started_at__gte=starts_at,
                    started_at__lt=ends_at,
                    model=model,
                )
                .values("run_id")
                .annotate(
                    steps=Count("id"),
                    cost=Coalesce(Sum("cost"), Decimal(0)),
                    input_tokens=Coalesce(Sum("input_tokens"), 0),
                    output_tokens=Coalesce(Sum("output_tokens"), 0),
                    unpriced=Count("id", filter=Q(unpriced=True)),
                )
                .order_by("-cost", "run_id")[:limit]
            )
            names = dict(
                Run.objects.filter(pk__in=[row["run_id"] for row in rows]).values_list("pk", "name").iterator()
            )
        for row in rows:
            row["name"] = names.get(row["run_id"], "")
        return rows

    def run_with_steps(self, run_id: int, *, limit: int) -> tuple[Run | None, list[Step]]:
        with dangerously_unscoped("staff console: search by run id"):
            run = Run.objects.select_related("project", "organization").filter(pk=run_id).first()
            if run is None:
                return None, []
            steps = list(
                Step.objects.filter(run_id=run.pk)
                .only(
                    "id",
                    "run_id",
                    "kind",
                    "name",
                    "model",
                    "started_at",
                    *Step.USAGE_FIELDS,
                )
                .order_by("started_at", "id")[:limit]
            )
        return run, steps

    # --- Recompute --------------------------------------------------------------------

    def repricings(
        self,
        *,
        organization_id: int | None,
        starts_at: datetime,
        ends_at: datetime,
        matches: Callable[[str], bool],
        cost: Callable[..., Decimal],
        lock: bool,
    ) -> Iterator[StepRepricing]:
        """Read project by project so each query is a range of the (project,
        started_at) index. The caller holds the scope (recompute crosses organizations)."""
        projects = Project.objects.order_by("pk")
        if organization_id:
            projects = projects.filter(organization_id=organization_id)
        for project_id in projects.values_list("pk", flat=True):
            steps = Step.objects.filter(
                project_id=project_id, started_at__gte=starts_at, started_at__lt=ends_at, kind=Step.Kind.LLM
            )
            models = [
                model
                for model in steps.order_by().values_list("model", flat=True).distinct()
                if model and matches(model.strip().lower())
            ]
            if not models:
                continue
            matched = steps.filter(model__in=models).order_by("pk")
            if lock:
                matched = matched.select_for_update(of=("self",))
            for row in matched.values_list(
                "pk",
                "run_id",
                "organization_id",
                "model",
                "input_tokens",
                "cached_input_tokens",
                "output_tokens",
                "cache_write_input_tokens",
                "reasoning_output_tokens",
                "cost",
                "price_id",
            ).iterator(chunk_size=_BATCH):
                (step_id, run_id, owner_id, model, input_tokens, cached, output_tokens, cache_write, reasoning) = row[
                    :9
                ]
                old_cost, price_id = row[9:]
                yield StepRepricing(
                    step_id=step_id,
                    run_id=run_id,
                    organization_id=owner_id,
                    model=model,
                    old_cost=old_cost,
                    new_cost=cost(
                        input_tokens=input_tokens,
                        cached_input_tokens=cached,
                        output_tokens=output_tokens,
                        cache_write_input_tokens=cache_write,
                        reasoning_output_tokens=reasoning,
                    ),
                    old_price_id=price_id,
                )

    def reprice(self, items: list[StepRepricing], *, price_id: int) -> None:
        """Set the new cost and price of a batch of steps in one statement."""
        if not items:
            return
        with connection.cursor() as cursor:
            cursor.execute(
                """
                UPDATE runs_step AS step
                   SET cost = new.cost, price_id = %s, unpriced = false
                  FROM unnest(%s::bigint[], %s::numeric[]) AS new(id, cost)
                 WHERE step.id = new.id
                """,
                [price_id, [item.step_id for item in items], [item.new_cost for item in items]],
            )

    def recompute_totals(self, run_ids: list[int]) -> None:
        recompute_run_totals(run_ids)
