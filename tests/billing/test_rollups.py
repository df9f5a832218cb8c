"""The ledger's rollups (UsageMonthly, UsageDailyByModel) always agree with UsageDaily,
and sums read through them (billing.rollups.ledger_sums) are the daily rows' sums."""

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection

from agentops.scoping import UnscopedQueryError, dangerously_unscoped, organization_scope
from billing import spend
from billing.ledger import MEASURES, compute_usage_record, evaluation_usage_record, ledger_rebuild
from billing.models import UsageDaily
from billing.rollups import ledger_sums, month_plan
from runs.events import StepEvent
from tests.billing.factories import ledger_row
from tests.billing.test_ledger import drain, ingest_and_mark, llm_step

KEYS = {
    "billing_usagemonthly": "organization_id, project_id, month, agent_name, model, api_key_id, category, unit",
    "billing_usagedailybymodel": "organization_id, day, category, unit, model",
}
DAILY_KEYS = {
    "billing_usagemonthly": "organization_id, project_id, date_trunc('month', day::timestamp)::date, agent_name, "
    "model, api_key_id, category, unit",
    "billing_usagedailybymodel": "organization_id, day, category, unit, model",
}


def rollup_disagreements() -> dict:
    """Per rollup, the keys whose sums (and count of daily rows) differ from UsageDaily's;
    rollup rows left at zero (a key whose daily rows were all deleted) agree with none."""
    sums = ", ".join(f"sum({m})" for m in MEASURES)
    found = {}
    with connection.cursor() as cursor:
        for table, key in KEYS.items():
            width = key.count(",") + 1
            positions = ", ".join(str(position) for position in range(1, width + 1))
            cursor.execute(f"SELECT {DAILY_KEYS[table]}, {sums}, count(*) FROM billing_usagedaily GROUP BY {positions}")  # noqa: S608
            daily = {row[:width]: row[width:] for row in cursor.fetchall()}
            cursor.execute(f"SELECT {key}, {sums}, sum(day_rows) FROM {table} GROUP BY {key}")  # noqa: S608
            rolled = {row[:width]: row[width:] for row in cursor.fetchall() if any(row[width:])}
            found[table] = {
                key: (daily.get(key), rolled.get(key))
                for key in daily.keys() | rolled.keys()
                if daily.get(key) != rolled.get(key)
            }
    return found


def assert_rollups_agree():
    assert rollup_disagreements() == {"billing_usagemonthly": {}, "billing_usagedailybymodel": {}}


def test_rollups_agree_after_ingestion_resending_and_rebuild(tenant):
    october, november = datetime(2026, 10, 31, 23, 59, tzinfo=UTC), datetime(2026, 11, 1, 0, 0, 30, tzinfo=UTC)
    ingest_and_mark(
        tenant.project,
        steps=[
            llm_step("t1", "a", october, tokens=1000),
            llm_step("t1", "b", november, model="mistral-small-2603", tokens=3000),
            llm_step("t2", "c", november, tokens=500),
            StepEvent(trace_id="t2", span_id="tool", kind="tool", name="calculator", started_at=november),
        ],
    )
    drain()
    assert_rollups_agree()
    with dangerously_unscoped("test"):
        assert UsageDaily.objects.count() >= 3
    # Re-sent with more tokens, and moved to the other month: updates of daily rows.
    ingest_and_mark(tenant.project, steps=[llm_step("t1", "a", november, tokens=9000)])
    drain()
    assert_rollups_agree()
    ledger_rebuild()
    assert_rollups_agree()


def test_rollups_agree_after_gpu_jobs_judge_calls_and_deletions(tenant, other_tenant, make_api_key):
    at = datetime(2026, 11, 2, 12, tzinfo=UTC)
    job = {
        "organization_id": tenant.organization.pk,
        "project_id": tenant.project.pk,
        "job_id": 7,
        "started_at": at,
        "hardware": "a100",
        "backend": "local",
        "hourly": Decimal("3"),
        "price_id": None,
    }
    compute_usage_record(**job, ended_at=at + timedelta(hours=1))
    compute_usage_record(**job, ended_at=at + timedelta(days=1, hours=2))  # a longer job: a second day
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
    )
    key, _plaintext = make_api_key(tenant.project)
    ledger_row(tenant.project, day=at.date(), model="m", cost="1.5", api_key=key)
    ledger_row(tenant.project, day=at.date(), model="m", cost="2.5")
    ledger_row(other_tenant.project, day=at.date(), model="m", cost="4")
    assert_rollups_agree()
    # The key's rows fall to no key (SET NULL on UsageDaily: an update the triggers move).
    with dangerously_unscoped("test"):
        UsageDaily.objects.filter(api_key=key, model="m").update(api_key=None, model="n")
    assert_rollups_agree()
    with dangerously_unscoped("test"):
        UsageDaily.objects.filter(model="n").delete()
    assert_rollups_agree()
    tenant.project.delete()  # cascades to its ledger rows and its rollup rows
    assert_rollups_agree()
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM billing_usagemonthly WHERE project_id = %s", [tenant.project.pk])
        assert cursor.fetchone() == (0,)


