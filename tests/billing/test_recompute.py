"""Recompute: the preview is exactly what applying does; old amounts are kept, runs and
the ledger follow, each organization's audit log records it."""

from __future__ import annotations

from datetime import timedelta
from decimal import Decimal

import pytest

from agentops.errors import InvalidRequest
from agentops.models import AuditEvent
from billing.models import CostRevision, LedgerBacklog, Price, StepCostChange, UsageDaily
from billing.recompute import apply_recompute, preview_recompute
from runs.models import Run, Step
from tests.agentops.factories import UserFactory
from tests.billing.factories import build_ledger, days_ago, make_run, make_step


@pytest.fixture
def draft_price(db):
    return Price.objects.create(
        kind=Price.Kind.LLM,
        pattern="mistral-large",
        match=Price.Match.PREFIX,
        input_per_million=Decimal("4"),
        cached_input_per_million=Decimal("1"),
        output_per_million=Decimal("10"),
        status=Price.Status.DRAFT,
    )


@pytest.fixture
def steps(tenant, other_tenant):
    """Model calls of two organizations inside the range, and some outside it."""
    inside = days_ago(2)
    acme = make_run(tenant.project, started_at=inside)
    make_step(acme, model="mistral-large-2512", input_tokens=1_000_000, output_tokens=100_000, cost="2.5")
    make_step(
        acme, model="Mistral-Large-2411", input_tokens=500_000, output_tokens=0, cost=None, cached_input_tokens=100_000
    )
    make_step(acme, model="mistral-small-2603", input_tokens=1_000_000, output_tokens=0, cost="0.1")
    make_step(acme, model="mistral-large-2512", input_tokens=10, output_tokens=10, cost="0", kind=Step.Kind.TOOL)
    globex = make_run(other_tenant.project, started_at=inside)
    make_step(globex, model="mistral-large-2512", input_tokens=2_000_000, output_tokens=0, cost="4")
    outside = make_run(tenant.project, started_at=days_ago(20))
    make_step(outside, model="mistral-large-2512", input_tokens=1_000_000, output_tokens=0, cost="2")
    build_ledger(acme, globex, outside)
    return {"acme": acme, "globex": globex, "outside": outside}


def window():
    return days_ago(5), days_ago(0)


def test_preview_lists_organizations_and_models(draft_price, steps, tenant):
    rows = preview_recompute(draft_price, *window())
    by_key = {(row["organization"], row["model"]): row for row in rows}
    assert set(by_key) == {
        ("acme", "mistral-large-2512"),
        ("acme", "Mistral-Large-2411"),
        ("globex", "mistral-large-2512"),
    }
    large = by_key[("acme", "mistral-large-2512")]
    assert large["steps"] == 1
    assert large["old_total"] == Decimal("2.5") and large["new_total"] == Decimal("5")
    assert large["difference"] == Decimal("2.5")
    # 400k uncached at $4, 100k cached at $1; it was unpriced (no old amount).
    assert by_key[("acme", "Mistral-Large-2411")]["new_total"] == Decimal("1.7")
    assert by_key[("acme", "Mistral-Large-2411")]["old_total"] == Decimal("0")
    # A preview writes nothing.
    assert not CostRevision.objects.exists()


def test_preview_equals_the_applied_result(draft_price, steps, tenant):
    staff = UserFactory(is_staff=True, is_superuser=True)
    preview = preview_recompute(draft_price, *window())
    revision = apply_recompute(price=draft_price, starts_at=window()[0], ends_at=window()[1], actor=staff)

    applied = {(row["organization"], row["model"]): row for row in revision.summary["rows"]}
    assert {
        key: (row["steps"], str(row["old_total"]), str(row["new_total"]), str(row["difference"]))
        for key, row in (((row["organization"], row["model"]), row) for row in preview)
    } == {key: (row["steps"], row["old_total"], row["new_total"], row["difference"]) for key, row in applied.items()}
    # The steps now cost what the preview said, and the changes add up to it.
    changes = list(StepCostChange.objects.filter(revision=revision))
    assert len(changes) == sum(row["steps"] for row in preview) == 3
    assert sum(change.new_cost for change in changes) == sum(row["new_total"] for row in preview)
    assert sum(change.old_cost or 0 for change in changes) == sum(row["old_total"] for row in preview)
    for change in changes:
        step = Step.dangerously_unscoped_objects.get(pk=change.step_id)
        assert step.cost == change.new_cost and step.price_id == draft_price.pk and not step.unpriced
        assert change.new_price_id == draft_price.pk
    # Old amounts and prices are kept.
    unpriced = next(change for change in changes if change.old_cost is None)
    assert unpriced.old_price_id is None
    # A preview after applying changes nothing more.
    assert all(row["difference"] == 0 for row in preview_recompute(draft_price, *window()))


