"""The cost-audit console: staff pages inside the Django admin (``/admin/billing/...``).

Pages hang off the ``UsageDaily`` admin (its ``get_urls``), so the admin's own staff
check (``admin_site.admin_view``), login redirect, CSRF and layout apply to each; every
page also needs the admin's view permission of the ledger, and applying a recompute
the add permission of ``CostRevision``.

- Spend by organization → project → model → day, each number linking one level down,
  the day to the runs behind it (or the GPU jobs, for a ``gpu:<hardware>`` model) and a
  run to its steps; search by run id; every table as CSV (``?format=csv``).
- Recompute: a price (published or draft) and days → preview per organization and
  model → apply (POST), an audited ``CostRevision`` (``billing.recompute``).
- Reconciliation: an organization and a provider's usage CSV → the differences per
  day and model (``billing.reconcile``).
"""

from __future__ import annotations

from datetime import date
from decimal import Decimal
from urllib.parse import urlencode

from django.contrib import admin, messages
from django.core.exceptions import PermissionDenied
from django.http import Http404
from django.shortcuts import redirect
from django.template.response import TemplateResponse
from django.urls import path, reverse

from agentops.admin import ReadOnlyAdmin
from agentops.csvexport import csv_response
from agentops.errors import ServiceError
from agentops.models import Organization, Project
from agentops.scoping import dangerously_unscoped, organization_scope
from billing import spend
from billing.forms import ConsoleFilterForm, RecomputeForm, ReconcileForm, RunSearchForm
from billing.models import CostRevision, Price, UsageDaily
from billing.recompute import apply_recompute, preview_recompute
from billing.reconcile import parse_usage_csv, reconcile

NEXT_LEVEL = {"organization": "project", "project": "model", "model": "day"}
LEVEL_COLUMNS = {
    "organization": ["organization__slug"],
    "project": ["organization__slug", "project__slug"],
    "model": ["organization__slug", "project__slug", "model"],
    "day": ["organization__slug", "project__slug", "model", "day"],
}
MEASURE_COLUMNS = [*spend.SUMS, "cost_differs"]