def _rows_directly(project, other_project):
    """Ledger rows around two month boundaries, with a row of zeros, a row dated in the
    future and another project's, agent's and category's rows."""
    days = [date(2026, 9, 30), date(2026, 10, 1), date(2026, 10, 15), date(2026, 10, 31), date(2026, 11, 1)]
    for n, day in enumerate(days):
        ledger_row(project, day=day, model="large", cost=f"1.{n}00000001", input_tokens=100 + n, steps=2)
        ledger_row(project, day=day, model="small", agent_name="triage", cost="0.25", output_tokens=n, steps=1)
        ledger_row(project, day=day, model="small", agent_name="triage", cost="0.5", end_user_id=f"user-{n % 2}")
        ledger_row(other_project, day=day, model="large", cost="3", category="tool", unit="call", steps=1)
    ledger_row(project, day=date(2026, 10, 20), model="zero", cost="0")
    ledger_row(project, day=date(2026, 11, 29), model="large", cost="7", reported_cost=Decimal("6.5"))


WINDOWS = [
    (date(2026, 9, 30), date(2026, 11, 20)),  # a day, a whole month, most of a month
    (date(2026, 10, 2), date(2026, 11, 20)),  # most of October: October minus its first day
    (date(2026, 10, 15), date(2026, 10, 15)),
    (date(2026, 10, 1), date(2026, 10, 31)),
    (date(2026, 11, 1), date(2026, 11, 30)),
    (date(2026, 10, 16), date(2026, 10, 21)),  # only the zero row
]
GROUPINGS = [
    ("project_id", "agent_name", "model", "category", "unit"),
    ("category", "unit"),
    ("model",),
    (),
    ("day", "model"),
    ("day", "category"),
    ("day", "project_id"),
    ("day",),
    ("end_user_id",),
    ("model", "end_user_id"),
]


@pytest.mark.parametrize("today", [date(2026, 11, 20), date(2026, 10, 3)])
def test_ledger_sums_are_the_daily_rows_sums(tenant, today):
    from agentops.models import Project

    with organization_scope(tenant.organization):
        other_project = Project.objects.create(organization=tenant.organization, name="Other", slug="other")
    _rows_directly(tenant.project, other_project)
    with organization_scope(tenant.organization):
        for start, end in WINDOWS:
            for group_by in GROUPINGS:
                for options in ({}, {"where": {"project_id": tenant.project.pk}}, {"categories": ("tool",)}):
                    rows = UsageDaily.objects.filter(day__gte=start, day__lte=end)
                    if "where" in options:
                        rows = rows.filter(project_id=tenant.project.pk)
                    if "categories" in options:
                        rows = rows.filter(category__in=["tool"])
                    if group_by:
                        expected = list(rows.values(*group_by).annotate(**spend.SUMS).order_by())
                    else:
                        expected = [rows.aggregate(**spend.SUMS)] if rows.exists() else []
                    found = ledger_sums(
                        organization_id=tenant.organization.pk,
                        start=start,
                        end=end,
                        group_by=group_by,
                        today=today,
                        **options,
                    )

                    def key(row, group_by=group_by):
                        return tuple(str(row[name]) for name in group_by)

                    expected, found = sorted(expected, key=key), sorted(found, key=key)
                    # The same groups, the same sums, the same types and representations.
                    assert found == expected, (start, end, group_by, options)
                    assert [{k: (type(v), str(v)) for k, v in row.items()} for row in found] == [
                        {k: (type(v), str(v)) for k, v in row.items()} for row in expected
                    ], (start, end, group_by, options)


