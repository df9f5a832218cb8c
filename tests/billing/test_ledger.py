"""The usage ledger: exact totals whatever the order or repetition of ingestion."""

import threading
from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection, connections, transaction
from django.db.models import Count, Sum

from agentops.scoping import dangerously_unscoped, organization_scope
from billing.budgets import budget_cost_set, budget_spend
from billing.ledger import ledger_mark, ledger_rebuild, ledger_refresh
from billing.models import Budget, LedgerBacklog, RunUsage, UsageDaily
from billing.tasks import refresh_ledger
from runs.events import RunEvent, StepEvent
from runs.ingest import ingest
from runs.models import Run, Step
from tests.billing.factories import build_ledger, days_ago, make_run, make_step

DAY1 = datetime(2026, 11, 19, 23, 59, 0, tzinfo=UTC)
DAY2 = datetime(2026, 11, 20, 0, 0, 30, tzinfo=UTC)
MODELS = ("mistral-large-2512", "mistral-small-2603", "codestral-2508")


def ingest_and_mark(project, **batch):
    """ingest(), which marks the runs it touched for the ledger in its transaction."""
    with organization_scope(project.organization):
        return ingest(project=project, announce=False, **batch)


def llm_step(trace_id, span_id, at, model=MODELS[0], tokens=1000, **fields):
    return StepEvent(
        trace_id=trace_id,
        span_id=span_id,
        kind="llm",
        started_at=at,
        ended_at=at + timedelta(seconds=1),
        model=model,
        input_tokens=tokens,
        output_tokens=tokens // 3,
        **fields,
    )


def drain() -> int:
    total = 0
    while count := ledger_refresh(7):
        total += count
    return total


def ledger_totals(organization) -> dict:
    with organization_scope(organization):
        daily = UsageDaily.objects.aggregate(
            cost=Sum("cost"), steps=Sum("steps"), input=Sum("input_tokens"), output=Sum("output_tokens")
        )
        steps = Step.objects.aggregate(
            cost=Sum("cost"), steps=Count("id"), input=Sum("input_tokens"), output=Sum("output_tokens")
        )
    return {"ledger": daily, "steps": steps}


def assert_ledger_matches_steps(organization):
    totals = ledger_totals(organization)
    assert totals["ledger"]["cost"] == totals["steps"]["cost"]
    assert isinstance(totals["ledger"]["cost"], Decimal)
    assert totals["ledger"]["steps"] == totals["steps"]["steps"]
    assert totals["ledger"]["input"] == totals["steps"]["input"]
    assert totals["ledger"]["output"] == totals["steps"]["output"]


def test_ledger_equals_step_costs_after_out_of_order_and_duplicate_ingestion(tenant):
    project = tenant.project
    steps = [
        llm_step(f"t{n % 5}", f"s{n}", DAY1 + timedelta(seconds=n * 7), model=MODELS[n % 3], tokens=1000 + 37 * n)
        for n in range(40)
    ]
    # Steps before their run, in reverse, in overlapping batches, then all of it again.
    for batch in (steps[30:][::-1], steps[10:35], steps[:12][::-1], steps):
        ingest_and_mark(project, steps=batch)
    ingest_and_mark(project, runs=[RunEvent(trace_id=f"t{n}", fields={"agent_name": "support"}) for n in range(5)])
    assert drain() == 5
    assert_ledger_matches_steps(tenant.organization)
    with organization_scope(tenant.organization):
        assert Step.objects.count() == 40
        assert sorted(UsageDaily.objects.values_list("day", flat=True).distinct()) == [
            date(2026, 11, 19),
            date(2026, 11, 20),
        ]
        # The run's agent name arrived last and moved its usage to that dimension.
        assert set(UsageDaily.objects.filter(cost__gt=0).values_list("agent_name", flat=True)) == {"support"}
        assert not LedgerBacklog.objects.exists()
    # Re-sending changes nothing.
    ingest_and_mark(project, steps=steps)
    drain()
    assert_ledger_matches_steps(tenant.organization)


def test_resent_step_with_more_tokens_updates_the_ledger(tenant):
    ingest_and_mark(tenant.project, steps=[llm_step("t1", "a", DAY1, tokens=1000)])
    drain()
    before = ledger_totals(tenant.organization)["ledger"]["cost"]
    ingest_and_mark(tenant.project, steps=[llm_step("t1", "a", DAY1, tokens=5000)])
    drain()
    after = ledger_totals(tenant.organization)
    assert after["ledger"]["cost"] > before
    assert_ledger_matches_steps(tenant.organization)
    with organization_scope(tenant.organization):
        assert UsageDaily.objects.get(model=MODELS[0]).input_tokens == 5000


