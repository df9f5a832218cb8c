"""The organization's billing page: spend from the ledger, the most expensive runs,
budgets and alerts; owners and admins only."""

from __future__ import annotations

import csv
import io
import json
from datetime import timedelta
from decimal import Decimal

import pytest

from agentops.csvexport import original_text
from billing.models import Budget, BudgetAlert
from tests.agentops.factories import ProjectFactory
from tests.billing.factories import build_ledger, days_ago, ledger_row, make_run, make_step, today

URL = "/o/acme/billing/"


@pytest.fixture
def spend(tenant):
    """Two projects, two models, spend on two days; one unpriced step."""
    second = ProjectFactory(organization=tenant.organization, name="Search", slug="search")
    ledger_row(
        tenant.project,
        day=today(),
        model="mistral-large-2512",
        cost="1.50",
        input_tokens=1000,
        output_tokens=200,
        steps=3,
    )
    ledger_row(
        tenant.project,
        day=today() - timedelta(days=3),
        model="mistral-small-2603",
        cost="0.25",
        steps=2,
        unpriced_steps=1,
    )
    ledger_row(second, day=today(), model="mistral-large-2512", cost="2.00", agent_name="searcher", steps=1)
    # Outside the last 30 days, inside 90.
    ledger_row(second, day=today() - timedelta(days=60), model="mistral-large-2512", cost="10.00", steps=1)
    return second


@pytest.mark.parametrize("role", ["owner", "admin"])
def test_owner_and_admin_see_billing(role, tenant, spend, client):
    client.force_login(tenant.user(role))
    response = client.get(URL)
    assert response.status_code == 200
    context = response.context
    assert context["totals"]["cost"] == Decimal("3.75")
    assert context["totals"]["unpriced_steps"] == 1
    body = response.content.decode()
    assert "$3.75" in body and "1 unpriced step" in body


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_member_and_viewer_cannot_see_billing(role, tenant, spend, client):
    client.force_login(tenant.user(role))
    assert client.get(URL).status_code == 403
    assert client.get(URL + "?format=csv").status_code == 403


def test_another_organization_is_not_found(tenant, other_tenant, client):
    client.force_login(other_tenant.owner)
    assert client.get(URL).status_code == 404


def test_billing_shows_only_its_organization(tenant, other_tenant, spend, client):
    ledger_row(other_tenant.project, day=today(), model="mistral-large-2512", cost="99.00")
    client.force_login(tenant.owner)
    assert client.get(URL).context["totals"]["cost"] == Decimal("3.75")


def test_period_selects_the_days(tenant, spend, client):
    client.force_login(tenant.owner)
    assert client.get(URL + "?period=90d").context["totals"]["cost"] == Decimal("13.75")


@pytest.mark.parametrize(
    "dimension, names",
    [
        ("model", {"mistral-large-2512", "mistral-small-2603"}),
        ("project", {"agent", "search"}),
        ("agent", {"support", "searcher"}),
    ],
)
def test_chart_by_model_project_and_agent(dimension, names, tenant, spend, client):
    client.force_login(tenant.owner)
    response = client.get(URL + f"?by={dimension}")
    chart = response.context["chart"]
    assert {series["name"] for series in chart["series"]} == names
    assert len(chart["days"]) == 30
    total = sum(sum(series["cost"]) for series in chart["series"])
    assert total == pytest.approx(3.75)
    assert 'id="billing-data"' in response.content.decode()
    data = json.loads(
        response.content.decode().split('id="billing-data" type="application/json">')[1].split("</script>")[0]
    )
    assert data["days"][-1] == today().isoformat()


def test_spend_table_exports_as_csv(tenant, spend, client):
    client.force_login(tenant.admin)
    response = client.get(URL + "?format=csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert {(row["project"], row["model"], row["cost_usd"]) for row in rows} == {
        ("search", "mistral-large-2512", "2.000000000"),
        ("agent", "mistral-large-2512", "1.500000000"),
        ("agent", "mistral-small-2603", "0.250000000"),
    }


def test_csv_cells_never_start_a_formula(tenant, client):
    ledger_row(tenant.project, day=today(), model="=HYPERLINK(1)", cost="1")
    client.force_login(tenant.owner)
    assert "'=HYPERLINK(1)" in client.get(URL + "?format=csv").content.decode()


@pytest.mark.parametrize("model", ["\t=HYPERLINK(1)", "\r=1+1", " @SUM(A1)", "-2+3"])
def test_csv_is_safe_keeps_empty_cells_empty_and_zero_costs_plain(model, tenant, client):
    ledger_row(tenant.project, day=today(), model=model, agent_name="", cost="0", input_tokens=5)
    client.force_login(tenant.owner)
    response = client.get(URL + "?format=csv")
    (row,) = csv.DictReader(io.StringIO(response.content.decode(), newline=""))
    assert row["model"] == "'" + model and original_text(row["model"]) == model
    assert row["agent"] == "" and row["cost_usd"] == "0.000000000" and row["input_tokens"] == "5"