@admin.register(UsageDaily)
class UsageConsoleAdmin(ReadOnlyAdmin):
    """The ledger's admin entry is the console: its list opens the spend tables."""

    def get_urls(self):
        view = self.admin_site.admin_view
        return [
            path("spend/", view(self.spend_view), name="billing_console_spend"),
            path("runs/", view(self.runs_view), name="billing_console_runs"),
            path("runs/<int:run_id>/", view(self.run_view), name="billing_console_run"),
            path("recompute/", view(self.recompute_view), name="billing_console_recompute"),
            path("reconcile/", view(self.reconcile_view), name="billing_console_reconcile"),
            *super().get_urls(),
        ]

    def changelist_view(self, request, extra_context=None):
        return redirect("admin:billing_console_spend")

    # --- Helpers ----------------------------------------------------------------------

    def _require_view(self, request) -> None:
        if not self.has_view_permission(request):
            raise PermissionDenied

    def _render(self, request, template: str, context: dict) -> TemplateResponse:
        return TemplateResponse(
            request,
            f"billing/console/{template}",
            {
                **self.admin_site.each_context(request),
                "opts": self.model._meta,
                "search_form": RunSearchForm(request.GET if "run" in request.GET else None),
                **context,
            },
        )

    # --- Spend ------------------------------------------------------------------------

    def spend_view(self, request):
        self._require_view(request)
        form = ConsoleFilterForm(request.GET)
        level, filters = form.filters()
        rows = spend.console_spend(level=level, filters=filters)
        if request.GET.get("format") == "csv":
            columns = LEVEL_COLUMNS[level] + MEASURE_COLUMNS
            return csv_response(
                f"spend-by-{level}-{filters.start}-{filters.end}.csv",
                columns,
                ([row[column] for column in columns] for row in rows),
            )
        base = {"start": filters.start.isoformat(), "end": filters.end.isoformat()}
        for row in rows:
            row["link"] = self._drill_link(level, row, base)
        query = request.GET.copy()
        query["format"] = "csv"
        return self._render(
            request,
            "spend.html",
            {
                "title": f"Spend by {level}",
                "form": form,
                "level": level,
                "levels": spend.LEVELS,
                "filters": filters,
                "rows": rows,
                "columns": LEVEL_COLUMNS[level],
                "total": sum((row["cost"] for row in rows), Decimal(0)),
                "csv_query": query.urlencode(),
                "breadcrumbs": self._breadcrumbs(filters, base),
                "level_query": urlencode({key: value for key, value in request.GET.items() if key != "level"}),
            },
        )

    def _drill_link(self, level: str, row: dict, base: dict) -> str:
        if level == "day":
            query = {"project": row["project_id"], "model": row["model"], "day": row["day"].isoformat()}
            return reverse("admin:billing_console_runs") + "?" + urlencode(query)
        query = {**base, "level": NEXT_LEVEL[level], "organization": row["organization_id"]}
        if level in ("project", "model"):
            query["project"] = row["project_id"]
        if level == "model":
            query["model"] = row["model"]
        return reverse("admin:billing_console_spend") + "?" + urlencode(query)

    def _breadcrumbs(self, filters: spend.ConsoleFilters, base: dict) -> list[tuple[str, str]]:
        """The way down to this table, each step named as people know it (organization and
        project by name and slug; an id no longer found stays an id)."""
        url = reverse("admin:billing_console_spend")
        crumbs = [("All organizations", f"{url}?{urlencode({**base, 'level': 'organization'})}")]
        if filters.organization_id:
            with dangerously_unscoped("staff console: the names behind the ids of a drill-down"):
                organization = Organization.objects.filter(pk=filters.organization_id).first()
                project = Project.objects.filter(pk=filters.project_id).first() if filters.project_id else None
            query = {**base, "level": "project", "organization": filters.organization_id}
            label = (
                f"{organization.name} ({organization.slug})"
                if organization
                else f"organization {filters.organization_id}"
            )
            crumbs.append((label, f"{url}?{urlencode(query)}"))
            if filters.project_id:
                query = {**query, "level": "model", "project": filters.project_id}
                label = f"{project.name} ({project.slug})" if project else f"project {filters.project_id}"
                crumbs.append((label, f"{url}?{urlencode(query)}"))
                if filters.model is not None:
                    query = {**query, "level": "day", "model": filters.model}
                    crumbs.append((f"model {filters.model or '(none)'}", f"{url}?{urlencode(query)}"))
        return crumbs

    # --- Runs and steps ---------------------------------------------------------------

    def runs_view(self, request):
        self._require_view(request)
        if "run" in request.GET:
            search = RunSearchForm(request.GET)
            if search.is_valid():
                return redirect("admin:billing_console_run", run_id=search.cleaned_data["run"])
            # An empty or malformed run id: say so, beside the search box.
            response = self._render(request, "run_search.html", {"title": "Find a run", "search_form": search})
            response.status_code = 400
            return response
        try:
            project_id = int(request.GET["project"])
            day = date.fromisoformat(request.GET["day"])
        except (KeyError, ValueError):
            raise Http404("Name a project and a day.") from None
        model = request.GET.get("model", "")
        with dangerously_unscoped("staff console: the project behind a number"):
            project = Project.objects.select_related("organization").filter(pk=project_id).first()
        if project is None:
            raise Http404("No such project.")
        jobs = spend.console_jobs(project=project, model=model, day=day)
        if jobs and request.GET.get("format") == "csv":
            columns = ["job_id", "hardware", "backend", "seconds", "hourly", "cost", "price_id"]
            return csv_response(
                f"jobs-{project.organization.slug}-{project.slug}-{day}.csv",
                columns,
                ([getattr(job, column) for column in columns] for job in jobs),
            )
        rows = [] if jobs else spend.console_runs(project=project, model=model, day=day)
        if request.GET.get("format") == "csv":
            columns = ["run_id", "name", "steps", "cost", "input_tokens", "output_tokens", "unpriced"]
            return csv_response(
                f"runs-{project.organization.slug}-{project.slug}-{day}.csv",
                columns,
                ([row[column] for column in columns] for row in rows),
            )
        query = request.GET.copy()
        query["format"] = "csv"
        return self._render(
            request,
            "runs.html",
            {
                "title": f"{'Jobs' if jobs else 'Runs'} of {project.organization.slug}/{project.slug}, "
                f"{model or '(no model)'}, {day}",
                "project": project,
                "model": model,
                "day": day,
                "rows": rows,
                "jobs": jobs,
                "limit": spend.DRILL_LIMIT,
                "csv_query": query.urlencode(),
            },
        )

    def run_view(self, request, run_id: int):
        self._require_view(request)
        run, steps = spend.console_run(run_id)
        if run is None:
            raise Http404("No such run.")
        if request.GET.get("format") == "csv":
            columns = ["id", "kind", "name", "model", "started_at", "input_tokens", "cached_input_tokens"]
            columns += ["cache_write_input_tokens", "output_tokens", "reasoning_output_tokens", "cost", "unpriced"]
            columns += ["price_id", "reported_cost", "reported_cost_currency", "reported_cost_source"]
            columns += ["reported_cost_differs"]
            return csv_response(
                f"run-{run.pk}-steps.csv", columns, ([getattr(step, column) for column in columns] for step in steps)
            )
        return self._render(
            request,
            "run.html",
            {
                "title": f"Run {run.pk}",
                "run": run,
                "steps": steps,
                "limit": spend.STEP_LIMIT,
                "step_cost": sum((step.cost or Decimal(0) for step in steps), Decimal(0)),
            },
        )

    # --- Recompute --------------------------------------------------------------------

    def recompute_view(self, request):
        self._require_view(request)
        can_apply = request.user.has_perm("billing.add_costrevision")
        form = RecomputeForm(request.POST or request.GET or None)
        preview = None
        if form.is_bound and form.is_valid():
            price: Price = form.cleaned_data["price"]
            starts_at, ends_at = form.window()
            try:
                if request.method == "POST" and request.POST.get("action") == "apply":
                    if not can_apply:
                        raise PermissionDenied
                    revision = apply_recompute(
                        price=price,
                        starts_at=starts_at,
                        ends_at=ends_at,
                        actor=request.user,
                        ip=request.META.get("REMOTE_ADDR"),
                    )
                    messages.success(
                        request, f"Recompute {revision.pk} applied: {revision.summary['steps']} steps repriced."
                    )
                    return redirect("admin:billing_costrevision_change", revision.pk)
                preview = preview_recompute(price, starts_at, ends_at)
            except ServiceError as exc:
                form.add_error(None, exc.message)
        totals = None
        if preview is not None:
            totals = {
                key: sum((row[key] for row in preview), Decimal(0)) for key in ("old_total", "new_total", "difference")
            }
            totals["steps"] = sum(row["steps"] for row in preview)
        return self._render(
            request,
            "recompute.html",
            {"title": "Recompute costs", "form": form, "preview": preview, "totals": totals, "can_apply": can_apply},
        )

    # --- Reconciliation ---------------------------------------------------------------

    def reconcile_view(self, request):
        self._require_view(request)
        form = ReconcileForm(request.POST or None, request.FILES or None)
        result, errors = None, []
        if request.method == "POST" and form.is_valid():
            organization = form.cleaned_data["organization"]
            try:
                rows = parse_usage_csv(form.cleaned_data["file"].read())
                with organization_scope(organization):
                    result = reconcile(organization=organization, rows=rows)
            except ServiceError as exc:
                form.add_error("file", exc.message)
                errors = exc.details or []
            else:
                result["organization"] = organization
        return self._render(
            request,
            "reconcile.html",
            {"title": "Reconcile with a provider", "form": form, "result": result, "errors": errors},
        )


@admin.register(CostRevision)
class CostRevisionAdmin(ReadOnlyAdmin):
    """Applied recomputes, read-only: they are made on the recompute page."""

    list_display = ["pk", "price", "starts_at", "ends_at", "created_by", "created_at"]
    readonly_fields = ["price", "starts_at", "ends_at", "summary", "created_by", "created_at"]