def test_usage_is_split_by_day_model_api_key_and_end_user(tenant, make_api_key):
    key, _ = make_api_key(tenant.project)
    ingest_and_mark(tenant.project, runs=[RunEvent(trace_id="t1", fields={"end_user_id": "user-7"})])
    with organization_scope(tenant.organization):
        Run.objects.filter(trace_id="t1").update(api_key=key)
    ingest_and_mark(
        tenant.project,
        steps=[
            llm_step("t1", "a", DAY1),
            llm_step("t1", "b", DAY2),
            llm_step("t1", "c", DAY2, model=MODELS[1]),
            StepEvent(trace_id="t1", span_id="tool", kind="tool", started_at=DAY2),
        ],
    )
    drain()
    with organization_scope(tenant.organization):
        rows = {(r.day, r.model): r for r in UsageDaily.objects.all()}
        step_cost = {s.span_id: s.cost for s in Step.objects.all()}
    assert set(rows) == {
        (DAY1.date(), MODELS[0]),
        (DAY2.date(), MODELS[0]),
        (DAY2.date(), MODELS[1]),
        (DAY2.date(), ""),
    }
    assert {(r.api_key_id, r.end_user_id, r.project_id) for r in rows.values()} == {
        (key.pk, "user-7", tenant.project.pk)
    }
    assert rows[(DAY2.date(), MODELS[1])].cost == step_cost["c"]
    assert rows[(DAY2.date(), "")].steps == 1
    assert rows[(DAY2.date(), "")].cost == 0


def test_unpriced_steps_are_counted(tenant):
    ingest_and_mark(tenant.project, steps=[llm_step("t1", "a", DAY1, model="no-such-model")])
    drain()
    with organization_scope(tenant.organization):
        row = UsageDaily.objects.get()
    assert (row.unpriced_steps, row.cost) == (1, 0)


def test_deleted_run_keeps_its_cost_and_rebuild_matches_refresh(tenant):
    ingest_and_mark(tenant.project, steps=[llm_step("t1", "a", DAY1), llm_step("t2", "b", DAY2)])
    drain()
    total = ledger_totals(tenant.organization)["ledger"]["cost"]
    with organization_scope(tenant.organization):
        doomed = Run.objects.get(trace_id="t1").pk
        ledger_mark(organization_id=tenant.organization.pk, run_ids=[doomed])
        Run.objects.filter(pk=doomed).delete()
    assert drain() == 1
    assert ledger_totals(tenant.organization)["ledger"]["cost"] == total
    with dangerously_unscoped("test"):
        before = sorted(UsageDaily.objects.values_list("day", "model", "cost", "steps"))
    ledger_rebuild()
    with dangerously_unscoped("test"):
        assert sorted(UsageDaily.objects.values_list("day", "model", "cost", "steps")) == before
        assert RunUsage.objects.filter(run_id=doomed).exists()


def test_ledger_of_one_organization_ignores_another(tenant, other_tenant):
    ingest_and_mark(tenant.project, steps=[llm_step("t1", "a", DAY1)])
    ingest_and_mark(other_tenant.project, steps=[llm_step("t1", "a", DAY1, tokens=9999)])
    touched: set[int] = set()
    ledger_refresh(organizations=touched)
    assert touched == {tenant.organization.pk, other_tenant.organization.pk}
    assert_ledger_matches_steps(tenant.organization)
    assert_ledger_matches_steps(other_tenant.organization)


def test_the_task_drains_the_backlog(tenant):
    ingest_and_mark(tenant.project, steps=[llm_step(f"t{n}", "a", DAY1) for n in range(12)])
    assert refresh_ledger() == 12
    assert_ledger_matches_steps(tenant.organization)


@pytest.mark.django_db(transaction=True)
def test_a_run_held_by_an_ingest_batch_stays_marked_and_nobody_waits(tenant):
    ingest_and_mark(tenant.project, steps=[llm_step("t1", "a", DAY1)])
    run_id = Run.dangerously_unscoped_objects.get().pk
    held, release = threading.Event(), threading.Event()

    def ingest_batch_holding_the_run():
        try:
            with transaction.atomic(), connection.cursor() as cursor:
                cursor.execute("SELECT id FROM runs_run WHERE id = %s FOR UPDATE", [run_id])
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=ingest_batch_holding_the_run)
    thread.start()
    assert held.wait(10)
    try:
        assert ledger_refresh() == 0
        assert LedgerBacklog.objects.filter(run_id=run_id).exists()
    finally:
        release.set()
        thread.join(10)
    assert ledger_refresh() == 1
    assert_ledger_matches_steps(tenant.organization)


@pytest.mark.django_db(transaction=True)
def test_two_refreshers_at_once_count_each_run_once(tenant):
    ingest_and_mark(
        tenant.project,
        steps=[llm_step(f"t{n}", f"s{m}", DAY1, tokens=100 + n + m) for n in range(60) for m in range(3)],
    )
    errors = []

    def refresher():
        try:
            while ledger_refresh(5):
                pass
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=refresher) for _ in range(4)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert not errors
    assert_ledger_matches_steps(tenant.organization)
    with organization_scope(tenant.organization):
        assert RunUsage.objects.count() == 60


