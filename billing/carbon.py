"""Energy (Wh) and CO2e (g) estimates, beside cost (see docs/billing.md, "Carbon").

- A model call: its tokens (input, cached included, plus output) / 1000 x the model's
  Wh per 1k tokens, then x the default grid's g CO2e per kWh (providers do not say
  where a call ran).
- A GPU job: its hours x the board's power (W) x the grid intensity of its backend's
  region (the backend kind's grid row, else the default).

The factors are the versioned catalog ``billing.models.EnergyFactor``: the version in
effect on the usage's UTC day applies, the longest matching pattern first (exact before
prefix), ``*`` last. Usage with no factor (a hardware with no board power) is counted in
``unestimated`` rather than silently zero. Everything is read from the ledger, never
from raw steps: a run from its ``RunUsage`` rows, a job from its ``ComputeUsage`` rows.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, date, datetime, time
from decimal import Decimal

from billing.models import Category, ComputeUsage, EnergyFactor, EvaluationUsage, RunUsage
from billing.rollups import ledger_sums

THOUSAND = Decimal(1000)
HOUR = Decimal(3600)
PLACES = Decimal("0.001")
ANY = "*"


@dataclass(frozen=True)
class Footprint:
    energy_wh: Decimal = Decimal(0)
    co2e_g: Decimal = Decimal(0)
    unestimated: int = 0  # ledger rows with no factor (e.g. a hardware with no board power)

    def __add__(self, other: Footprint) -> Footprint:
        return Footprint(
            self.energy_wh + other.energy_wh, self.co2e_g + other.co2e_g, self.unestimated + other.unestimated
        )

    def rounded(self) -> Footprint:
        return Footprint(self.energy_wh.quantize(PLACES), self.co2e_g.quantize(PLACES), self.unestimated)

    def as_json(self) -> dict:
        rounded = self.rounded()
        return {"energy_wh": str(rounded.energy_wh), "co2e_g": str(rounded.co2e_g), "unestimated": self.unestimated}


class Factors:
    """The catalog, read once per use (a few dozen rows), when first needed."""

    def __init__(self, rows: list[EnergyFactor] | None = None):
        self._rows = rows
        self._loaded: dict[str, list[EnergyFactor]] | None = None

    @property
    def _by_kind(self) -> dict[str, list[EnergyFactor]]:
        # Read when first needed: usage with nothing to estimate costs no query.
        if self._loaded is None:
            self._loaded = defaultdict(list)
            for row in list(EnergyFactor.objects.all()) if self._rows is None else self._rows:
                self._loaded[row.kind].append(row)
        return self._loaded

    def find(self, kind: str, name: str, day: date) -> EnergyFactor | None:
        """The factor of ``kind`` for ``name`` in effect on ``day``; ``*`` when no other matches."""
        at = datetime.combine(day, time.max, tzinfo=UTC)
        name = (name or "").lower()
        in_effect = [row for row in self._by_kind[kind] if row.effective_from <= at]
        if not in_effect:  # usage older than every factor: the earliest is the best estimate
            in_effect = self._by_kind[kind]

        def rank(row: EnergyFactor):
            pattern = row.pattern.lower()
            if pattern == ANY:
                return (0, 0, row.effective_from)
            if row.match == EnergyFactor.Match.EXACT and name == pattern:
                return (3, len(pattern), row.effective_from)
            if row.match == EnergyFactor.Match.PREFIX and name.startswith(pattern):
                return (2, len(pattern), row.effective_from)
            return None

        ranked = [(rank(row), row) for row in in_effect]
        ranked = [(key, row) for key, row in ranked if key is not None]
        return max(ranked, key=lambda item: item[0])[1] if ranked else None

    def value(self, kind: str, name: str, day: date) -> Decimal | None:
        row = self.find(kind, name, day)
        return row.value if row is not None else None

    def tokens(self, *, model: str, tokens: int, day: date) -> Footprint:
        per_thousand = self.value(EnergyFactor.Kind.MODEL, model, day)
        grid = self.value(EnergyFactor.Kind.GRID, ANY, day)
        if per_thousand is None or grid is None:
            return Footprint(unestimated=1) if tokens else Footprint()
        energy = Decimal(max(tokens, 0)) * per_thousand / THOUSAND
        return Footprint(energy, energy / THOUSAND * grid)

    def gpu(self, *, hardware: str, backend: str, seconds: Decimal, day: date) -> Footprint:
        watts = self.value(EnergyFactor.Kind.GPU, hardware, day)
        grid = self.value(EnergyFactor.Kind.GRID, backend or ANY, day)
        if watts is None or grid is None:
            return Footprint(unestimated=1)
        energy = seconds / HOUR * watts
        return Footprint(energy, energy / THOUSAND * grid)


def _tokens_rows(rows, factors: Factors) -> Footprint:
    total = Footprint()
    for row in rows:
        total += factors.tokens(model=row["model"], tokens=row["input_tokens"] + row["output_tokens"], day=row["day"])
    return total


def _gpu_rows(rows, factors: Factors) -> Footprint:
    total = Footprint()
    for row in rows:
        total += factors.gpu(hardware=row["hardware"], backend=row["backend"], seconds=row["seconds"], day=row["day"])
    return total


_TOKEN_FIELDS = ("model", "day", "input_tokens", "output_tokens")
_GPU_FIELDS = ("hardware", "backend", "day", "seconds")


def run_footprint(run_id: int, *, factors: Factors | None = None) -> Footprint:
    """A run's model calls, from its ledger contribution (the ledger task's lag applies)."""
    rows = RunUsage.dangerously_unscoped_objects.filter(run_id=run_id, category=Category.LLM).exclude(model="")
    return _tokens_rows(rows.values(*_TOKEN_FIELDS), factors or Factors()).rounded()


def runs_footprint(run_ids, *, factors: Factors | None = None) -> dict[int, Footprint]:
    """Each run's footprint (runs with no ledger row: none). ``run_ids``: ids, or a
    queryset of them (one query with its subquery)."""
    factors = factors or Factors()
    rows = RunUsage.dangerously_unscoped_objects.filter(run_id__in=run_ids, category=Category.LLM).exclude(model="")
    by_run: dict[int, Footprint] = defaultdict(Footprint)
    for row in rows.values("run_id", *_TOKEN_FIELDS):
        by_run[row["run_id"]] += _tokens_rows([row], factors)
    return {run_id: footprint.rounded() for run_id, footprint in by_run.items()}


def job_footprint(job_id: int, *, factors: Factors | None = None) -> Footprint:
    """A GPU job's hours on its board and its backend's grid."""
    rows = ComputeUsage.dangerously_unscoped_objects.filter(job_id=job_id).values(*_GPU_FIELDS)
    return _gpu_rows(rows, factors or Factors()).rounded()


def experiment_footprint(*, experiment_id: int, run_ids, factors: Factors | None = None) -> Footprint:
    """An experiment's runs and its judge calls."""
    factors = factors or Factors()
    runs = sum(runs_footprint(run_ids, factors=factors).values(), Footprint())
    judge = EvaluationUsage.dangerously_unscoped_objects.filter(experiment_id=experiment_id)
    return (runs + _tokens_rows(judge.values(*_TOKEN_FIELDS), factors)).rounded()


