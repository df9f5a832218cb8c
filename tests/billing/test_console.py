"""The cost-audit console in the Django admin: staff only; spend drills down from
organizations to the steps behind a number; CSV of every table; recompute and
reconciliation pages."""

from __future__ import annotations

import csv
import io
from datetime import timedelta
from decimal import Decimal
from urllib.parse import quote

import pytest
from django.core.files.uploadedfile import SimpleUploadedFile

from agentops.csvexport import original_text
from billing.models import ComputeUsage, CostRevision, Price, StepCostChange
from billing.reconcile import ReconcileError, parse_usage_csv
from tests.agentops.factories import UserFactory
from tests.billing.factories import build_ledger, days_ago, ledger_row, make_run, make_step, today

CONSOLE = "/admin/billing/usagedaily/"
PAGES = ["spend/", "runs/?project=1&day=2025-01-01&model=x", "runs/1/", "recompute/", "reconcile/", ""]


@pytest.fixture
def staff(db):
    return UserFactory(is_staff=True, is_superuser=True)


@pytest.fixture
def usage(tenant, other_tenant):
    run = make_run(tenant.project, started_at=days_ago(1), name="expensive run")
    make_step(run, model="mistral-large-2512", input_tokens=1000, output_tokens=100, cost="1.25")
    make_step(run, model="mistral-large-2512", input_tokens=500, output_tokens=50, cost="0.75")
    other = make_run(other_tenant.project, started_at=days_ago(1), name="globex run")
    make_step(other, model="mistral-small-2603", input_tokens=10, output_tokens=1, cost="3")
    build_ledger(run, other)
    return run


@pytest.mark.parametrize("page", PAGES)
@pytest.mark.parametrize("role", ["owner", "admin", "member", "viewer"])
def test_members_of_any_role_cannot_reach_the_console(page, role, tenant, client):
    client.force_login(tenant.user(role))
    response = client.get(CONSOLE + page)
    assert response.status_code == 302 and "/admin/login/" in response["Location"]
    response = client.post(CONSOLE + "recompute/", {"action": "apply"})
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_signed_out_visitors_go_to_login(client, db):
    response = client.get(CONSOLE + "spend/")
    assert response.status_code == 302 and "/admin/login/" in response["Location"]


def test_staff_without_billing_permissions_is_refused(tenant, client):
    client.force_login(UserFactory(is_staff=True))
    assert client.get(CONSOLE + "spend/").status_code == 403
    assert client.get(CONSOLE + "recompute/").status_code == 403


def test_spend_drills_down_from_organizations_to_steps(staff, tenant, other_tenant, usage, client):
    client.force_login(staff)
    assert client.get(CONSOLE).status_code == 302
    response = client.get(CONSOLE + "spend/")
    assert response.status_code == 200
    rows = {row["organization__slug"]: row for row in response.context["rows"]}
    assert rows["acme"]["cost"] == Decimal("2") and rows["globex"]["cost"] == Decimal("3")
    # organization -> projects -> models -> days -> runs -> steps, following the links.
    link = rows["acme"]["link"]
    for level in ("project", "model", "day"):
        response = client.get(link)
        assert response.status_code == 200 and response.context["level"] == level
        (row,) = response.context["rows"]
        assert row["cost"] == Decimal("2") and row["organization__slug"] == "acme"
        link = row["link"]
    response = client.get(link)
    assert response.status_code == 200
    (run_row,) = response.context["rows"]
    assert run_row["run_id"] == usage.pk and run_row["cost"] == Decimal("2") and run_row["steps"] == 2
    response = client.get(CONSOLE + f"runs/{usage.pk}/")
    assert response.status_code == 200 and len(response.context["steps"]) == 2
    assert "expensive run" in response.content.decode()


def test_search_by_run_id(staff, usage, client):
    client.force_login(staff)
    response = client.get(CONSOLE + f"runs/?run={usage.pk}")
    assert response.status_code == 302 and response["Location"].endswith(f"/runs/{usage.pk}/")
    assert client.get(CONSOLE + "runs/999999999/").status_code == 404


@pytest.mark.parametrize("query", ["run=", "run=abc", "run=0"])
def test_a_search_without_a_run_id_says_what_is_missing(staff, usage, client, query):
    client.force_login(staff)

    response = client.get(CONSOLE + f"runs/?{query}")

    html = response.content.decode()
    assert response.status_code == 400
    assert 'id="run-search-errors"' in html and "Name a project and a day" not in html
    expected = {
        "run=": "Enter a run id to find a run.",
        "run=abc": "A run id is a whole number, such as 1042.",
        "run=0": "A run id is a whole number from 1.",
    }[query]
    assert expected in html


