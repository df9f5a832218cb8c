"""Rows for billing tests: runs and steps written directly, the ledger built from them
by the ledger's own refresh, or ledger rows written directly."""

from __future__ import annotations

from datetime import UTC, date, datetime, timedelta
from decimal import Decimal
from itertools import count

from billing.ledger import ledger_mark, ledger_refresh
from billing.models import UsageDaily
from runs.models import Run, Step

_span = count(1)


def make_run(project, *, started_at: datetime, name: str = "run", agent_name: str = "support", **fields) -> Run:
    return Run.dangerously_unscoped_objects.create(
        organization=project.organization,
        project=project,
        trace_id=f"trace-{next(_span)}",
        name=name,
        agent_name=agent_name,
        started_at=started_at,
        **fields,
    )


def make_step(run: Run, *, model: str, input_tokens: int, output_tokens: int, cost, started_at=None, **fields) -> Step:
    return Step.dangerously_unscoped_objects.create(
        organization=run.organization,
        project=run.project,
        run=run,
        span_id=f"span-{next(_span)}",
        kind=fields.pop("kind", Step.Kind.LLM),
        model=model,
        input_tokens=input_tokens,
        output_tokens=output_tokens,
        cost=None if cost is None else Decimal(cost),
        unpriced=cost is None,
        started_at=started_at or run.started_at,
        **fields,
    )


def build_ledger(*runs: Run) -> None:
    """Bring the ledger up to date with these runs, as the ledger task does."""
    from runs.ingest import recompute_run_totals

    recompute_run_totals([run.pk for run in runs])
    for run in runs:
        ledger_mark(organization_id=run.organization_id, run_ids=[run.pk])
    while ledger_refresh():
        pass


def ledger_row(project, *, day: date, model: str, cost, agent_name: str = "support", **fields) -> UsageDaily:
    return UsageDaily.dangerously_unscoped_objects.create(
        organization=project.organization,
        project=project,
        day=day,
        model=model,
        agent_name=agent_name,
        cost=Decimal(cost),
        **fields,
    )


def today() -> date:
    return datetime.now(UTC).date()


def days_ago(days: int) -> datetime:
    return datetime.now(UTC).replace(hour=12, minute=0, second=0, microsecond=0) - timedelta(days=days)
