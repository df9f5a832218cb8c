"""Energy and CO2e estimates from the versioned factor catalog (seeded by the migration
with its sources): tokens x the model's Wh per 1k tokens x the default grid, GPU hours x
the board's power x the grid of the backend's region."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal

from agentops.scoping import organization_scope
from billing import carbon
from billing.ledger import compute_usage_record, evaluation_usage_record
from billing.models import EnergyFactor
from billing.spend import Window
from tests.billing.factories import build_ledger, make_run, make_step

AT = datetime(2026, 11, 2, 12, tzinfo=UTC)


def test_every_seeded_factor_states_its_source(db):
    factors = list(EnergyFactor.objects.all())
    assert {factor.kind for factor in factors} == {"model", "gpu", "grid"}
    assert all(len(factor.source) > 20 for factor in factors)


def test_a_runs_energy_is_its_tokens_times_its_models_factor_on_the_default_grid(tenant):
    run = make_run(tenant.project, started_at=AT)
    make_step(run, model="mistral-large-2512", input_tokens=600_000, output_tokens=400_000, cost="1")
    make_step(run, model="some-unknown-model", input_tokens=1000, output_tokens=0, cost=None)
    build_ledger(run)

    footprint = carbon.run_footprint(run.pk)

    # mistral-large: 6.0 Wh per 1k tokens (Mistral's LCA); anything else: the default 0.6.
    energy = Decimal(1000) * Decimal("6.0") + Decimal(1) * Decimal("0.6")
    assert footprint.energy_wh == energy.quantize(Decimal("0.001"))
    assert footprint.co2e_g == (energy / 1000 * 473).quantize(Decimal("0.001"))


def test_a_jobs_energy_is_its_hours_times_the_board_power_on_its_backends_grid(tenant):
    for job_id, hardware, backend in ((1, "a100", "hf_jobs"), (2, "a100", "local"), (3, "cpu-basic", "local")):
        compute_usage_record(
            organization_id=tenant.organization.pk,
            project_id=tenant.project.pk,
            job_id=job_id,
            started_at=AT,
            ended_at=AT + timedelta(hours=2),
            hardware=hardware,
            backend=backend,
            hourly=None,
            price_id=None,
        )
    on_hf = carbon.job_footprint(1)
    assert (on_hf.energy_wh, on_hf.co2e_g) == (Decimal("800.000"), Decimal("296.000"))  # 2 h x 400 W, 370 g/kWh
    assert carbon.job_footprint(2).co2e_g == Decimal("378.400"), "no grid row for local: the world average"
    unknown = carbon.job_footprint(3)
    assert unknown.energy_wh == 0 and unknown.unestimated == 1, "no board power: counted, never a silent zero"


def test_a_new_factor_version_applies_from_its_day_only(tenant):
    EnergyFactor.objects.create(
        kind="model",
        pattern="mistral-large",
        match="prefix",
        value=Decimal("3.0"),
        source="a later measurement",
        effective_from=datetime(2026, 11, 10, tzinfo=UTC),
    )
    before = make_run(tenant.project, started_at=AT)
    after = make_run(tenant.project, started_at=AT + timedelta(days=10))
    for run in (before, after):
        make_step(run, model="mistral-large-2512", input_tokens=1000, output_tokens=0, cost="1")
    build_ledger(before, after)
    assert carbon.run_footprint(before.pk).energy_wh == Decimal("6.000")
    assert carbon.run_footprint(after.pk).energy_wh == Decimal("3.000")


def test_an_experiments_footprint_is_its_runs_and_its_judge_calls(tenant):
    run = make_run(tenant.project, started_at=AT)
    make_step(run, model="mistral-small-2603", input_tokens=1000, output_tokens=1000, cost="1")
    build_ledger(run)
    evaluation_usage_record(
        organization_id=tenant.organization.pk,
        project_id=tenant.project.pk,
        model="mistral-small-latest",
        input_tokens=2000,
        cached_input_tokens=0,
        output_tokens=0,
        cost=Decimal("0.01"),
        price_id=None,
        at=AT,
        experiment_id=9,
    )
    # mistral-small: 0.15 Wh per 1k tokens: 2k of the run, 2k of the judge.
    assert carbon.experiment_footprint(experiment_id=9, run_ids=[run.pk]).energy_wh == Decimal("0.600")


def test_daily_energy_and_co2e_for_the_charts(tenant):
    run = make_run(tenant.project, started_at=AT)
    make_step(run, model="mistral-large-2512", input_tokens=1000, output_tokens=0, cost="1")
    build_ledger(run)
    compute_usage_record(
        organization_id=tenant.organization.pk,
        project_id=tenant.project.pk,
        job_id=1,
        started_at=AT + timedelta(days=1),
        ended_at=AT + timedelta(days=1, hours=1),
        hardware="h100",
        backend="modal",
        hourly=None,
        price_id=None,
    )
    with organization_scope(tenant.organization):
        daily = carbon.daily_footprint(
            organization=tenant.organization, window=Window(date(2026, 11, 1), date(2026, 11, 3))
        )
    assert daily["energy_wh"] == [Decimal(0), Decimal("6.000"), Decimal("700.000")]
    assert daily["co2e_g"] == [Decimal(0), Decimal("2.838"), Decimal("259.000")]
    assert daily["total"].energy_wh == Decimal("706.000")


def test_the_suites_seed_puts_back_exactly_the_migrations_factors(db):
    from billing.seed import seed_energy_factors

    installed = sorted(EnergyFactor.objects.values_list("kind", "pattern", "match", "value", "source"))
    EnergyFactor.objects.all().delete()  # as a transactional test leaves the table
    seed_energy_factors(EnergyFactor)
    assert sorted(EnergyFactor.objects.values_list("kind", "pattern", "match", "value", "source")) == installed