def test_most_expensive_runs_come_first_and_are_bounded(tenant, other_tenant, client):
    runs = []
    for position in range(12):
        run = make_run(tenant.project, started_at=days_ago(1), name=f"run {position}")
        make_step(run, model="mistral-large-2512", input_tokens=10, output_tokens=10, cost=f"{position + 1}.00")
        runs.append(run)
    old = make_run(tenant.project, started_at=days_ago(45), name="old run")
    make_step(old, model="mistral-large-2512", input_tokens=10, output_tokens=10, cost="500")
    foreign = make_run(other_tenant.project, started_at=days_ago(1), name="foreign run")
    make_step(foreign, model="mistral-large-2512", input_tokens=10, output_tokens=10, cost="900")
    build_ledger(*runs, old, foreign)
    client.force_login(tenant.owner)
    response = client.get(URL)
    top = response.context["top_runs"]
    assert [run.name for run in top] == [f"run {position}" for position in range(11, 1, -1)]
    assert response.context["totals"]["cost"] == Decimal(sum(range(1, 13)))


def test_budgets_show_progress_and_alerts_history(tenant, spend, client):
    budget = Budget.dangerously_unscoped_objects.create(
        organization=tenant.organization, name="Monthly cap", amount=Decimal("10"), thresholds=[50, 100]
    )
    BudgetAlert.dangerously_unscoped_objects.create(
        organization=tenant.organization,
        budget=budget,
        kind=BudgetAlert.Kind.THRESHOLD,
        period_start=today().replace(day=1),
        threshold=50,
        spend=Decimal("5.5"),
        limit=Decimal("10"),
        message="Monthly cap reached 50%",
    )
    client.force_login(tenant.owner)
    response = client.get(URL)
    body = response.content.decode()
    assert "Monthly cap" in body and "Monthly cap reached 50%" in body
    (row,) = response.context["budgets"]
    assert row["budget"] == budget and "percent" in row and row["spend"] >= 0


# --- Budgets: create, edit, delete ----------------------------------------------------------

BUDGET = {
    "name": "Org cap",
    "scope": "organization",
    "period": "monthly",
    "amount": "100",
    "thresholds": "50, 80, 100",
    "notify_emails": "ops@acme.example.com",
}


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_member_and_viewer_cannot_change_budgets(role, tenant, client):
    budget = Budget.dangerously_unscoped_objects.create(
        organization=tenant.organization, name="Cap", amount=Decimal("5")
    )
    client.force_login(tenant.user(role))
    assert client.post(URL + "budgets/", BUDGET).status_code == 403
    assert client.get(URL + f"budgets/{budget.pk}/").status_code == 403
    assert client.post(URL + f"budgets/{budget.pk}/", BUDGET).status_code == 403
    assert client.post(URL + f"budgets/{budget.pk}/delete/").status_code == 403
    budget.refresh_from_db()
    assert budget.name == "Cap" and Budget.dangerously_unscoped_objects.count() == 1


def test_outsider_cannot_reach_budgets(tenant, other_tenant, client):
    budget = Budget.dangerously_unscoped_objects.create(
        organization=tenant.organization, name="Cap", amount=Decimal("5")
    )
    client.force_login(other_tenant.owner)
    assert client.post(URL + "budgets/", BUDGET).status_code == 404
    assert client.post(URL + f"budgets/{budget.pk}/delete/").status_code == 404
    # Their own organization's URL does not reach another's budget either.
    assert client.get(f"/o/globex/billing/budgets/{budget.pk}/").status_code == 404
    assert client.post(f"/o/globex/billing/budgets/{budget.pk}/delete/").status_code == 404
    assert Budget.dangerously_unscoped_objects.filter(pk=budget.pk).exists()


def test_budget_form_refuses_a_project_scope_without_project(tenant, client):
    client.force_login(tenant.owner)
    response = client.post(URL + "budgets/", {**BUDGET, "scope": "project"})
    assert response.status_code == 400
    assert "Pick the project" in response.content.decode()
    assert not Budget.dangerously_unscoped_objects.exists()


@pytest.mark.parametrize("role", ["owner", "admin"])
def test_owner_and_admin_create_edit_and_delete_budgets(role, tenant, client):
    pytest.importorskip("billing.budgets")
    client.force_login(tenant.user(role))
    response = client.post(URL + "budgets/", {**BUDGET, "scope": "project", "project": tenant.project.pk})
    assert response.status_code == 302
    budget = Budget.dangerously_unscoped_objects.get()
    assert budget.project == tenant.project and budget.thresholds == [50, 80, 100]
    assert client.get(URL + f"budgets/{budget.pk}/").status_code == 200
    response = client.post(URL + f"budgets/{budget.pk}/", {**BUDGET, "name": "Renamed", "amount": "250"})
    assert response.status_code == 302
    budget.refresh_from_db()
    assert budget.name == "Renamed" and budget.amount == Decimal("250")
    assert client.get(URL).status_code == 200
    assert client.post(URL + f"budgets/{budget.pk}/delete/").status_code == 302
    assert not Budget.dangerously_unscoped_objects.exists()


