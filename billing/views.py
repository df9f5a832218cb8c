"""The organization's billing page: spend from the ledger over a period (totals, spend
by category with tools by unit, a chart by model, project, agent or category, energy and
CO2e per day beside it, the spend table and its CSV export, the most expensive runs),
budgets with their progress (create, edit, delete) and the alerts raised.
Owners and admins only: "billing:read" to see it, "budget:write" to change budgets."""

from __future__ import annotations

from decimal import Decimal

from django.http import Http404, JsonResponse
from django.shortcuts import redirect
from django.urls import reverse

from agentops import live
from agentops.charts import chart_label
from agentops.csvexport import csv_response
from agentops.errors import ServiceError
from agentops.pages import Need, OrganizationPage
from billing import budgets, carbon, spend
from billing.forms import BudgetCostForm, BudgetForm, PeriodForm
from billing.models import Budget, BudgetAlert

ALERTS_SHOWN = 50


def budget_rows(organization) -> list[dict]:
    """The organization's budgets, each with its spend in the current period."""
    rows = []
    for budget in Budget.objects.filter(organization=organization).select_related("project", "api_key"):
        progress = budgets.budget_spend(budget)
        rows.append({"budget": budget, **progress, "bar": min(float(progress["percent"]), 100.0)})
    return rows


class BillingIndexPage(OrganizationPage):
    # Owners and admins, as the billing API's spend and budget status.
    permissions = {"GET": Need("billing:read", "see billing")}

    def get(self, request, org_slug):
        form = PeriodForm(request.GET)
        period, dimension = form.value("period", "30d"), form.value("by", "model")
        window = spend.period_window(period)
        table = spend.organization_spend_table(organization=self.organization, window=window)
        if request.GET.get("format") == "csv":
            return csv_response(
                f"{self.organization.slug}-spend-{window.start}-{window.end}.csv",
                ["project", "agent", "model", "category", "unit", "cost_usd", "input_tokens", "cached_input_tokens"]
                + ["output_tokens", "steps", "unpriced_steps", "reported_cost_usd", "reported_steps_computed_cost_usd"]
                + ["cost_differs"],
                (
                    [
                        row["project__slug"],
                        row["agent_name"],
                        row["model"],
                        row["category"],
                        row["unit"],
                        row["cost"],
                        row["input_tokens"],
                        row["cached_input_tokens"],
                        row["output_tokens"],
                        row["steps"],
                        row["unpriced_steps"],
                        row["reported_cost"],
                        row["reported_computed_cost"],
                        row["cost_differs"],
                    ]
                    for row in table
                ),
            )
        totals = spend.totals_of(table)
        # Each row links to its project's runs: reversed once per project, not per row
        # (hundreds of rows over 90 days).
        runs_urls = {
            slug: reverse("runs:index", args=[self.organization.slug, slug])
            for slug in {row["project__slug"] for row in table}
        }
        for row in table:
            row["runs_url"] = runs_urls[row["project__slug"]]
        series = spend.organization_series(organization=self.organization, window=window, dimension=dimension)
        chart = {
            "days": [day.isoformat() for day in series["days"]],
            "series": [
                {"name": chart_label(item["name"]), "cost": [float(value) for value in item["cost"]]}
                for item in series["series"]
            ],
        }
        footprint = carbon.daily_footprint(organization=self.organization, window=window)
        chart["carbon"] = {
            "days": [day.isoformat() for day in footprint["days"]],
            "energy_wh": [float(value) for value in footprint["energy_wh"]],
            "co2e_g": [float(value) for value in footprint["co2e_g"]],
        }
        return self.render_page(
            "billing/index.html",
            {
                "period": period,
                "periods": list(spend.PERIODS.items()),
                "dimension": dimension,
                "dimensions": [
                    ("model", "Model"),
                    ("project", "Project"),
                    ("agent", "Agent"),
                    ("category", "Category"),
                ],
                "categories": spend.category_totals(organization=self.organization, window=window),
                "footprint": footprint["total"],
                "window": window,
                "totals": totals,
                "total_tokens": totals["input_tokens"] + totals["output_tokens"],
                "table": table,
                "chart": chart,
                "top_runs": spend.top_runs(organization=self.organization, window=window),
                "budgets": budget_rows(self.organization),
                "alerts": list(
                    BudgetAlert.objects.filter(organization=self.organization)
                    .select_related("budget")
                    .order_by("-created_at")[:ALERTS_SHOWN]
                ),
                "budget_form": BudgetForm(organization=self.organization),
                "budget_cost_form": BudgetCostForm(initial={"budget_cost": budgets.budget_cost_of(self.organization)}),
                "budget_cost": budgets.budget_cost_of(self.organization),
            },
            live_topics=[live.topic("billing")],  # budget alerts, as they are raised
        )


