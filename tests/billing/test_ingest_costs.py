"""What ingest() does for billing: each step costed with the organization's price when
it has one, tools priced by their unit, the sending API key recorded, and every batch
marked for the ledger (no caller has to remember it)."""

from datetime import UTC, datetime
from decimal import Decimal

from agentops.scoping import organization_scope
from billing.catalog import price_create
from billing.models import Price, UsageDaily
from runs.events import StepEvent
from runs.ingest import ingest
from runs.models import Run, Step
from tests.billing.test_ledger import drain

AT = datetime(2026, 11, 2, 12, tzinfo=UTC)


def test_an_organization_price_wins_for_its_steps_only(tenant, other_tenant):
    price_create(
        price=Price(
            kind=Price.Kind.LLM,
            pattern="mistral-large-",
            match=Price.Match.PREFIX,
            organization=tenant.organization,
            input_per_million=Decimal("0.25"),
            output_per_million=Decimal("1.00"),
            effective_from=datetime(2026, 1, 1, tzinfo=UTC),
        ),
        actor=None,
    )
    step = dict(span_id="s", kind="llm", model="mistral-large-2512", input_tokens=1_000_000, started_at=AT)
    for who in (tenant, other_tenant):
        with organization_scope(who.organization):
            ingest(project=who.project, steps=[StepEvent(trace_id="t", **step)])
    with organization_scope(tenant.organization):
        ours = Step.objects.get()
    with organization_scope(other_tenant.organization):
        theirs = Step.objects.get()
    assert ours.cost == Decimal("0.25") and ours.price.organization_id == tenant.organization.pk
    assert theirs.cost == Decimal("0.5") and theirs.price.organization_id is None


def test_a_tool_priced_per_character_costs_its_input_length(tenant):
    with organization_scope(tenant.organization):
        ingest(
            project=tenant.project,
            steps=[
                StepEvent(
                    trace_id="t", span_id="a", kind="tool", name="tts", input={"text": "x" * 1000}, started_at=AT
                ),
                StepEvent(trace_id="t", span_id="b", kind="tool", name="calculator", input={"e": "1+1"}, started_at=AT),
            ],
        )
        steps = {step.span_id: step for step in Step.objects.all()}
        run = Run.objects.get()
    assert steps["a"].cost == Decimal("0.015") and steps["a"].price.unit == "character"
    assert steps["b"].cost is None and not steps["b"].unpriced, "a tool without a price is free, not unpriced"
    assert run.unpriced_step_count == 0 and run.total_cost == Decimal("0.015")


def test_the_batch_api_records_its_key_and_the_ledger_follows_without_a_manual_mark(tenant, make_api_key, client):
    key, raw = make_api_key(tenant.project, ("ingest",))
    response = client.post(
        "/api/v1/ingest",
        {
            "events": [
                {"type": "run", "id": "r1", "status": "succeeded"},
                {
                    "type": "step",
                    "id": "llm-1",
                    "run_id": "r1",
                    "kind": "llm",
                    "model": "mistral-large-2512",
                    "input_tokens": 2_000_000,
                    "started_at": "2026-11-02T12:00:00Z",
                },
            ]
        },
        content_type="application/json",
        HTTP_AUTHORIZATION=f"Bearer {raw}",
    )
    assert response.status_code == 207, response.content
    with organization_scope(tenant.organization):
        assert Run.objects.get(trace_id="r1").api_key_id == key.pk
    drain()
    with organization_scope(tenant.organization):
        (row,) = UsageDaily.objects.all()
    assert row.api_key_id == key.pk and row.cost == Decimal("1.000000000") and str(row.day) == "2026-11-02"