def test_a_period_reads_whole_months_from_the_rollup_and_the_days_at_its_ends():
    today = date(2026, 11, 28)
    # Last 90 days: August's last day added, September to November from the rollup,
    # November's days after the period (after today: nothing to read) subtracted.
    assert month_plan(date(2026, 8, 31), today, today=today) == (
        [date(2026, 9, 1), date(2026, 10, 1), date(2026, 11, 1)],
        [(date(2026, 8, 31), date(2026, 8, 31))],
        [(date(2026, 11, 29), date(2026, 11, 30))],
    )
    # A period inside a month, with more days outside it than inside: its own days.
    assert month_plan(date(2026, 10, 10), date(2026, 10, 12), today=today) == (
        [],
        [(date(2026, 10, 10), date(2026, 10, 12))],
        [],
    )
    # October minus its first day.
    assert month_plan(date(2026, 10, 2), date(2026, 10, 31), today=today) == (
        [date(2026, 10, 1)],
        [],
        [(date(2026, 10, 1), date(2026, 10, 1))],
    )


def test_ledger_sums_refuse_to_read_outside_the_organization_in_scope(tenant, other_tenant):
    arguments = {"organization_id": tenant.organization.pk, "start": date(2026, 11, 1), "end": date(2026, 11, 2)}
    with pytest.raises(UnscopedQueryError):
        ledger_sums(**arguments)
    with organization_scope(other_tenant.organization), pytest.raises(UnscopedQueryError):
        ledger_sums(**arguments)
    with organization_scope(tenant.organization):
        assert ledger_sums(**arguments) == []


def test_a_period_that_ends_before_it_starts_has_no_spend(tenant):
    ledger_row(tenant.project, day=date(2026, 11, 1), model="large", cost="1")
    with organization_scope(tenant.organization):
        for start, end in [(date(2026, 11, 2), date(2026, 11, 1)), (date(2026, 12, 1), date(2026, 11, 30))]:
            for group_by in [(), ("model",), ("day", "model"), ("end_user_id",)]:
                found = ledger_sums(organization_id=tenant.organization.pk, start=start, end=end, group_by=group_by)
                assert found == [], (start, end, group_by)


def test_the_spend_table_of_90_days_is_two_statements(tenant, django_assert_num_queries):
    day = datetime.now(UTC).date()
    for offset in range(0, 90, 7):
        ledger_row(tenant.project, day=day - timedelta(days=offset), model="large", cost="1")
    window = spend.period_window("90d")
    with organization_scope(tenant.organization), django_assert_num_queries(2):
        table = spend.organization_spend_table(organization=tenant.organization, window=window)
    assert [(row["model"], row["cost"], row["steps"]) for row in table] == [("large", Decimal(13), 0)]


@pytest.mark.django_db(transaction=True)
def test_a_ledger_writer_never_waits_for_another_holding_the_same_rollup_rows(tenant):
    """Two writers of the same month, model and agent: the second adds to another row of
    the key (or a new one) instead of waiting for the first to commit, and both count."""
    import threading

    from django.db import connections, transaction

    day = date(2026, 11, 3)
    ledger_row(tenant.project, day=day, model="large", cost="1")
    held, release = threading.Event(), threading.Event()

    def writer_holding_the_key():
        try:
            with transaction.atomic():
                with dangerously_unscoped("test"):
                    UsageDaily.objects.filter(day=day, model="large").update(cost=Decimal("2"))
                held.set()
                release.wait(10)
        finally:
            connections.close_all()

    thread = threading.Thread(target=writer_holding_the_key)
    thread.start()
    assert held.wait(10)
    try:
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '2s'")  # waiting would fail here, not hang
            ledger_row(tenant.project, day=day + timedelta(days=1), model="large", cost="5")
            ledger_row(tenant.project, day=day, model="small", cost="7")
            cursor.execute("RESET lock_timeout")
    finally:
        release.set()
        thread.join(10)
    assert_rollups_agree()
    with organization_scope(tenant.organization):
        rows = ledger_sums(
            organization_id=tenant.organization.pk, start=date(2026, 11, 1), end=date(2026, 11, 30), group_by=("model",)
        )
    assert sorted((row["model"], row["cost"]) for row in rows) == [("large", Decimal(7)), ("small", Decimal(7))]
    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM billing_usagemonthly WHERE model = 'large'")
        assert cursor.fetchone() == (2,)  # the held row, and the one added beside it