def daily_footprint(*, organization, window, project=None) -> dict:
    """Energy and CO2e per day of ``window`` (a ``billing.spend.Window``), for charts:
    ``{"days", "energy_wh", "co2e_g", "total": Footprint}``; model calls and judge calls
    from the ledger, GPU jobs from their daily usage."""
    factors = Factors()
    # Per day and model: from the ledger's rollup by model for the whole organization.
    tokens = ledger_sums(
        organization_id=getattr(organization, "pk", organization),
        start=window.start,
        end=window.end,
        group_by=("day", "model"),
        measures=("input_tokens", "output_tokens"),
        where={"project_id": project.pk} if project is not None else {},
        categories=(Category.LLM.value, Category.EVALUATION.value),
        without_empty_model=True,
    )
    gpu = ComputeUsage.objects.filter(organization=organization, day__gte=window.start, day__lte=window.end)
    if project is not None:
        gpu = gpu.filter(project=project)
    per_day: dict[date, Footprint] = defaultdict(Footprint)
    for row in tokens:
        per_day[row["day"]] += _tokens_rows([row], factors)
    for row in gpu.values(*_GPU_FIELDS).order_by():
        per_day[row["day"]] += _gpu_rows([row], factors)
    days = window.days()
    total = sum(per_day.values(), Footprint())
    return {
        "days": days,
        "energy_wh": [per_day[day].energy_wh.quantize(PLACES) if day in per_day else Decimal(0) for day in days],
        "co2e_g": [per_day[day].co2e_g.quantize(PLACES) if day in per_day else Decimal(0) for day in days],
        "total": total.rounded(),
    }
