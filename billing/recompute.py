"""Recompute: price the model calls of a time range again with one price version
(published or draft), preview the difference per organization and model, then apply it
as an audited ``CostRevision`` that keeps every old amount in ``StepCostChange``.

The price applies to every LLM step of the range whose model it matches (by its own
pattern, as the catalog matches it) and, for an organization's negotiated price, only to
that organization's steps. Preview and apply share one computation, so what staff saw
is what is applied (as long as the steps did not change in between).
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Iterator
from datetime import datetime
from decimal import Decimal

from django.db import transaction

from agentops.errors import InvalidRequest
from agentops.models import Organization
from agentops.scoping import dangerously_unscoped
from agentops.services.audit import audit_record
from billing import services
from billing.ledger import ledger_mark
from billing.models import CostRevision, Price, StepCostChange
from billing.usage import StepRepricing, usage_source

_BATCH = 2000


def _check(price: Price, starts_at: datetime, ends_at: datetime) -> None:
    if price.kind != Price.Kind.LLM:
        raise InvalidRequest("Only LLM token prices can be recomputed: tool and GPU costs are not on steps.")
    if price.input_per_million is None or price.output_per_million is None:
        raise InvalidRequest("This price has no input or output rate.")
    if ends_at <= starts_at:
        raise InvalidRequest("The end of the time range must be after its start.")


def _repricings(price: Price, starts_at: datetime, ends_at: datetime, *, lock: bool = False) -> Iterator[StepRepricing]:
    """Every LLM step of the range the price matches, with its new cost, from the usage
    source (runs' steps); none without one."""
    source = usage_source()
    if source is None:
        return iter(())
    return source.repricings(
        organization_id=price.organization_id,
        starts_at=starts_at,
        ends_at=ends_at,
        matches=lambda model: services._matches(price, model),
        cost=lambda **tokens: services.tokens_cost(price=price, **tokens),
        lock=lock,
    )


def _summarize(repricings) -> list[dict]:
    totals: dict[tuple[int, str], dict] = defaultdict(
        lambda: {"steps": 0, "old_total": Decimal(0), "new_total": Decimal(0)}
    )
    for item in repricings:
        row = totals[(item.organization_id, item.model)]
        row["steps"] += 1
        row["old_total"] += item.old_cost or Decimal(0)
        row["new_total"] += item.new_cost
    slugs = dict(Organization.objects.filter(pk__in={key[0] for key in totals}).values_list("pk", "slug"))
    rows = [
        {
            "organization_id": organization_id,
            "organization": slugs.get(organization_id, str(organization_id)),
            "model": model,
            **row,
            "difference": row["new_total"] - row["old_total"],
        }
        for (organization_id, model), row in totals.items()
    ]
    return sorted(rows, key=lambda row: (row["organization"], row["model"]))


def preview_recompute(price: Price, starts_at: datetime, ends_at: datetime) -> list[dict]:
    """What pricing the range's steps with ``price`` would change, per organization and
    model: steps, old total, new total, difference. Writes nothing."""
    _check(price, starts_at, ends_at)
    with dangerously_unscoped("staff recompute: steps of every organization"):
        return _summarize(_repricings(price, starts_at, ends_at))


def _summary_json(rows: list[dict]) -> list[dict]:
    return [
        {
            **row,
            "old_total": str(row["old_total"]),
            "new_total": str(row["new_total"]),
            "difference": str(row["difference"]),
        }
        for row in rows
    ]


def apply_recompute(
    *, price: Price, starts_at: datetime, ends_at: datetime, actor, ip: str | None = None
) -> CostRevision:
    """Price the range's steps with ``price`` (see ``preview_recompute``): keep each
    step's old cost and price in a ``StepCostChange``, update the steps and their runs'
    totals, mark the runs for the ledger, and record it in each organization's audit log.
    One transaction; the steps are locked while they are repriced."""
    _check(price, starts_at, ends_at)
    source = usage_source()
    with transaction.atomic(), dangerously_unscoped("staff recompute: steps of every organization"):
        repricings = list(_repricings(price, starts_at, ends_at, lock=True))
        rows = _summarize(repricings)
        revision = CostRevision.objects.create(
            price=price,
            starts_at=starts_at,
            ends_at=ends_at,
            summary={"rows": _summary_json(rows), "steps": len(repricings)},
            created_by=actor,
        )
        for offset in range(0, len(repricings), _BATCH):
            batch = repricings[offset : offset + _BATCH]
            StepCostChange.objects.bulk_create(
                [
                    StepCostChange(
                        revision=revision,
                        step_id=item.step_id,
                        run_id=item.run_id,
                        organization_id=item.organization_id,
                        old_cost=item.old_cost,
                        new_cost=item.new_cost,
                        old_price_id=item.old_price_id,
                        new_price_id=price.pk,
                    )
                    for item in batch
                ]
            )
            source.reprice(batch, price_id=price.pk)
        runs_by_organization: dict[int, set[int]] = defaultdict(set)
        for item in repricings:
            runs_by_organization[item.organization_id].add(item.run_id)
        all_runs = sorted(set().union(*runs_by_organization.values())) if runs_by_organization else []
        for offset in range(0, len(all_runs), _BATCH):
            source.recompute_totals(all_runs[offset : offset + _BATCH])
        organizations = Organization.objects.in_bulk(list(runs_by_organization))
        for organization_id, run_ids in runs_by_organization.items():
            ledger_mark(organization_id=organization_id, run_ids=sorted(run_ids))
            organization_rows = [row for row in rows if row["organization_id"] == organization_id]
            audit_record(
                organization=organizations[organization_id],
                actor=actor,
                action="billing.recompute",
                target=revision,
                data={
                    "price_id": price.pk,
                    "price": str(price),
                    "starts_at": starts_at.isoformat(),
                    "ends_at": ends_at.isoformat(),
                    "steps": sum(row["steps"] for row in organization_rows),
                    "old_total": str(sum((row["old_total"] for row in organization_rows), Decimal(0))),
                    "new_total": str(sum((row["new_total"] for row in organization_rows), Decimal(0))),
                    "by_model": _summary_json(organization_rows),
                },
                ip=ip,
            )
    return revision