def test_billing_is_in_the_sidebar_for_owners_only(tenant, client):
    client.force_login(tenant.owner)
    assert 'href="/o/acme/billing/"' in client.get("/o/acme/").content.decode()
    client.force_login(tenant.member)
    assert 'href="/o/acme/billing/"' not in client.get("/o/acme/").content.decode()


def test_billing_splits_spend_into_categories_with_tools_by_unit_and_shows_energy(tenant, spend, client):
    ledger_row(tenant.project, day=today(), model="tts", cost="0.30", category="tool", unit="character", steps=4)
    ledger_row(tenant.project, day=today(), model="calculator", cost="0", category="tool", unit="", steps=2)
    ledger_row(
        tenant.project, day=today(), model="gpu:a100", cost="5", category="gpu", unit="hour", agent_name="gpu-job"
    )
    ledger_row(
        tenant.project,
        day=today(),
        model="mistral-large-2512",
        cost="0.20",
        category="evaluation",
        agent_name="llm-judge",
    )
    client.force_login(tenant.owner)
    response = client.get(URL + "?by=category")
    categories = {row["category"]: row for row in response.context["categories"]}
    assert {name: row["cost"] for name, row in categories.items()} == {
        "llm": Decimal("3.75"),
        "tool": Decimal("0.30"),
        "gpu": Decimal("5"),
        "evaluation": Decimal("0.20"),
    }
    assert [(unit["unit"], unit["steps"]) for unit in categories["tool"]["units"]] == [
        ("character", 4),
        ("unpriced", 2),
    ]
    assert {series["name"] for series in response.context["chart"]["series"]} == {"llm", "tool", "gpu", "evaluation"}
    body = response.content.decode()
    assert 'id="spend-categories"' in body and "per character" in body
    # Energy: the LLM and judge rows' tokens (none here) and no GPU seconds: 0, drawn per day.
    assert len(response.context["chart"]["carbon"]["energy_wh"]) == 30 and 'id="total-energy"' in body
    rows = list(csv.DictReader(io.StringIO(client.get(URL + "?format=csv").content.decode())))
    assert {(row["model"], row["category"], row["unit"]) for row in rows if row["category"] == "tool"} == {
        ("tts", "tool", "character"),
        ("calculator", "tool", ""),
    }


# --- Reported cost beside computed cost ----------------------------------------------------------


def test_the_page_shows_reported_beside_computed_cost_and_flags_a_difference(tenant, client):
    ledger_row(
        tenant.project,
        day=today(),
        model="gpt-4o",
        cost="2.00",
        steps=2,
        reported_cost=Decimal("1.50"),
        reported_computed_cost=Decimal("1.00"),
    )
    ledger_row(
        tenant.project,
        day=today(),
        model="gpt-4.1",
        cost="1.00",
        steps=1,
        reported_cost=Decimal("1.01"),
        reported_computed_cost=Decimal("1.00"),
    )
    client.force_login(tenant.owner)
    response = client.get(URL)
    rows = {row["model"]: row for row in response.context["table"]}
    assert rows["gpt-4o"]["cost_differs"] and not rows["gpt-4.1"]["cost_differs"], "1 % is within the 5 % tolerance"
    body = response.content.decode()
    assert 'id="total-reported-cost">$2.51' in body and "computed for the same steps: $2.00 · differs" in body
    assert "cost computed by the platform from the price catalog" in body
    exported = list(csv.DictReader(io.StringIO(client.get(URL + "?format=csv").content.decode())))
    by_model = {row["model"]: row for row in exported}
    assert (by_model["gpt-4o"]["reported_cost_usd"], by_model["gpt-4o"]["cost_differs"]) == ("1.500000000", "true")


def test_owners_choose_which_cost_budgets_count_and_others_cannot(tenant, client):
    for role in ("member", "viewer"):
        client.force_login(tenant.user(role))
        assert client.post(URL + "budget-cost/", {"budget_cost": "reported"}).status_code == 403
    client.force_login(tenant.owner)
    bad = client.post(URL + "budget-cost/", {"budget_cost": "whatever"})
    assert bad.status_code == 400 and "computed or reported" in bad.json()["error"]
    assert client.post(URL + "budget-cost/", {"budget_cost": "reported"}).status_code == 302
    assert "cost reported by clients" in client.get(URL).content.decode()