def test_apply_updates_run_totals_ledger_and_audit(draft_price, steps, tenant, other_tenant):
    staff = UserFactory(is_staff=True, is_superuser=True)
    before = UsageDaily.dangerously_unscoped_objects.filter(organization=tenant.organization).values_list(
        "cost", flat=True
    )
    assert sum(before) == Decimal("4.6")
    apply_recompute(price=draft_price, starts_at=window()[0], ends_at=window()[1], actor=staff, ip="10.0.0.1")
    acme = Run.dangerously_unscoped_objects.get(pk=steps["acme"].pk)
    assert acme.total_cost == Decimal("5") + Decimal("1.7") + Decimal("0.1")
    assert acme.unpriced_step_count == 0
    # Marked for the ledger, and the ledger follows once refreshed.
    assert set(LedgerBacklog.objects.values_list("run_id", flat=True)) == {steps["acme"].pk, steps["globex"].pk}
    build_ledger()
    after = UsageDaily.dangerously_unscoped_objects.filter(organization=tenant.organization)
    assert sum(after.values_list("cost", flat=True)) == Decimal("5") + Decimal("1.7") + Decimal("0.1") + Decimal("2")
    for organization in (tenant.organization, other_tenant.organization):
        event = AuditEvent.dangerously_unscoped_objects.get(organization=organization, action="billing.recompute")
        assert event.actor == staff and event.ip_address == "10.0.0.1"
    globex_event = AuditEvent.dangerously_unscoped_objects.get(
        organization=other_tenant.organization, action="billing.recompute"
    )
    assert globex_event.data["old_total"] == "4.000000000" and globex_event.data["new_total"] == "8.000000000"


def test_negotiated_price_only_reprices_its_organization(draft_price, steps, tenant):
    draft_price.organization = tenant.organization
    draft_price.save()
    assert {row["organization"] for row in preview_recompute(draft_price, *window())} == {"acme"}


def test_recompute_refuses_tool_prices_and_empty_ranges(draft_price, db):
    start, end = window()
    with pytest.raises(InvalidRequest):
        preview_recompute(draft_price, end, start)
    draft_price.kind = Price.Kind.TOOL
    with pytest.raises(InvalidRequest):
        preview_recompute(draft_price, start, end + timedelta(days=1))


def test_recompute_prices_each_part_and_tier_with_the_new_version(tenant):
    run = make_run(tenant.project, started_at=days_ago(2))
    small = make_step(
        run,
        model="acme-reasoner",
        input_tokens=1_000,
        cached_input_tokens=400,
        cache_write_input_tokens=100,
        output_tokens=500,
        reasoning_output_tokens=300,
        cost="1",
    )
    large = make_step(run, model="acme-reasoner", input_tokens=2_000_000, output_tokens=0, cost="1")
    build_ledger(run)
    price = Price.objects.create(
        kind=Price.Kind.LLM,
        pattern="acme-reasoner",
        input_per_million=Decimal("2"),
        cached_input_per_million=Decimal("0.5"),
        cache_write_per_million=Decimal("4"),
        output_per_million=Decimal("8"),
        reasoning_output_per_million=Decimal("6"),
        tiers=[{"above_input_tokens": 1_000_000, "input_per_million": "3"}],
        status=Price.Status.DRAFT,
    )
    (row,) = preview_recompute(price, *window())
    apply_recompute(price=price, starts_at=window()[0], ends_at=window()[1], actor=UserFactory(is_staff=True))
    small.refresh_from_db()
    large.refresh_from_db()
    assert small.cost == (500 * Decimal(2) + 400 * Decimal("0.5") + 100 * Decimal(4) + 200 * 8 + 300 * 6) / 10**6
    assert large.cost == 2_000_000 * Decimal(3) / 10**6, "above the tier's threshold: its input rate"
    assert row["new_total"] == small.cost + large.cost
    assert Run.dangerously_unscoped_objects.get(pk=run.pk).total_cost == small.cost + large.cost
