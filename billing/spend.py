"""Reads of spend, for the organization's billing page and the staff console.

Every number comes from the ledger (``UsageDaily``); the only reads of runs and steps
are the drill-downs to what is behind one number, each bounded and served by an index
(runs by project and start time, steps by project and start time or by run). They go
through the usage source runs registers (``billing.usage``): billing names no runs model.
"""

from __future__ import annotations

import calendar
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta
from decimal import Decimal
from typing import Any

from django.db.models import Sum
from django.db.models.functions import Coalesce
from django.utils import timezone

from agentops.models import Organization, Project
from agentops.scoping import dangerously_unscoped
from billing.ledger import COMPUTE_MODEL_PREFIX, is_compute_usage
from billing.models import ComputeUsage, UsageDaily
from billing.services import costs_differ
from billing.usage import usage_source

PERIODS = {"30d": "Last 30 days", "90d": "Last 90 days", "month": "This month"}
# A chart draws the biggest series by name and adds the rest up as "Other".
CHART_SERIES = 8
TOP_RUNS = 10
# Drill-downs list at most this many runs or steps.
DRILL_LIMIT = 200
STEP_LIMIT = 1000

SUMS = {
    "cost": Coalesce(Sum("cost"), Decimal(0)),
    "input_tokens": Coalesce(Sum("input_tokens"), 0),
    "cached_input_tokens": Coalesce(Sum("cached_input_tokens"), 0),
    "output_tokens": Coalesce(Sum("output_tokens"), 0),
    "steps": Coalesce(Sum("steps"), 0),
    "unpriced_steps": Coalesce(Sum("unpriced_steps"), 0),
    # The costs clients reported, and the computed cost of those same steps.
    "reported_cost": Coalesce(Sum("reported_cost"), Decimal(0)),
    "reported_computed_cost": Coalesce(Sum("reported_computed_cost"), Decimal(0)),
}


def flag_differences(rows: list[dict]) -> list[dict]:
    """Mark each ledger row whose reported cost differs from the computed cost of the
    same steps beyond the tolerance (``cost_differs``)."""
    for row in rows:
        row["cost_differs"] = costs_differ(row["reported_computed_cost"], row["reported_cost"])
    return rows


@dataclass(frozen=True)
class Window:
    """Days ``start`` to ``end``, both included (the ledger is per UTC day)."""

    start: date
    end: date

    @property
    def starts_at(self) -> datetime:
        return datetime.combine(self.start, time.min, tzinfo=UTC)

    @property
    def ends_at(self) -> datetime:
        """The first instant after the window."""
        return datetime.combine(self.end + timedelta(days=1), time.min, tzinfo=UTC)

    def days(self) -> list[date]:
        return [self.start + timedelta(days=offset) for offset in range((self.end - self.start).days + 1)]


def period_window(period: str, *, today: date | None = None) -> Window:
    """The days of a billing-page period: the last 30 or 90 days (today included) or
    this calendar month so far."""
    today = today or timezone.now().astimezone(UTC).date()
    if period == "month":
        return Window(today.replace(day=1), today)
    days = 90 if period == "90d" else 30
    return Window(today - timedelta(days=days - 1), today)


def month_window(day: date) -> Window:
    return Window(day.replace(day=1), day.replace(day=calendar.monthrange(day.year, day.month)[1]))


# --- The organization's billing page ---------------------------------------------------


def _ledger(*, organization, window: Window):
    return UsageDaily.objects.filter(organization=organization, day__gte=window.start, day__lte=window.end)


def totals_of(table: list[dict]) -> dict:
    """Cost, tokens, steps and unpriced steps of the whole spend table (added up here:
    scanning the ledger a second time for them costs as much as the table itself)."""
    totals = {name: sum((row[name] for row in table), Decimal(0) if "cost" in name else 0) for name in SUMS}
    totals["cost_differs"] = costs_differ(totals["reported_computed_cost"], totals["reported_cost"])
    return totals


def organization_spend_table(*, organization, window: Window) -> list[dict]:
    """Spend per project, agent and model over ``window``, the most expensive first."""
    # Grouped by project id, not by the joined slug and name: the join would be made for
    # every ledger row of the period; the few projects are read once afterwards.
    rows = list(
        _ledger(organization=organization, window=window)
        .values("project_id", "agent_name", "model")
        .annotate(**SUMS)
        .order_by()
    )
    projects = {
        project.pk: project
        for project in Project.objects.filter(pk__in={row["project_id"] for row in rows}).only("slug", "name")
    }
    for row in rows:
        project = projects[row["project_id"]]
        row["project__slug"], row["project__name"] = project.slug, project.name
        # GPU jobs' usage: the page shows it as a job, not as a model with runs behind it.
        row["job"] = is_compute_usage(agent_name=row["agent_name"], model=row["model"])
    rows.sort(key=lambda row: (-row["cost"], row["project__slug"], row["agent_name"], row["model"]))
    return flag_differences(rows)


