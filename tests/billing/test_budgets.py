"""Budgets: validation, audit of every change, spend from the ledger, hard limits."""

from datetime import timedelta
from decimal import Decimal

import pytest

from agentops import crypto
from agentops.errors import InvalidRequest, PaymentRequired
from agentops.models import AuditEvent
from agentops.scoping import organization_scope
from billing.budgets import budget_create, budget_delete, budget_spend, budget_update, check_work_allowed, utc_today
from billing.models import Budget, UsageDaily
from runs.execution import run_execute, run_start
from runs.models import Step
from runs.services.agents import agent_create
from runs.services.replay import replay_start
from tests.billing.test_ledger import drain, ingest_and_mark, llm_step


def spend(project, dollars: str, *, day=None, api_key=None, model="m"):
    """Put ``dollars`` of usage in the ledger directly (the ledger's own tests prove it
    adds up from steps)."""
    UsageDaily.dangerously_unscoped_objects.create(
        organization=project.organization,
        project=project,
        day=day or utc_today(),
        model=model,
        api_key=api_key,
        cost=Decimal(dollars),
    )


def org_budget(tenant, **fields):
    fields = {"name": "Monthly cap", "amount": "10", **fields}
    with organization_scope(tenant.organization):
        return budget_create(organization=tenant.organization, actor=tenant.owner, **fields)


def test_budget_changes_are_audited_without_the_webhook_url(tenant):
    budget = org_budget(tenant, webhook_url="https://hooks.example.com/secret-token")
    budget_update(budget=budget, actor=tenant.admin, amount="25.50", thresholds=[90, 50])
    budget_delete(budget=budget, actor=tenant.owner)
    with organization_scope(tenant.organization):
        events = list(AuditEvent.objects.filter(action__startswith="budget.").order_by("id"))
        assert not Budget.objects.exists()
    assert [e.action for e in events] == ["budget.create", "budget.update", "budget.delete"]
    assert events[1].data["changes"]["amount"] == {"from": "10.00", "to": "25.50"}
    assert events[1].data["changes"]["thresholds"] == {"from": [50, 80, 100], "to": [50, 90]}
    assert events[1].actor == tenant.admin
    assert "secret-token" not in str([e.data for e in events])


def test_webhook_url_is_stored_encrypted(tenant):
    budget = org_budget(tenant, webhook_url="https://hooks.example.com/T000/B000")
    assert "hooks.example.com" not in budget.webhook_ciphertext
    assert crypto.decrypt(budget.webhook_ciphertext) == "https://hooks.example.com/T000/B000"


@pytest.mark.parametrize(
    "fields, message",
    [
        ({"amount": "0"}, "more than 0"),
        ({"amount": "-5"}, "more than 0"),
        ({"amount": "abc"}, "number"),
        ({"thresholds": [0]}, "from 1 to 1000"),
        ({"thresholds": [1001]}, "from 1 to 1000"),
        ({"thresholds": ["50"]}, "from 1 to 1000"),
        ({"scope": "project"}, "project of this organization"),
        ({"scope": "api_key"}, "API key of this organization"),
        ({"period": "weekly"}, "period"),
        ({"notify_emails": ["not-an-email"]}, "email"),
        ({"webhook_url": "ftp://hooks.example.com/x"}, "webhook URL"),
        ({"name": ""}, "name"),
    ],
)
def test_invalid_budgets_are_refused(tenant, fields, message):
    with pytest.raises(InvalidRequest, match=message):
        org_budget(tenant, **fields)


