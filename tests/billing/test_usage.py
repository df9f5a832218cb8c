"""Usage sources: the ledger, the drill-downs and the recompute read runs only through
the source registered in ``billing.usage``."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.core.exceptions import ImproperlyConfigured

from agentops.scoping import organization_scope
from billing import spend
from billing.ledger import ledger_rebuild, ledger_refresh
from billing.models import LedgerBacklog, Price, RunUsage, UsageDaily
from billing.recompute import preview_recompute
from billing.usage import register_usage_source, unregister_usage_source
from tests.billing.factories import days_ago, make_run, make_step

pytestmark = pytest.mark.django_db


class CallRecorder:
    """The registered source, recording which of its methods billing calls."""

    def __init__(self, source):
        self.source = source
        self.calls: list[str] = []

    def __getattr__(self, name):
        self.calls.append(name)
        return getattr(self.source, name)


@pytest.fixture
def no_source():
    source = unregister_usage_source()
    yield
    unregister_usage_source()
    register_usage_source(source)


@pytest.fixture
def recorded_source():
    source = unregister_usage_source()
    recorder = CallRecorder(source)
    register_usage_source(recorder)
    yield recorder
    unregister_usage_source()
    register_usage_source(source)


@pytest.fixture
def marked_run(tenant):
    run = make_run(tenant.project, started_at=days_ago(1))
    make_step(run, model="mistral-large-2512", input_tokens=1000, output_tokens=300, cost="0.00095")
    LedgerBacklog.objects.create(run_id=run.pk, organization_id=run.organization_id)
    return run


def test_the_ledger_reads_runs_through_the_registered_source(recorded_source, marked_run):
    assert ledger_refresh() == 1
    assert {"lock_runs", "usage_query"} <= set(recorded_source.calls)
    with organization_scope(marked_run.organization):
        assert RunUsage.objects.filter(run_id=marked_run.pk).exists()


def test_with_no_source_the_ledger_builds_nothing_and_keeps_the_marks(no_source, marked_run):
    assert ledger_refresh() == 0
    assert ledger_rebuild()["run_usage_rows"] == 0
    with organization_scope(marked_run.organization):
        assert not UsageDaily.objects.exists()
    assert LedgerBacklog.objects.filter(run_id=marked_run.pk).exists()


def test_with_no_source_drill_downs_and_recompute_find_no_run(no_source, marked_run):
    window = spend.period_window("30d")
    assert spend.top_runs(organization=marked_run.organization, window=window) == []
    assert spend.console_run(marked_run.pk) == (None, [])
    price = Price.objects.filter(pattern="mistral-large-").get()
    start = days_ago(2)
    assert preview_recompute(price, start, start + timedelta(days=3)) == []


def test_a_second_source_of_another_kind_is_refused():
    with pytest.raises(ImproperlyConfigured):
        register_usage_source(object())
