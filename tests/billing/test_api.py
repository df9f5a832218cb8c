"""The billing API: spend grouped by day, model, project, agent, API key and category
over a date range (JSON and CSV), budget status, and budgets created, changed and
deleted by the billing page's roles; a project key with ``read`` reads its project's
spend and budget status (a CI pipeline failing a build on cost)."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal

import pytest

from agentops.scoping import organization_scope
from billing.budgets import budget_create
from billing.models import Budget
from tests.agentops.factories import ProjectFactory
from tests.billing.factories import ledger_row, today
from tests.isolation import TenantIsolationChecks

ORG = "/api/v1/organizations/{org}/billing"
PROJECT = "/api/v1/projects/{org}/{project}/billing"


@pytest.fixture
def spend(tenant, other_tenant):
    """acme: LLM spend in two projects on two days, a tool and a judge call; globex: spend of its own."""
    search = ProjectFactory(organization=tenant.organization, name="Search", slug="search")
    ledger_row(tenant.project, day=today(), model="mistral-large-2512", cost="1.50", steps=3, unit="token")
    ledger_row(tenant.project, day=today() - timedelta(days=2), model="mistral-small-2603", cost="0.25", steps=1)
    ledger_row(tenant.project, day=today(), model="tts", cost="0.015", category="tool", unit="character", steps=1)
    ledger_row(
        search, day=today(), model="mistral-small-latest", cost="0.40", category="evaluation", agent_name="llm-judge"
    )
    ledger_row(other_tenant.project, day=today(), model="mistral-large-2512", cost="99", steps=1)
    return search


def test_spend_by_category_and_project_over_a_range(tenant, client_for, spend):
    response = client_for(tenant.owner).get(
        ORG.format(org="acme") + f"/spend/?group_by=category,project&start={today() - timedelta(days=6)}&end={today()}"
    )
    assert response.status_code == 200, response.content
    body = response.json()
    rows = {(row["category"], row["project"]): Decimal(row["cost"]) for row in body["rows"]}
    assert rows == {
        ("llm", "agent"): Decimal("1.75"),
        ("tool", "agent"): Decimal("0.015"),
        ("evaluation", "search"): Decimal("0.40"),
    }
    assert Decimal(body["totals"]["cost"]) == Decimal("2.165"), "the other organization's 99 is not in it"
    assert body["categories"] == ["llm", "tool", "gpu", "evaluation"]


def test_spend_by_day_of_one_category_and_a_range_that_leaves_days_out(tenant, client_for, spend):
    client = client_for(tenant.admin)
    response = client.get(ORG.format(org="acme") + "/spend/?group_by=day&category=llm")
    assert [(row["day"], row["cost"]) for row in response.json()["rows"]] == [
        ((today() - timedelta(days=2)).isoformat(), "0.250000000"),
        (today().isoformat(), "1.500000000"),
    ]
    only_today = client.get(ORG.format(org="acme") + f"/spend/?group_by=model&start={today()}&end={today()}")
    assert "mistral-small-2603" not in {row["model"] for row in only_today.json()["rows"]}


def test_spend_as_csv_through_the_one_csv_writer(tenant, client_for, spend):
    response = client_for(tenant.owner).get(ORG.format(org="acme") + "/spend/?group_by=model,category&format=csv")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.DictReader(io.StringIO(response.content.decode())))
    assert rows[0] == {
        "model": "mistral-large-2512",
        "category": "llm",
        "cost_usd": "1.500000000",
        "input_tokens": "0",
        "cached_input_tokens": "0",
        "output_tokens": "0",
        "steps": "3",
        "unpriced_steps": "0",
        "reported_cost_usd": "0.000000000",
        "reported_steps_computed_cost_usd": "0.000000000",
    }
    assert {row["model"] for row in rows} == {"mistral-large-2512", "mistral-small-2603", "tts", "mistral-small-latest"}


def test_spend_carries_the_reported_cost_beside_the_computed_cost_of_the_same_steps(tenant, client_for):
    ledger_row(
        tenant.project,
        day=today(),
        model="gpt-4o",
        cost="2.00",
        steps=2,
        unit="token",
        reported_cost=Decimal("1.50"),
        reported_computed_cost=Decimal("1.00"),
    )
    client = client_for(tenant.owner)
    body = client.get(ORG.format(org="acme") + "/spend/?group_by=model").json()
    (row,) = body["rows"]
    # Decimal strings like the cost, never floats.
    assert (row["cost"], row["reported_cost"], row["reported_computed_cost"]) == (
        "2.000000000",
        "1.500000000",
        "1.000000000",
    )
    assert (body["totals"]["reported_cost"], body["totals"]["reported_computed_cost"]) == ("1.500000000", "1.000000000")
    exported = client.get(ORG.format(org="acme") + "/spend/?group_by=model&format=csv").content.decode()
    (line,) = csv.DictReader(io.StringIO(exported))
    assert (line["reported_cost_usd"], line["reported_steps_computed_cost_usd"]) == ("1.500000000", "1.000000000")


@pytest.mark.parametrize(
    ("query", "message"),
    [
        ("group_by=colour", "unknown group_by 'colour'"),
        ("category=snacks", "unknown category 'snacks'"),
        ("start=2026-11-10&end=2026-11-01", "the range ends (2026-11-01) before it starts (2026-11-10)"),
        ("start=yesterday", "start"),
        ("format=xml", "format"),
        ("project=nope", "no project 'nope'"),
    ],
)
def test_bad_spend_queries_are_a_400_naming_the_problem(tenant, client_for, query, message):
    response = client_for(tenant.owner).get(ORG.format(org="acme") + f"/spend/?{query}")
    assert response.status_code == 400, response.content
    assert message in str(response.json())


def test_spend_ending_in_the_calendars_first_month_starts_on_its_first_day(tenant, client_for):
    response = client_for(tenant.owner).get(ORG.format(org="acme") + "/spend/?end=0001-01-05")
    assert response.status_code == 200, response.content
    assert (response.json()["start"], response.json()["end"]) == ("0001-01-01", "0001-01-05")


@pytest.mark.parametrize("role", ["member", "viewer"])
def test_members_and_viewers_cannot_read_spend_or_change_budgets(tenant, client_for, spend, role):
    client = client_for(getattr(tenant, role))
    assert client.get(ORG.format(org="acme") + "/spend/").status_code == 403
    assert client.get(PROJECT.format(org="acme", project="agent") + "/spend/").status_code == 403
    created = client.post(ORG.format(org="acme") + "/budgets/", {"name": "x", "amount": "5"}, format="json")
    assert created.status_code == 403
    with organization_scope(tenant.organization):
        assert not Budget.objects.exists()


def test_a_read_key_reads_its_projects_spend_and_budget_status_for_ci(tenant, key_client, spend):
    with organization_scope(tenant.organization):
        budget_create(organization=tenant.organization, actor=None, name="org", amount="1", hard_limit=True)
        budget_create(
            organization=tenant.organization, actor=None, name="search", amount="100", scope="project", project=spend
        )
    client = key_client(tenant.project, scopes=("read",))
    spent = client.get(PROJECT.format(org="acme", project="agent") + "/spend/?group_by=category")
    assert spent.status_code == 200, spent.content
    assert {row["category"]: row["cost"] for row in spent.json()["rows"]} == {
        "llm": "1.750000000",
        "tool": "0.015000000",
    }, "only its own project's spend"
    status = client.get(PROJECT.format(org="acme", project="agent") + "/budgets/").json()
    assert [(item["name"], item["reached"], item["blocking"]) for item in status["budgets"]] == [("org", True, True)]
    assert status["blocking"] is True
    # Its key cannot read another project, the organization's spend, nor change budgets.
    assert client.get(PROJECT.format(org="acme", project="search") + "/spend/").status_code == 404
    assert client.get(ORG.format(org="acme") + "/spend/").status_code == 403
    assert client.post(ORG.format(org="acme") + "/budgets/", {"name": "x", "amount": "5"}).status_code == 403


def test_a_key_without_read_cannot_read_spend(tenant, key_client, spend):
    client = key_client(tenant.project, scopes=("ingest",))
    assert client.get(PROJECT.format(org="acme", project="agent") + "/spend/").status_code == 403


def test_budgets_are_created_changed_and_deleted_over_the_api(tenant, client_for, spend):
    client = client_for(tenant.admin)
    url = ORG.format(org="acme") + "/budgets/"
    created = client.post(
        url,
        {"name": "Search", "amount": "2.00", "project": "search", "thresholds": [50, 100], "notify_emails": ["a@x.io"]},
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert (body["scope"], body["project"], body["thresholds"]) == ("project", "search", [50, 100])
    assert body["status"]["spend"] == "0.400000000" and body["status"]["percent"] == "20.00"
    detail = f"{url}{body['id']}/"
    changed = client.patch(detail, {"amount": "0.40", "hard_limit": True}, format="json")
    assert changed.status_code == 200, changed.content
    assert changed.json()["status"]["blocking"] is True
    assert [item["name"] for item in client.get(url).json()["results"]] == ["Search"]
    assert client.delete(detail).status_code == 204
    with organization_scope(tenant.organization):
        assert not Budget.objects.exists()


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"name": "x", "amount": "-5"}, "the amount must be more than 0"),
        ({"name": "x", "amount": "0"}, "the amount must be more than 0"),
        ({"name": "x", "amount": "ten"}, "amount"),
        ({"name": "x", "amount": "5", "scope": "galaxy"}, "scope"),
        ({"name": "x", "amount": "5", "thresholds": [0]}, "thresholds are whole percentages"),
        ({"name": "x", "amount": "5", "scope": "project"}, "a project budget needs a project"),
        ({"name": "x", "amount": "5", "project": "globex-only"}, "no project 'globex-only'"),
        ({"name": "x", "amount": "5", "colour": "red"}, "unknown field 'colour'"),
    ],
)
def test_a_bad_budget_is_a_400_naming_the_problem_and_writes_nothing(tenant, client_for, body, message):
    response = client_for(tenant.owner).post(ORG.format(org="acme") + "/budgets/", body, format="json")
    assert response.status_code == 400, response.content
    assert message in str(response.json())
    with organization_scope(tenant.organization):
        assert not Budget.objects.exists()


def test_a_negative_amount_on_change_is_refused_and_the_budget_stays(tenant, client_for):
    with organization_scope(tenant.organization):
        budget = budget_create(organization=tenant.organization, actor=None, name="org", amount="10")
    response = client_for(tenant.owner).patch(
        ORG.format(org="acme") + f"/budgets/{budget.pk}/", {"amount": "-1"}, format="json"
    )
    assert response.status_code == 400 and "the amount must be more than 0" in str(response.json())
    with organization_scope(tenant.organization):
        assert Budget.objects.get().amount == Decimal("10")


def test_creating_a_budget_twice_with_one_idempotency_key_creates_one(tenant, client_for):
    client = client_for(tenant.owner)
    url = ORG.format(org="acme") + "/budgets/"
    first = client.post(url, {"name": "org", "amount": "10"}, format="json", HTTP_IDEMPOTENCY_KEY="ci-42")
    again = client.post(url, {"name": "org", "amount": "10"}, format="json", HTTP_IDEMPOTENCY_KEY="ci-42")
    assert first.status_code == again.status_code == 201
    assert again["Idempotent-Replayed"] == "true" and again.json()["id"] == first.json()["id"]
    with organization_scope(tenant.organization):
        assert Budget.objects.count() == 1


def test_alerts_raised_are_listed(tenant, client_for, spend):
    from billing.alerts import evaluate_alerts

    with organization_scope(tenant.organization):
        budget_create(organization=tenant.organization, actor=None, name="org", amount="2", thresholds=[50])
    evaluate_alerts(tenant.organization.pk)
    alerts = client_for(tenant.owner).get(ORG.format(org="acme") + "/alerts/").json()["results"]
    assert [(alert["kind"], alert["threshold"]) for alert in alerts] == [("threshold", 50)]


class TestBudgetIsolation(TenantIsolationChecks):
    create_body = {"name": "limit", "amount": "10"}
    update_body = {"amount": "20"}

    def make_object(self, tenant):
        with organization_scope(tenant.organization):
            return budget_create(organization=tenant.organization, actor=None, name="limit", amount="10")

    def detail_url(self, url_tenant, obj):
        return ORG.format(org=url_tenant.organization.slug) + f"/budgets/{obj.pk}/"

    def list_url(self, tenant):
        return ORG.format(org=tenant.organization.slug) + "/budgets/"

    def created_organization_id(self, response):
        return Budget.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id


def test_another_organizations_spend_and_budget_status_are_not_found(tenant, other_tenant, client_for, key_client):
    assert client_for(tenant.owner).get(ORG.format(org="globex") + "/spend/").status_code == 404
    client = key_client(tenant.project, scopes=("read",))
    assert client.get(PROJECT.format(org="globex", project="agent") + "/budgets/").status_code == 404


def test_spend_by_api_key_and_agent(tenant, client_for, make_api_key):
    key, _raw = make_api_key(tenant.project, ("ingest",))
    ledger_row(tenant.project, day=today(), model="m", cost="2", api_key=key, agent_name="support")
    ledger_row(tenant.project, day=today(), model="m", cost="1", agent_name="triage")
    rows = client_for(tenant.owner).get(ORG.format(org="acme") + "/spend/?group_by=api_key,agent").json()["rows"]
    assert [(row["api_key"], row["api_key_name"], row["agent"], row["cost"]) for row in rows] == [
        (key.prefix, key.name, "support", "2.000000000"),
        ("", "", "triage", "1.000000000"),
    ]