def test_webhook_to_a_private_address_is_refused(tenant, settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    with pytest.raises(InvalidRequest, match="private or reserved"):
        org_budget(tenant, webhook_url="http://127.0.0.1:8080/hook")


def test_budget_scope_must_belong_to_the_organization(tenant, other_tenant, make_api_key):
    with pytest.raises(InvalidRequest):
        org_budget(tenant, scope="project", project=other_tenant.project)
    other_key, _ = make_api_key(other_tenant.project)
    with pytest.raises(InvalidRequest):
        org_budget(tenant, scope="api_key", api_key=other_key)
    key, _ = make_api_key(tenant.project)
    budget = org_budget(tenant, scope="api_key", api_key=key, project=tenant.project)
    assert (budget.api_key, budget.project) == (key, None)


def test_spend_counts_the_period_and_scope_only(tenant, make_api_key):
    key, _ = make_api_key(tenant.project)
    today = utc_today()
    spend(tenant.project, "3.25")
    spend(tenant.project, "1.50", api_key=key, model="other")
    spend(tenant.project, "100", day=today.replace(day=1) - timedelta(days=1))  # last month
    monthly = org_budget(tenant)
    daily_key = org_budget(tenant, scope="api_key", api_key=key, period="daily", amount="3")
    assert budget_spend(monthly)["spend"] == Decimal("4.75")
    assert budget_spend(monthly)["percent"] == Decimal("47.5")
    assert budget_spend(monthly)["period_start"] == today.replace(day=1)
    assert budget_spend(daily_key) == {
        "spend": Decimal("1.5"),
        "period_start": today,
        "period_end": today + timedelta(days=1),
        "percent": Decimal("50"),
    }


def test_hard_limit_blocks_work_with_a_clear_402(tenant):
    org_budget(tenant, name="Team cap", amount="5", hard_limit=True)
    spend(tenant.project, "4.99")
    check_work_allowed(project=tenant.project, work="run")  # under the limit
    spend(tenant.project, "0.01", model="other")
    for work, named in (
        ("run", "executed runs"),
        ("replay", "replays"),
        ("experiment", "experiments"),
        ("job", "jobs"),
    ):
        with pytest.raises(PaymentRequired) as caught:
            check_work_allowed(project=tenant.project, work=work)
        error = caught.value
        assert (error.status, error.code) == (402, "budget_exceeded")
        assert "'Team cap'" in error.message and "$5.00" in error.message and named in error.message
        assert "an owner or admin can raise it on the billing page" in error.message
        assert error.details["spend"] == "5.000000000" and error.details["limit"] == "5.00"


def test_soft_budgets_and_other_scopes_do_not_block(tenant, other_tenant, make_api_key):
    key, other_key = make_api_key(tenant.project)[0], make_api_key(tenant.project, name="other")[0]
    org_budget(tenant, amount="1")  # no hard limit
    org_budget(tenant, scope="api_key", api_key=other_key, amount="1", hard_limit=True)
    with organization_scope(other_tenant.organization):
        budget_create(organization=other_tenant.organization, actor=None, name="x", amount="1", hard_limit=True)
    spend(tenant.project, "2", api_key=other_key)
    check_work_allowed(project=tenant.project, api_key=key, work="run")
    with pytest.raises(PaymentRequired):
        check_work_allowed(project=tenant.project, api_key=other_key, work="run")


def test_project_budget_blocks_its_project_only(tenant):
    from tests.agentops.factories import ProjectFactory

    other_project = ProjectFactory(organization=tenant.organization, slug="other")
    org_budget(tenant, scope="project", project=tenant.project, amount="1", hard_limit=True)
    spend(tenant.project, "1")
    check_work_allowed(project=other_project, work="job")
    with pytest.raises(PaymentRequired):
        check_work_allowed(project=tenant.project, work="job")


def test_raising_the_limit_unblocks(tenant):
    budget = org_budget(tenant, amount="1", hard_limit=True)
    spend(tenant.project, "1")
    with pytest.raises(PaymentRequired):
        check_work_allowed(project=tenant.project, work="run")
    budget_update(budget=budget, actor=tenant.owner, amount="2")
    check_work_allowed(project=tenant.project, work="run")


def test_ingestion_continues_past_a_hard_limit(tenant):
    org_budget(tenant, amount="0.01", hard_limit=True)
    ingest_and_mark(tenant.project, steps=[llm_step("t1", "a", _now(), tokens=1_000_000)])
    drain()
    with pytest.raises(PaymentRequired):
        check_work_allowed(project=tenant.project, work="run")
    # Still stored, and still counted.
    ingest_and_mark(tenant.project, steps=[llm_step("t2", "b", _now(), tokens=1_000_000)])
    drain()
    with organization_scope(tenant.organization):
        assert Step.objects.count() == 2
        assert budget_spend(Budget.objects.get())["spend"] == sum(s.cost for s in Step.objects.all())


def _now():
    from django.utils import timezone

    return timezone.now()


def test_hard_limit_blocks_executed_runs(tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project, actor=tenant.member, name="calc", model="offline", tools=["calculator"]
        )
    org_budget(tenant, amount="1", hard_limit=True)
    spend(tenant.project, "1")
    with organization_scope(tenant.organization), pytest.raises(PaymentRequired):
        run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6 * 7?")


def test_hard_limit_blocks_replays(tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project, actor=tenant.member, name="calc", model="offline", tools=["calculator"]
        )
    with organization_scope(tenant.organization):
        source = run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6 * 7?")
        run_execute(run_id=source.pk)
        source.refresh_from_db()
    org_budget(tenant, amount="1", hard_limit=True)
    spend(tenant.project, "1")
    with organization_scope(tenant.organization), pytest.raises(PaymentRequired):
        replay_start(source=source, actor=tenant.member)


def test_api_answers_402_naming_the_budget_while_ingestion_goes_on(tenant, key_client):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="calc", model="offline")
    org_budget(tenant, amount="1", hard_limit=True)
    spend(tenant.project, "1")
    client = key_client(tenant.project)
    started = client.post(
        f"/api/v1/projects/acme/{tenant.project.slug}/runs/", {"agent": agent.pk, "input": "2+2"}, format="json"
    )
    assert started.status_code == 402, started.content
    error = started.json()["error"]
    assert error["code"] == "budget_exceeded" and "billing page" in error["message"]
    sent = client.post(
        "/api/v1/ingest",
        {"events": [{"type": "run", "id": "still-ingested", "status": "succeeded"}]},
        format="json",
    )
    assert sent.status_code == 207 and sent.json()["results"][0]["status"] == 201