class BudgetCostAction(OrganizationPage):
    """Choose which cost budgets count (computed or reported): an organization setting."""

    permissions = {"POST": Need("org:write", "choose which cost budgets count")}

    def post(self, request, org_slug):
        form = BudgetCostForm(request.POST)
        if not form.is_valid():
            return JsonResponse({"error": "budget_cost must be computed or reported."}, status=400)
        budgets.budget_cost_set(
            organization=self.organization, budget_cost=form.cleaned_data["budget_cost"], actor=request.user, ip=self.ip
        )
        return redirect(reverse("billing:index", args=[org_slug]) + "#budgets")


class BudgetCreateAction(OrganizationPage):
    permissions = {"POST": Need("budget:write", "create budgets")}

    def post(self, request, org_slug):
        form = BudgetForm(request.POST, organization=self.organization)
        if form.is_valid():
            try:
                budgets.budget_create(
                    organization=self.organization, actor=request.user, ip=self.ip, **form.service_fields()
                )
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                return redirect(reverse("billing:index", args=[org_slug]) + "#budgets")
        return self.render_page("billing/budget_form.html", {"form": form, "budget": None}, status=400)


class BudgetEditPage(OrganizationPage):
    permissions = {"GET": Need("budget:write", "edit budgets"), "POST": Need("budget:write", "edit budgets")}

    def budget(self, budget_id: int) -> Budget:
        budget = Budget.objects.filter(organization=self.organization, pk=budget_id).first()
        if budget is None:
            raise Http404("No such budget.")
        return budget

    def get(self, request, org_slug, budget_id):
        budget = self.budget(budget_id)
        form = BudgetForm(initial=BudgetForm.initial_for(budget), organization=self.organization)
        return self.render_page("billing/budget_form.html", {"form": form, "budget": budget})

    def post(self, request, org_slug, budget_id):
        budget = self.budget(budget_id)
        form = BudgetForm(request.POST, organization=self.organization)
        if form.is_valid():
            fields = form.service_fields()
            if not fields["webhook_url"]:
                # The stored webhook is encrypted and never shown: blank keeps it.
                fields.pop("webhook_url")
            try:
                budgets.budget_update(budget=budget, actor=request.user, ip=self.ip, **fields)
            except ServiceError as exc:
                form.add_error(None, exc.message)
            else:
                return redirect(reverse("billing:index", args=[org_slug]) + "#budgets")
        return self.render_page("billing/budget_form.html", {"form": form, "budget": budget}, status=400)


class BudgetDeleteAction(BudgetEditPage):
    permissions = {"POST": Need("budget:write", "delete budgets")}

    def post(self, request, org_slug, budget_id):
        budgets.budget_delete(budget=self.budget(budget_id), actor=request.user, ip=self.ip)
        return redirect(reverse("billing:index", args=[org_slug]) + "#budgets")


def money_total(rows, key: str = "cost") -> Decimal:
    return sum((row[key] for row in rows), Decimal(0))


index = BillingIndexPage.as_view()