def test_drill_down_breadcrumbs_name_the_organization_and_project(staff, tenant, usage, client):
    client.force_login(staff)
    organization, project = tenant.organization, tenant.project
    query = f"level=day&organization={organization.pk}&project={project.pk}&model=mistral-large-2512"

    response = client.get(CONSOLE + f"spend/?{query}")

    labels = [label for label, _url in response.context["breadcrumbs"]]
    assert labels == [
        "All organizations",
        f"{organization.name} ({organization.slug})",
        f"{project.name} ({project.slug})",
        "model mistral-large-2512",
    ]
    assert f"organization {organization.pk}" not in response.content.decode()


def test_the_admin_sidebar_names_the_ledger_in_plain_english(staff, client):
    client.force_login(staff)

    html = client.get("/admin/").content.decode()

    assert "Daily usage" in html and "Usage dailys" not in html


@pytest.mark.parametrize(
    "query, header",
    [
        ("spend/?level=organization&format=csv", "organization__slug"),
        ("spend/?level=day&format=csv", "day"),
        ("runs/?project={project}&model=mistral-large-2512&day={day}&format=csv", "run_id"),
        ("runs/{run}/?format=csv", "cached_input_tokens"),
    ],
)
def test_every_table_exports_as_csv(query, header, staff, tenant, usage, client):
    client.force_login(staff)
    url = CONSOLE + query.format(project=tenant.project.pk, day=days_ago(1).date().isoformat(), run=usage.pk)
    response = client.get(url)
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert header in rows[0] and len(rows) >= 2


HOSTILE = "\t=HYPERLINK(1)"


@pytest.mark.parametrize(
    "query, column",
    [
        ("spend/?level=model&format=csv", "model"),
        ("runs/?project={project}&model={model}&day={day}&format=csv", "name"),
        ("runs/{run}/?format=csv", "name"),
        ("runs/?project={project}&model=gpu:a100&day={day}&format=csv", "backend"),
    ],
)
def test_every_table_exports_safe_csv_that_reads_back(query, column, staff, tenant, client):
    run = make_run(tenant.project, started_at=days_ago(1), name=HOSTILE)
    make_step(run, model=HOSTILE, input_tokens=0, output_tokens=0, cost="0", name=HOSTILE, cached_input_tokens=0)
    build_ledger(run)
    ComputeUsage.dangerously_unscoped_objects.create(
        organization=tenant.organization,
        project=tenant.project,
        job_id=7,
        day=days_ago(1).date(),
        hardware="a100",
        backend=HOSTILE,
        seconds=Decimal(0),
    )
    client.force_login(staff)
    url = CONSOLE + query.format(
        project=tenant.project.pk, model=quote(HOSTILE), day=days_ago(1).date().isoformat(), run=run.pk
    )
    response = client.get(url)
    assert response.status_code == 200
    (row,) = csv.DictReader(io.StringIO(response.content.decode(), newline=""))
    assert row[column] == "'" + HOSTILE and original_text(row[column]) == HOSTILE
    assert row["cost"] == "0.000000000"
    assert "'" not in {value for value in row.values()}, "an empty cell stays empty"


def test_spend_filters_by_days(staff, tenant, client):
    ledger_row(tenant.project, day=today() - timedelta(days=100), model="m", cost="7")
    client.force_login(staff)
    assert client.get(CONSOLE + "spend/").context["rows"] == []
    start = (today() - timedelta(days=120)).isoformat()
    (row,) = client.get(CONSOLE + f"spend/?start={start}").context["rows"]
    assert row["cost"] == Decimal("7")


def test_spend_ending_in_the_calendars_first_month_is_a_page(staff, tenant, client):
    client.force_login(staff)
    assert client.get(CONSOLE + "spend/?end=0001-01-05").status_code == 200


def test_recompute_page_previews_then_applies(staff, tenant, usage, client):
    price = Price.objects.create(
        pattern="mistral-large-2512",
        input_per_million=Decimal("1000"),
        output_per_million=Decimal("0"),
        status=Price.Status.DRAFT,
    )
    form = {"price": price.pk, "start": (today() - timedelta(days=3)).isoformat(), "end": today().isoformat()}
    client.force_login(staff)
    response = client.post(CONSOLE + "recompute/", {**form, "action": "preview"})
    assert response.status_code == 200
    (row,) = response.context["preview"]
    assert row["steps"] == 2 and row["old_total"] == Decimal("2") and row["new_total"] == Decimal("1.5")
    assert not CostRevision.objects.exists()
    response = client.post(CONSOLE + "recompute/", {**form, "action": "apply"})
    revision = CostRevision.objects.get()
    assert response.status_code == 302 and response["Location"].endswith(f"/costrevision/{revision.pk}/change/")
    assert revision.created_by == staff and StepCostChange.objects.filter(revision=revision).count() == 2
    assert client.get(response["Location"]).status_code == 200


def test_recompute_apply_needs_csrf(staff, tenant, client):
    from django.test import Client

    price = Price.objects.create(pattern="x", input_per_million=1, output_per_million=1, status=Price.Status.DRAFT)
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(staff)
    response = strict.post(
        CONSOLE + "recompute/", {"price": price.pk, "start": "2025-01-01", "end": "2025-01-02", "action": "apply"}
    )
    assert response.status_code == 403 and not CostRevision.objects.exists()


