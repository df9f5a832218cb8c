"""GPU jobs in the ledger: a job's duration x hourly rate, split per UTC day, recorded
as the difference with what the job contributed before; counted by pages, budgets and
alerts like model usage, and kept by a rebuild."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connections
from django.db.models import Sum

from agentops.errors import PaymentRequired
from agentops.scoping import dangerously_unscoped, organization_scope
from billing.alerts import evaluate_alerts
from billing.budgets import budget_create, check_work_allowed, utc_today
from billing.ledger import COMPUTE_AGENT, compute_usage_record, ledger_rebuild
from billing.models import BudgetAlert, ComputeUsage, UsageDaily
from billing.services import gpu_hourly_rate
from tests.billing.factories import build_ledger, make_run, make_step

START = datetime(2026, 11, 19, 10, 0, tzinfo=UTC)
BEFORE_MIDNIGHT = datetime(2026, 11, 19, 23, 0, tzinfo=UTC)
A100 = Decimal("3.00")
CONSOLE = "/admin/billing/usagedaily/"


def record(tenant, *, job_id=1, started_at=START, ended_at=START + timedelta(minutes=90), **fields):
    fields = {"hardware": "a100", "backend": "local", "hourly": A100, "price_id": None, **fields}
    return compute_usage_record(
        organization_id=tenant.organization.pk,
        project_id=tenant.project.pk,
        job_id=job_id,
        started_at=started_at,
        ended_at=ended_at,
        **fields,
    )


def ledger(organization) -> list[tuple]:
    with organization_scope(organization):
        return sorted(UsageDaily.objects.filter(cost__gt=0).values_list("day", "agent_name", "model", "cost", "steps"))


def usage(organization) -> list[tuple]:
    with organization_scope(organization):
        return sorted(ComputeUsage.objects.values_list("job_id", "day", "seconds", "cost"))


def test_cost_is_duration_times_hourly_rate(tenant):
    price = gpu_hourly_rate(hardware="a100", organization_id=tenant.organization.pk)
    assert price.hourly == A100
    total = record(tenant, hourly=price.hourly, price_id=price.id)
    assert total == Decimal("4.50") and isinstance(total, Decimal)
    assert ledger(tenant.organization) == [(START.date(), COMPUTE_AGENT, "gpu:a100", Decimal("4.5"), 1)]
    with organization_scope(tenant.organization):
        row = ComputeUsage.objects.get()
    assert (row.seconds, row.hourly, row.cost, row.price_id) == (Decimal(5400), A100, Decimal("4.5"), price.id)
    assert (row.hardware, row.backend, row.project_id) == ("a100", "local", tenant.project.pk)


def test_costs_are_exact_to_the_nano_dollar(tenant):
    # 1 s at 3.00/h = 0.000833333.. -> rounded to 9 decimals, like step costs.
    assert record(tenant, ended_at=START + timedelta(seconds=1)) == Decimal("0.000833333")
    assert record(tenant, job_id=2, ended_at=START + timedelta(microseconds=1_500_000)) == Decimal("0.001250000")


def test_a_job_over_midnight_counts_on_both_days(tenant):
    total = record(tenant, started_at=BEFORE_MIDNIGHT, ended_at=BEFORE_MIDNIGHT + timedelta(hours=2))
    assert total == Decimal("6.00")
    day1, day2 = BEFORE_MIDNIGHT.date(), BEFORE_MIDNIGHT.date() + timedelta(days=1)
    assert usage(tenant.organization) == [
        (1, day1, Decimal(3600), Decimal("3")),
        (1, day2, Decimal(3600), Decimal("3")),
    ]
    assert [(day, cost) for day, _agent, _model, cost, _steps in ledger(tenant.organization)] == [
        (day1, Decimal("3")),
        (day2, Decimal("3")),
    ]


def test_a_job_over_several_days_in_another_time_zone(tenant):
    started_at = datetime.fromisoformat("2026-11-20T00:30:00+01:00")  # 2026-11-19 23:30 UTC
    total = record(tenant, started_at=started_at, ended_at=started_at + timedelta(hours=49))
    assert total == Decimal("147.00")
    assert [(day.isoformat(), seconds) for _job, day, seconds, _cost in usage(tenant.organization)] == [
        ("2026-11-19", Decimal(1800)),
        ("2026-11-20", Decimal(86400)),
        ("2026-11-21", Decimal(86400)),
        ("2026-11-22", Decimal(1800)),
    ]


def test_recording_twice_changes_nothing(tenant):
    record(tenant, started_at=BEFORE_MIDNIGHT, ended_at=BEFORE_MIDNIGHT + timedelta(hours=2))
    before = ledger(tenant.organization), usage(tenant.organization)
    assert record(tenant, started_at=BEFORE_MIDNIGHT, ended_at=BEFORE_MIDNIGHT + timedelta(hours=2)) == Decimal("6")
    assert (ledger(tenant.organization), usage(tenant.organization)) == before


def test_a_later_end_adds_only_the_rest(tenant):
    assert record(tenant, started_at=BEFORE_MIDNIGHT, ended_at=BEFORE_MIDNIGHT + timedelta(minutes=30)) == Decimal(
        "1.5"
    )
    assert record(tenant, started_at=BEFORE_MIDNIGHT, ended_at=BEFORE_MIDNIGHT + timedelta(hours=3)) == Decimal("9")
    day1, day2 = BEFORE_MIDNIGHT.date(), BEFORE_MIDNIGHT.date() + timedelta(days=1)
    assert [(day, cost) for day, _agent, _model, cost, steps in ledger(tenant.organization)] == [
        (day1, Decimal("3")),
        (day2, Decimal("6")),
    ]
    with organization_scope(tenant.organization):
        assert UsageDaily.objects.aggregate(steps=Sum("steps"))["steps"] == 2  # one per job and day


def test_an_earlier_end_takes_back_the_difference(tenant):
    record(tenant, started_at=BEFORE_MIDNIGHT, ended_at=BEFORE_MIDNIGHT + timedelta(hours=3))
    record(tenant, started_at=BEFORE_MIDNIGHT, ended_at=BEFORE_MIDNIGHT + timedelta(minutes=30))
    assert ledger(tenant.organization) == [(BEFORE_MIDNIGHT.date(), COMPUTE_AGENT, "gpu:a100", Decimal("1.5"), 1)]
    assert len(usage(tenant.organization)) == 1
    with organization_scope(tenant.organization):
        assert UsageDaily.objects.aggregate(steps=Sum("steps"))["steps"] == 1


def test_a_job_without_a_price_is_free_but_counted_unpriced(tenant):
    assert record(tenant, hardware="tpu-v5", hourly=None) == Decimal(0)
    with organization_scope(tenant.organization):
        row = UsageDaily.objects.get()
    assert (row.model, row.cost, row.steps, row.unpriced_steps) == ("gpu:tpu-v5", Decimal(0), 1, 1)
    # Priced later (a price was added): the unpriced count goes away.
    record(tenant, hardware="tpu-v5", hourly=Decimal("1"))
    with organization_scope(tenant.organization):
        row = UsageDaily.objects.get()
    assert (row.cost, row.steps, row.unpriced_steps) == (Decimal("1.5"), 1, 0)


def test_a_job_with_no_time_records_nothing(tenant):
    assert record(tenant, ended_at=START) == Decimal(0)
    assert usage(tenant.organization) == [] and ledger(tenant.organization) == []
    # Recorded, then corrected to no time at all: its usage is taken back entirely.
    record(tenant, job_id=2)
    assert record(tenant, job_id=2, ended_at=START) == Decimal(0)
    assert usage(tenant.organization) == [] and ledger(tenant.organization) == []
    with organization_scope(tenant.organization):
        assert UsageDaily.objects.aggregate(steps=Sum("steps"))["steps"] == 0


@pytest.mark.parametrize(
    "fields",
    [
        {"ended_at": START - timedelta(seconds=1)},
        {"started_at": START.replace(tzinfo=None)},
        {"hourly": Decimal(-1)},
        {"hourly": 3.0},
        {"hardware": " "},
    ],
)
def test_bad_input_is_refused_and_writes_nothing(tenant, fields):
    with pytest.raises(ValueError):
        record(tenant, **fields)
    assert usage(tenant.organization) == []


def test_a_job_id_of_another_organization_is_refused(tenant, other_tenant):
    record(other_tenant, job_id=7)
    with pytest.raises(ValueError, match="another organization"):
        record(tenant, job_id=7)
    assert usage(tenant.organization) == []
    assert len(usage(other_tenant.organization)) == 1


def test_job_usage_has_its_own_ledger_row_beside_model_usage(tenant, make_api_key):
    key, _raw = make_api_key(tenant.project)
    run = make_run(tenant.project, started_at=START)
    make_step(run, model="mistral-large-2512", input_tokens=1000, output_tokens=100, cost="0.25")
    build_ledger(run)
    record(tenant, api_key_id=key.pk)
    with organization_scope(tenant.organization):
        rows = sorted(UsageDaily.objects.values_list("agent_name", "model", "api_key_id", "end_user_id", "cost"))
    assert rows == [
        ("gpu-job", "gpu:a100", key.pk, "", Decimal("4.5")),
        ("support", "mistral-large-2512", None, "", Decimal("0.25")),
    ]


def test_a_rebuild_keeps_job_costs(tenant):
    run = make_run(tenant.project, started_at=START)
    make_step(run, model="mistral-large-2512", input_tokens=1000, output_tokens=100, cost="0.25")
    build_ledger(run)
    record(tenant, started_at=BEFORE_MIDNIGHT, ended_at=BEFORE_MIDNIGHT + timedelta(hours=2))
    with organization_scope(tenant.organization):
        before = sorted(UsageDaily.objects.values_list("day", "agent_name", "model", "cost", "steps", "unpriced_steps"))
    counts = ledger_rebuild()
    assert counts["compute_usage_rows"] == 2
    with organization_scope(tenant.organization):
        after = sorted(UsageDaily.objects.values_list("day", "agent_name", "model", "cost", "steps", "unpriced_steps"))
    assert after == before
    # And recording after the rebuild still applies a difference against the same base.
    record(tenant, started_at=BEFORE_MIDNIGHT, ended_at=BEFORE_MIDNIGHT + timedelta(hours=2))
    with organization_scope(tenant.organization):
        assert UsageDaily.objects.aggregate(cost=Sum("cost"))["cost"] == Decimal("6.25")


def test_job_usage_is_kept_when_the_job_is_gone(tenant):
    # job_id is not a foreign key: whatever happens to the job, its cost stays billed.
    record(tenant, job_id=123456789012)
    assert usage(tenant.organization)[0][0] == 123456789012
    assert ledger(tenant.organization)[0][3] == Decimal("4.5")


def test_a_hard_budget_blocks_new_jobs_after_job_spend(tenant):
    with organization_scope(tenant.organization):
        budget_create(organization=tenant.organization, actor=tenant.owner, name="GPU cap", amount="5", hard_limit=True)
    morning = datetime.combine(utc_today(), datetime.min.time(), tzinfo=UTC) + timedelta(hours=1)
    record(tenant, started_at=morning, ended_at=morning + timedelta(minutes=90))  # $4.50
    check_work_allowed(project=tenant.project, work="job")
    record(tenant, job_id=2, started_at=morning, ended_at=morning + timedelta(minutes=10))  # $0.50
    with pytest.raises(PaymentRequired) as caught:
        check_work_allowed(project=tenant.project, work="job")
    assert (caught.value.status, caught.value.code) == (402, "budget_exceeded")
    assert caught.value.details["spend"] == "5.000000000" and "New jobs are blocked" in caught.value.message


def test_job_spend_raises_budget_alerts_once_committed(tenant, django_capture_on_commit_callbacks):
    with organization_scope(tenant.organization):
        budget = budget_create(organization=tenant.organization, actor=tenant.owner, name="GPU", amount="5")
    morning = datetime.combine(utc_today(), datetime.min.time(), tzinfo=UTC) + timedelta(hours=1)
    with django_capture_on_commit_callbacks(execute=False) as callbacks:
        record(tenant, started_at=morning, ended_at=morning + timedelta(minutes=90))
        record(tenant, started_at=morning, ended_at=morning + timedelta(minutes=90))  # no change: no evaluation
    assert len(callbacks) == 1
    evaluate_alerts(tenant.organization.pk)
    with organization_scope(tenant.organization):
        assert sorted(BudgetAlert.objects.filter(budget=budget).values_list("threshold", flat=True)) == [50, 80]


def test_the_billing_page_shows_the_job_cost(tenant, other_tenant, client):
    morning = datetime.combine(utc_today(), datetime.min.time(), tzinfo=UTC) + timedelta(hours=1)
    record(tenant, started_at=morning, ended_at=morning + timedelta(minutes=90))
    client.force_login(tenant.owner)
    response = client.get("/o/acme/billing/")
    assert response.status_code == 200
    (row,) = response.context["table"]
    assert (row["agent_name"], row["model"], row["cost"], row["job"]) == ("gpu-job", "gpu:a100", Decimal("4.5"), True)
    body = response.content.decode()
    assert 'gpu:a100 <span class="muted">(job)</span>' in body and "$4.50" in body
    assert response.context["totals"]["cost"] == Decimal("4.5")
    csv_body = client.get("/o/acme/billing/?format=csv").content.decode()
    assert "gpu-job,gpu:a100,gpu,hour,4.500000000" in csv_body
    # Another organization's page does not show it.
    client.force_login(other_tenant.owner)
    response = client.get("/o/globex/billing/")
    assert response.context["table"] == [] and "gpu:a100" not in response.content.decode()


def test_compute_usage_is_tenant_scoped(tenant, other_tenant):
    record(tenant)
    with organization_scope(other_tenant.organization):
        assert not ComputeUsage.objects.exists()
        assert not UsageDaily.objects.exists()
    with organization_scope(tenant.organization):
        assert ComputeUsage.objects.count() == 1


def test_the_console_drills_down_to_the_jobs_behind_a_number(tenant, client):
    from tests.agentops.factories import UserFactory

    record(tenant, job_id=41)
    record(tenant, job_id=42, ended_at=START + timedelta(minutes=30))
    client.force_login(UserFactory(is_staff=True, is_superuser=True))
    response = client.get(CONSOLE + f"spend/?level=day&start={START.date()}&end={START.date()}")
    (row,) = response.context["rows"]
    assert row["model"] == "gpu:a100" and row["cost"] == Decimal("6")
    response = client.get(row["link"])
    assert response.status_code == 200
    assert [job.job_id for job in response.context["jobs"]] == [41, 42]
    assert 'id="jobs-table"' in response.content.decode()
    csv_body = client.get(row["link"] + "&format=csv").content.decode()
    assert csv_body.splitlines()[0] == "job_id,hardware,backend,seconds,hourly,cost,price_id"


@pytest.mark.django_db(transaction=True)
def test_two_writers_of_one_job_count_it_once(tenant):
    barrier = threading.Barrier(2)
    errors = []

    def finish():
        try:
            barrier.wait(5)
            record(tenant, job_id=9)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=finish) for _ in range(2)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(10)
    assert errors == []
    with dangerously_unscoped("test"):
        assert UsageDaily.objects.aggregate(cost=Sum("cost"))["cost"] == Decimal("4.5")
        assert ComputeUsage.objects.count() == 1
