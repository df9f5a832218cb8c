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
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal

from django.db import connection, transaction

from agentops.errors import InvalidRequest
from agentops.models import Organization, Project
from agentops.scoping import dangerously_unscoped
from agentops.services.audit import audit_record
from billing import services
from billing.ledger import ledger_mark
from billing.models import CostRevision, Price, StepCostChange
from runs.models import Step
from runs.services.ingest import recompute_run_totals

_BATCH = 2000


@dataclass(frozen=True)
class StepRepricing:
    step_id: int
    run_id: int
    organization_id: int
    model: str
    old_cost: Decimal | None
    new_cost: Decimal
    old_price_id: int | None


def _check(price: Price, starts_at: datetime, ends_at: datetime) -> None:
    if price.kind != Price.Kind.LLM:
        raise InvalidRequest("Only LLM token prices can be recomputed: tool and GPU costs are not on steps.")
    if price.input_per_million is None or price.output_per_million is None:
        raise InvalidRequest("This price has no input or output rate.")
    if ends_at <= starts_at:
        raise InvalidRequest("The end of the time range must be after its start.")


def _repricings(price: Price, starts_at: datetime, ends_at: datetime, *, lock: bool = False) -> Iterator[StepRepricing]:
    """Every LLM step of the range the price matches, with its new cost. Read project by
    project so each query is a range of the (project, started_at) index."""
    projects = Project.objects.order_by("pk")
    if price.organization_id:
        projects = projects.filter(organization_id=price.organization_id)
    for project_id in projects.values_list("pk", flat=True):
        steps = Step.objects.filter(
            project_id=project_id, started_at__gte=starts_at, started_at__lt=ends_at, kind=Step.Kind.LLM
        )
        models = [
            model
            for model in steps.order_by().values_list("model", flat=True).distinct()
            if model and services._matches(price, model.strip().lower())
        ]
        if not models:
            continue
        matched = steps.filter(model__in=models).order_by("pk")
        if lock:
            matched = matched.select_for_update(of=("self",))
        for row in matched.values_list(
            "pk",
            "run_id",
            "organization_id",
            "model",
            "input_tokens",
            "cached_input_tokens",
            "output_tokens",
            "cost",
            "price_id",
        ).iterator(chunk_size=_BATCH):
            step_id, run_id, organization_id, model, input_tokens, cached, output_tokens, cost, price_id = row
            yield StepRepricing(
                step_id=step_id,
                run_id=run_id,
                organization_id=organization_id,
                model=model,
                old_cost=cost,
                new_cost=services.tokens_cost(
                    price=price, input_tokens=input_tokens, cached_input_tokens=cached, output_tokens=output_tokens
                ),
                old_price_id=price_id,
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
            _update_steps(batch, price.pk)
        runs_by_organization: dict[int, set[int]] = defaultdict(set)
        for item in repricings:
            runs_by_organization[item.organization_id].add(item.run_id)
        all_runs = sorted(set().union(*runs_by_organization.values())) if runs_by_organization else []
        for offset in range(0, len(all_runs), _BATCH):
            recompute_run_totals(all_runs[offset : offset + _BATCH])
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


def _update_steps(batch: list[StepRepricing], price_id: int) -> None:
    """Set the new cost and price of a batch of steps in one statement."""
    if not batch:
        return
    with connection.cursor() as cursor:
        cursor.execute(
            """
            UPDATE runs_step AS step
               SET cost = new.cost, price_id = %s, unpriced = false
              FROM unnest(%s::bigint[], %s::numeric[]) AS new(id, cost)
             WHERE step.id = new.id
            """,
            [price_id, [item.step_id for item in batch], [item.new_cost for item in batch]],
        )