def organization_series(*, organization, window: Window, dimension: str) -> dict:
    """Cost per day of each model, project or agent (``dimension``), for a stacked chart:
    ``{"days": [...], "series": [{"name", "cost": [...]}]}``; beyond the biggest
    ``CHART_SERIES`` names the rest is one "Other" series."""
    field = {"model": "model", "project": "project_id", "agent": "agent_name"}[dimension]
    rows = list(
        _ledger(organization=organization, window=window)
        .values("day", field)
        .annotate(cost=Coalesce(Sum("cost"), Decimal(0)))
        .order_by()
    )
    if dimension == "project":
        slugs = dict(Project.objects.filter(pk__in={row[field] for row in rows}).values_list("pk", "slug"))
        for row in rows:
            row[field] = slugs[row[field]]
    days = window.days()
    index = {day: position for position, day in enumerate(days)}
    by_name: dict[str, list[Decimal]] = {}
    for row in rows:
        name = row[field] or "(none)"
        by_name.setdefault(name, [Decimal(0)] * len(days))[index[row["day"]]] += row["cost"]
    ranked = sorted(by_name.items(), key=lambda item: (-sum(item[1]), item[0]))
    series = [{"name": name, "cost": costs} for name, costs in ranked[:CHART_SERIES]]
    if len(ranked) > CHART_SERIES:
        other = [sum(values) for values in zip(*(costs for _name, costs in ranked[CHART_SERIES:]), strict=True)]
        series.append({"name": "Other", "cost": other})
    return {"days": days, "series": series}


def top_runs(*, organization, window: Window, limit: int = TOP_RUNS) -> list[Any]:
    """The most expensive runs started in ``window`` (none without a usage source)."""
    source = usage_source()
    if source is None:
        return []
    return source.top_runs(organization=organization, starts_at=window.starts_at, ends_at=window.ends_at, limit=limit)


# --- The staff console -----------------------------------------------------------------

LEVELS = ("organization", "project", "model", "day")
LEVEL_FIELDS = {
    "organization": ["organization_id", "organization__slug", "organization__name"],
    "project": ["organization_id", "organization__slug", "project_id", "project__slug"],
    "model": ["organization_id", "organization__slug", "project_id", "project__slug", "model"],
    "day": ["organization_id", "organization__slug", "project_id", "project__slug", "model", "day"],
}


@dataclass(frozen=True)
class ConsoleFilters:
    start: date
    end: date
    organization_id: int | None = None
    project_id: int | None = None
    model: str | None = None
    day: date | None = None


def console_spend(*, level: str, filters: ConsoleFilters) -> list[dict]:
    """Spend across organizations grouped by ``level`` (organization, project, model or
    day), filtered, the most expensive first (days: in order)."""
    with dangerously_unscoped("staff console: spend across organizations"):
        queryset = UsageDaily.objects.filter(day__gte=filters.start, day__lte=filters.end)
        if filters.organization_id:
            queryset = queryset.filter(organization_id=filters.organization_id)
        if filters.project_id:
            queryset = queryset.filter(project_id=filters.project_id)
        if filters.model is not None:
            queryset = queryset.filter(model=filters.model)
        if filters.day:
            queryset = queryset.filter(day=filters.day)
        ordering = ["day", "-cost"] if level == "day" else ["-cost", *LEVEL_FIELDS[level][1:]]
        return flag_differences(list(queryset.values(*LEVEL_FIELDS[level]).annotate(**SUMS).order_by(*ordering)))


def console_runs(*, project: Project, model: str, day: date, limit: int = DRILL_LIMIT) -> list[dict]:
    """The runs behind one (project, model, day) number: their steps of that model on
    that day, summed per run, the most expensive first."""
    source = usage_source()
    if source is None:
        return []
    starts_at = datetime.combine(day, time.min, tzinfo=UTC)
    return source.runs_behind(
        project=project, model=model, starts_at=starts_at, ends_at=starts_at + timedelta(days=1), limit=limit
    )


def console_jobs(*, project: Project, model: str, day: date, limit: int = DRILL_LIMIT) -> list[ComputeUsage]:
    """The GPU jobs behind one (project, ``gpu:<hardware>``, day) number, the most
    expensive first; empty for any other model."""
    if not model.startswith(COMPUTE_MODEL_PREFIX):
        return []
    with dangerously_unscoped("staff console: drill-down to jobs"):
        return list(
            ComputeUsage.objects.filter(
                project=project, day=day, hardware=model.removeprefix(COMPUTE_MODEL_PREFIX)
            ).order_by("-cost", "job_id")[:limit]
        )


def console_run(run_id: int) -> tuple[Any | None, list[Any]]:
    """A run (any organization) and its first ``STEP_LIMIT`` steps, in order."""
    source = usage_source()
    if source is None:
        return None, []
    return source.run_with_steps(run_id, limit=STEP_LIMIT)


def console_organizations() -> list[Organization]:
    return list(Organization.objects.order_by("slug"))