def test_staff_who_may_only_view_cannot_apply(tenant, usage, client):
    from django.contrib.auth.models import Permission

    viewer = UserFactory(is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_usagedaily"))
    price = Price.objects.create(
        pattern="mistral-large-2512", input_per_million=1, output_per_million=1, status="draft"
    )
    client.force_login(viewer)
    form = {"price": price.pk, "start": today().isoformat(), "end": today().isoformat()}
    assert client.post(CONSOLE + "recompute/", {**form, "action": "preview"}).status_code == 200
    assert client.post(CONSOLE + "recompute/", {**form, "action": "apply"}).status_code == 403
    assert not CostRevision.objects.exists()


# --- Reconciliation -------------------------------------------------------------------------


def test_reconciliation_lists_the_differences(staff, tenant, usage, client):
    day = days_ago(1).date().isoformat()
    content = (
        "Date,Model,Prompt_Tokens,Completion_Tokens,extra\n"
        f"{day},MISTRAL-LARGE-2512,1000,150,x\n"
        f"{day},mistral-large-2512,500,10,x\n"
        f"{day},codestral-2508,42,0,x\n"
    ).encode()
    client.force_login(staff)
    response = client.post(
        CONSOLE + "reconcile/",
        {"organization": "acme", "file": SimpleUploadedFile("usage.csv", content, content_type="text/csv")},
    )
    assert response.status_code == 200
    result = response.context["result"]
    differences = {row["model"]: row for row in result["differences"]}
    assert set(differences) == {"mistral-large-2512", "codestral-2508"}
    large = differences["mistral-large-2512"]
    # Input agrees (1,500 both sides, rows added up, case ignored); output differs by 10.
    assert (large["platform_input_tokens"], large["provider_input_tokens"], large["input_difference"]) == (
        1500,
        1500,
        0,
    )
    assert (large["platform_output_tokens"], large["provider_output_tokens"], large["output_difference"]) == (
        150,
        160,
        -10,
    )
    assert large["only_in"] == ""
    assert differences["codestral-2508"]["only_in"] == "provider"


def test_reconciliation_reports_bad_rows_by_line(staff, tenant, client):
    content = b"date,model,input_tokens,output_tokens\n2025-01-01,m,10,5\nyesterday,m,ten,5\n2025-01-02,,1,1\n"
    client.force_login(staff)
    response = client.post(
        CONSOLE + "reconcile/", {"organization": "acme", "file": SimpleUploadedFile("u.csv", content)}
    )
    assert response.status_code == 200 and response.context["result"] is None
    errors = response.context["errors"]
    assert errors[0].startswith("Line 3:") and "yesterday" in errors[0] and "ten" in errors[0]
    assert errors[1].startswith("Line 4:") and "model is empty" in errors[1]


def test_reconcile_parser_names_missing_columns_and_sums_rows():
    with pytest.raises(ReconcileError, match="no output_tokens column"):
        parse_usage_csv(b"date,model,input_tokens\n2025-01-01,m,1\n")
    rows = parse_usage_csv('day,model_id,input,output\n2025-01-01T10:00:00Z,M,1,2\n2025-01-01,m,"1,000",3\n')
    (row,) = rows
    assert (row.model, row.input_tokens, row.output_tokens) == ("m", 1001, 5)


def test_a_run_shows_usage_parts_and_reported_beside_computed_cost(staff, tenant, client):
    run = make_run(tenant.project, started_at=days_ago(1), name="reported")
    step = make_step(
        run,
        model="claude-sonnet-4-5",
        input_tokens=10_000,
        cached_input_tokens=6_000,
        cache_write_input_tokens=2_000,
        output_tokens=3_000,
        reasoning_output_tokens=1_000,
        cost="0.0603",
        reported_cost=Decimal("0.09"),
        reported_cost_source="provider",
    )
    build_ledger(run)
    client.force_login(staff)
    body = client.get(CONSOLE + f"runs/{run.pk}/").content.decode()
    assert "Reported by the client: <strong>$0.09</strong>" in body and "differs" in body
    rows = list(csv.DictReader(io.StringIO(client.get(CONSOLE + f"runs/{run.pk}/?format=csv").content.decode())))
    (row,) = rows
    assert row["id"] == str(step.pk)
    assert (row["cache_write_input_tokens"], row["reasoning_output_tokens"]) == ("2000", "1000")
    assert (row["reported_cost"], row["reported_cost_differs"]) == ("0.090000000", "true")
    spend = list(csv.DictReader(io.StringIO(client.get(CONSOLE + "spend/?level=model&format=csv").content.decode())))
    (model_row,) = [row for row in spend if row["model"] == "claude-sonnet-4-5"]
    assert (model_row["reported_cost"], model_row["reported_computed_cost"], model_row["cost_differs"]) == (
        "0.090000000",
        "0.060300000",
        "true",
    )