# --- Categories ---------------------------------------------------------------------------


def _spend_in_every_category(tenant):
    """An LLM call, a tool priced per character, a free tool, an hour of a100 at 3/h and a
    judge call, all on one day and in the ledger."""
    from billing.ledger import compute_usage_record, evaluation_usage_record

    at = datetime(2026, 11, 2, 12, tzinfo=UTC)
    ingest_and_mark(
        tenant.project,
        steps=[
            llm_step("t", "llm", at, model="mistral-large-2512", tokens=1_000_000),
            StepEvent(trace_id="t", span_id="tts", kind="tool", name="tts", input={"text": "x" * 1000}, started_at=at),
            StepEvent(trace_id="t", span_id="calc", kind="tool", name="calculator", input={"e": "1"}, started_at=at),
        ],
    )
    drain()
    compute_usage_record(
        organization_id=tenant.organization.pk,
        project_id=tenant.project.pk,
        job_id=77,
        started_at=at,
        ended_at=at + timedelta(hours=1),
        hardware="a100",
        backend="local",
        hourly=Decimal("3"),
        price_id=None,
    )
    evaluation_usage_record(
        organization_id=tenant.organization.pk,
        project_id=tenant.project.pk,
        model="mistral-small-latest",
        input_tokens=900,
        cached_input_tokens=0,
        output_tokens=40,
        cost=Decimal("0.25"),
        price_id=None,
        at=at,
        evaluator="helpfulness",
        source="experiment",
        experiment_id=5,
    )
    return at


def test_spend_is_split_into_llm_tools_by_unit_gpu_jobs_and_evaluation(tenant):
    from billing.spend import Window, category_totals

    at = _spend_in_every_category(tenant)
    with organization_scope(tenant.organization):
        llm_cost = Step.objects.get(span_id="llm").cost
        totals = {
            row["category"]: row
            for row in category_totals(organization=tenant.organization, window=Window(at.date(), at.date()))
        }
    assert totals["llm"]["cost"] == llm_cost and totals["llm"]["steps"] == 1
    assert totals["tool"]["cost"] == Decimal("0.015") and totals["tool"]["steps"] == 2
    assert totals["tool"]["units"] == [
        {"unit": "character", "cost": Decimal("0.015"), "steps": 1},
        {"unit": "unpriced", "cost": Decimal(0), "steps": 1},
    ]
    assert totals["gpu"]["cost"] == Decimal("3") and totals["evaluation"]["cost"] == Decimal("0.25")


def test_budgets_count_every_category(tenant):
    from billing.budgets import budget_create, budget_spend

    at = _spend_in_every_category(tenant)
    with organization_scope(tenant.organization):
        llm_cost = Step.objects.get(span_id="llm").cost
        budget = budget_create(organization=tenant.organization, actor=None, name="all", amount="1000")
    spent = budget_spend(budget, at.date())
    assert spent["spend"] == llm_cost + Decimal("0.015") + Decimal("3") + Decimal("0.25")


def test_a_rebuild_keeps_every_category(tenant):
    from billing.spend import Window, category_totals

    at = _spend_in_every_category(tenant)
    window = Window(at.date(), at.date())
    with organization_scope(tenant.organization):
        before = category_totals(organization=tenant.organization, window=window)
    ledger_rebuild()
    with organization_scope(tenant.organization):
        assert category_totals(organization=tenant.organization, window=window) == before


# --- Which cost budgets count --------------------------------------------------------------------


def test_the_ledger_counts_the_computed_cost_unless_the_organization_chooses_the_reported_one(tenant):
    started = days_ago(1)
    run = make_run(tenant.project, started_at=started)
    make_step(run, model="gpt-4o", input_tokens=10, output_tokens=10, cost="1.00", reported_cost=Decimal("1.50"))
    make_step(run, model="gpt-4o", input_tokens=10, output_tokens=10, cost="2.00")
    build_ledger(run)
    with organization_scope(tenant.organization):
        row = UsageDaily.objects.get(project=tenant.project)
    # Computed by default; the reported cost and the computed cost of the same step beside it.
    assert (row.cost, row.reported_cost, row.reported_computed_cost) == (
        Decimal("3.00"),
        Decimal("1.50"),
        Decimal("1.00"),
    )

    with organization_scope(tenant.organization):
        budget_cost_set(organization=tenant.organization, budget_cost="reported", actor=tenant.owner)
    build_ledger(run)
    with organization_scope(tenant.organization):
        row = UsageDaily.objects.get(project=tenant.project)
    # The reported cost where a step has one, the computed cost where it has none.
    assert (row.cost, row.reported_cost) == (Decimal("3.50"), Decimal("1.50"))
    with organization_scope(tenant.organization):
        budget = Budget.objects.create(organization=tenant.organization, name="all", amount=Decimal("100"))
        # The period holding the run's day (yesterday is last month's on the 1st).
        assert budget_spend(budget, started.date())["spend"] == Decimal("3.50")
