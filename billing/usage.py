"""Usage sources: how billing reads the usage it bills without knowing the app that
records it.

Billing sits below runs (``agentops <- billing <- runs``), yet the ledger, the spend
drill-downs and the recompute all read what runs records: steps with their tokens and
cost. So billing defines here what it needs (``UsageSource``) and runs registers the
object that answers it from its ``AppConfig.ready()`` (``runs/usage.py``), the same
inversion as ``runs.signals.run_ended``. Billing never names a runs model or table; the
SQL over them lives in runs, which owns them.

The ledger's contributions (``RunUsage``) and its backlog are keyed by a run id, so
there is one source of runs; a second registration of another source is a mistake and
raises. GPU jobs do not go through a source: they hand their usage to the ledger
themselves (``billing.ledger.compute_usage_record``), one row per day. With no source
registered the ledger builds nothing from runs (marks stay, for when one is), the
drill-downs are empty and a recompute finds no step.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal
from typing import Any, Protocol

from django.core.exceptions import ImproperlyConfigured


@dataclass(frozen=True)
class StepRepricing:
    """One step a recompute prices again: its ids, model, and old and new amounts."""

    step_id: int
    run_id: int
    organization_id: int
    model: str
    old_cost: Decimal | None
    new_cost: Decimal
    old_price_id: int | None


class UsageSource(Protocol):
    """What billing asks of the app that records priced usage in runs."""

    # --- The ledger (billing.ledger): SQL run inside the ledger's own transaction ----

    def usage_query(self, *, listed_runs: bool) -> str:
        """A SELECT of the usage per run, UTC day and model, with the columns
        ``organization_id, project_id, day, agent_name, model, api_key_id, end_user_id,
        category, unit,
        run_id`` then ``billing.ledger.MEASURES``; with ``listed_runs``, only of the
        runs whose ids are its one parameter (a ``bigint[]``), else of every run."""

    def existing_runs_query(self) -> str:
        """A SELECT of the ``id`` of every run that exists (a rebuild recomputes those)."""

    def lock_runs(self, cursor, run_ids: list[int]) -> tuple[set[int], list[int]]:
        """Of ``run_ids``: the ones that exist, and the ones locked now against writes
        (``FOR SHARE SKIP LOCKED``: a run a writer holds is left out, never waited for),
        ascending. Uses the ledger's ``cursor``, so the locks are the ledger's."""

    # --- Drill-downs behind a number (billing.spend) ----------------------------------

    def top_runs(self, *, organization, starts_at: datetime, ends_at: datetime, limit: int) -> list[Any]:
        """The most expensive runs of ``organization`` started in the range, each with
        ``pk, name, trace_id, agent_name, started_at, total_cost, input_tokens,
        output_tokens`` and ``project``."""

    def runs_behind(self, *, project, model: str, starts_at: datetime, ends_at: datetime, limit: int) -> list[dict]:
        """The runs behind one (project, model, range) number: ``{"run_id", "name",
        "steps", "cost", "input_tokens", "output_tokens", "unpriced"}``, the most
        expensive first."""

    def run_with_steps(self, run_id: int, *, limit: int) -> tuple[Any | None, list[Any]]:
        """A run of any organization (None if there is none) and its first ``limit``
        steps, in order."""

    # --- Recompute (billing.recompute) ------------------------------------------------

    def repricings(
        self,
        *,
        organization_id: int | None,
        starts_at: datetime,
        ends_at: datetime,
        matches: Callable[[str], bool],
        cost: Callable[..., Decimal],
        lock: bool,
    ) -> Iterator[StepRepricing]:
        """Every LLM step of the range (of ``organization_id``'s projects, or all) whose
        model ``matches``, with its new ``cost(input_tokens=, cached_input_tokens=,
        output_tokens=, cache_write_input_tokens=, reasoning_output_tokens=)``; with
        ``lock``, the steps are locked until commit."""

    def reprice(self, items: list[StepRepricing], *, price_id: int) -> None:
        """Store the new cost and price of ``items``."""

    def recompute_totals(self, run_ids: list[int]) -> None:
        """Recompute the totals of runs whose steps were repriced."""


_source: UsageSource | None = None


def register_usage_source(source: UsageSource) -> None:
    """Register the source of runs' usage (runs does, when the app is ready)."""
    global _source
    if _source is not None and type(_source) is not type(source):
        raise ImproperlyConfigured(f"a usage source is already registered: {_source!r}")
    _source = source


def unregister_usage_source() -> UsageSource | None:
    """Remove the source and return it (tests put it back with ``register_usage_source``)."""
    global _source
    source, _source = _source, None
    return source


def usage_source() -> UsageSource | None:
    """The registered source, or None when no app records runs."""
    return _source
