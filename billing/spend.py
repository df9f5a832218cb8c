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

from agentops.models import ApiKey, Organization, Project
from agentops.scoping import dangerously_unscoped
from billing.ledger import COMPUTE_MODEL_PREFIX, is_compute_usage
from billing.models import Category, ComputeUsage, UsageDaily
from billing.rollups import ledger_sums
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


def thirty_days_to(end: date) -> date:
    """The first day of the 30 days ending on ``end`` (the default range of the spend API
    and the console), or the calendar's first day: 29 days before 0001-01-05 is no date
    (an OverflowError, a 500, when subtracted)."""
    return date.fromordinal(max(date.min.toordinal(), end.toordinal() - 29))


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


def _sums(organization, window: Window, **options) -> list[dict]:
    """The ledger's sums over ``window`` of ``organization`` (an object or its id), from
    its rollups where they hold them, from ``UsageDaily`` otherwise (``ledger_sums``)."""
    organization_id = organization if isinstance(organization, int) else organization.pk
    return ledger_sums(organization_id=organization_id, start=window.start, end=window.end, **options)


def totals_of(table: list[dict]) -> dict:
    """Cost, tokens, steps and unpriced steps of the whole spend table (added up here:
    scanning the ledger a second time for them costs as much as the table itself)."""
    totals = {name: sum((row[name] for row in table), Decimal(0) if "cost" in name else 0) for name in SUMS}
    totals["cost_differs"] = costs_differ(totals["reported_computed_cost"], totals["reported_cost"])
    return totals


def organization_spend_table(*, organization, window: Window) -> list[dict]:
    """Spend per project, agent, model, category and unit over ``window``, the most
    expensive first."""
    # Grouped by project id, not by the joined slug and name: the join would be made for
    # every ledger row of the period; the few projects are read once afterwards.
    rows = _sums(organization, window, group_by=("project_id", "agent_name", "model", "category", "unit"))
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
    """Cost per day of each model, project, agent or category (``dimension``), for a stacked chart:
    ``{"days": [...], "series": [{"name", "cost": [...]}]}``; beyond the biggest
    ``CHART_SERIES`` names the rest is one "Other" series."""
    field = {"model": "model", "project": "project_id", "agent": "agent_name", "category": "category"}[dimension]
    rows = _sums(organization, window, group_by=("day", field), measures=("cost",))
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


# --- Spend grouped by any dimensions (the billing page's categories, the billing API) --

# What spend can be grouped by, and the ledger field behind each.
GROUPS = {
    "day": "day",
    "model": "model",
    "project": "project_id",
    "agent": "agent_name",
    "api_key": "api_key_id",
    "category": "category",
    "unit": "unit",
}
CATEGORIES = tuple(Category.values)


def spend_by(
    *,
    organization,
    window: Window,
    group_by: tuple[str, ...],
    project: Project | None = None,
    categories: tuple[str, ...] = (),
) -> list[dict]:
    """Spend over ``window`` grouped by ``group_by`` (names of ``GROUPS``), of the whole
    organization or one ``project``, of every category or those listed. Each row has its
    group values (a project as its slug, an API key as its prefix and name, empty when
    none) and ``SUMS``; by day first when grouped by day, else the most expensive first."""
    fields = tuple(GROUPS[name] for name in group_by)
    where = {"project_id": project.pk} if project is not None else {}
    rows = _sums(organization, window, group_by=fields, where=where, categories=categories)
    if "project" in group_by:
        slugs = dict(Project.objects.filter(pk__in={row["project_id"] for row in rows}).values_list("pk", "slug"))
    if "api_key" in group_by:
        keys = {
            key.pk: key
            for key in ApiKey.objects.filter(pk__in={row["api_key_id"] for row in rows} - {None}).only("name", "prefix")
        }
    result = []
    for row in rows:
        item = {}
        for name in group_by:
            value = row.pop(GROUPS[name])
            if name == "project":
                value = slugs[value]
            elif name == "api_key":
                key = keys.get(value)
                item["api_key_name"] = key.name if key else ""
                value = key.prefix if key else ""
            item[name] = value
        item.update(row)
        result.append(item)
    result.sort(key=lambda row: (row.get("day") or date.min, -row["cost"], *(str(row[g]) for g in group_by)))
    return result


def category_totals(*, organization, window: Window, project: Project | None = None) -> list[dict]:
    """Spend of each category (all four, zero when nothing was spent), then each tool
    unit: ``[{"category", "label", "cost", "steps", "units": [{"unit", "cost", "steps"}]}]``."""
    rows = spend_by(organization=organization, window=window, group_by=("category", "unit"), project=project)
    totals = []
    for category in Category:
        mine = [row for row in rows if row["category"] == category.value]
        totals.append(
            {
                "category": category.value,
                "label": category.label,
                "cost": sum((row["cost"] for row in mine), Decimal(0)),
                "steps": sum(row["steps"] for row in mine),
                "units": sorted(
                    ({"unit": row["unit"] or "unpriced", "cost": row["cost"], "steps": row["steps"]} for row in mine),
                    key=lambda unit: (-unit["cost"], unit["unit"]),
                )
                if category == Category.TOOL
                else [],
            }
        )
    return totals


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


# --- One project's spend (the MCP server's get_spend) --------------------------------

SPEND_DIMENSIONS = {"day": "day", "model": "model", "project": "project_id", "agent": "agent_name", "key": "api_key_id"}


def project_spend(*, project: Project, window: Window, by: str) -> list[dict]:
    """The project's spend over ``window`` grouped by ``by`` (day, model, project, agent
    or key), from the ledger: ``[{"name", "cost", "input_tokens", ..., "unpriced_steps"}]``,
    by day in date order, otherwise the most expensive first. ``key`` names the API key by
    its prefix ("(none)" for work no key started)."""
    field = SPEND_DIMENSIONS[by]
    rows = _sums(project.organization_id, window, group_by=(field,), where={"project_id": project.pk})
    names: dict = {}
    if by == "project":
        names = {project.pk: project.slug}
    elif by == "key":
        from agentops.models import ApiKey

        names = dict(ApiKey.objects.filter(pk__in={row[field] for row in rows}).values_list("pk", "prefix"))
    for row in rows:
        value = row.pop(field)
        row["name"] = value.isoformat() if by == "day" else (names.get(value, value) if names else value) or "(none)"
    if by == "day":
        rows.sort(key=lambda row: row["name"])
    else:
        rows.sort(key=lambda row: (-row["cost"], str(row["name"])))
    return rows
