"""The price catalog: matching and priority, versions, organization overrides, drafts,
unpriced models, tool units, GPU hours, the seed and the audited admin."""

import json
import re
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db.models import ProtectedError
from django.utils import timezone

from agentops.errors import InvalidRequest
from agentops.models import AuditEvent
from agentops.scoping import dangerously_unscoped, organization_scope
from billing import seed
from billing.catalog import price_create, price_delete
from billing.models import Price
from billing.services import gpu_hourly_rate, price_for, prices_changed, step_cost, tool_cost
from runs.events import StepEvent
from runs.ingest import ingest
from runs.models import Step
from tests.agentops.factories import UserFactory

pytestmark = pytest.mark.django_db

SEEDED = seed.EFFECTIVE_FROM
LATER = datetime(2026, 9, 1, 12, 0, tzinfo=UTC)
MILLION_IN = {"input_tokens": 1_000_000, "cached_input_tokens": 0, "output_tokens": 0}


def _llm(pattern, match="exact", input_price="1", output_price="1", **fields) -> Price:
    fields.setdefault("effective_from", SEEDED)
    price = Price.objects.create(
        kind=Price.Kind.LLM,
        pattern=pattern,
        match=match,
        input_per_million=Decimal(input_price),
        output_per_million=Decimal(output_price),
        **fields,
    )
    prices_changed()
    return price


def _input_price(model, **kwargs) -> Decimal | None:
    return step_cost(model=model, **MILLION_IN, at=LATER, **kwargs).amount


# --- Matching and priority --------------------------------------------------------------


@pytest.mark.parametrize("model", ["mistral-large-2512", "mistral-large-latest", "Mistral-Large-2411 "])
def test_mistral_large_versions_and_aliases_find_the_prefix_price(model):
    assert _input_price(model) == Decimal("0.5")


def test_an_exact_name_wins_over_a_regex_whatever_the_priority():
    # Seeded: gpt-4o-2024-05-13 exact at 5.00, every other dated gpt-4o by regex at 2.50.
    Price.objects.filter(match="regex", pattern__startswith="gpt-4o").update(priority=100)
    prices_changed()
    assert _input_price("gpt-4o-2024-05-13") == Decimal("5")
    assert _input_price("gpt-4o-2024-08-06") == Decimal("2.5")


def test_an_exact_name_wins_over_a_prefix():
    _llm("mistral-large-2512", input_price="9")
    assert _input_price("mistral-large-2512") == Decimal("9")
    assert _input_price("mistral-large-2411") == Decimal("0.5")


def test_a_prefix_wins_over_a_regex_and_priority_orders_the_same_match():
    _llm(r"acme-.*", match="regex", input_price="1", priority=50)
    _llm("acme-", match="prefix", input_price="2")
    assert _input_price("acme-chat") == Decimal("2")
    _llm("acme-c", match="prefix", input_price="3")
    assert _input_price("acme-chat") == Decimal("3"), "the longer prefix wins at equal priority"
    _llm("acme", match="prefix", input_price="4", priority=10)
    assert _input_price("acme-chat") == Decimal("4"), "a higher priority wins over a longer prefix"


def test_a_better_match_not_yet_in_effect_leaves_the_one_in_effect():
    # An exact price from October ranks above the prefix in effect since the seed: before
    # October the prefix still prices the call, from October the exact name does.
    october = datetime(2026, 10, 1, tzinfo=UTC)
    exact = _llm("acme-chat", input_price="7", effective_from=october, priority=-5)
    prefix = _llm("acme-", match="prefix", input_price="2", priority=50)
    before = step_cost(model="acme-chat", **MILLION_IN, at=october - timedelta(seconds=1))
    after = step_cost(model="acme-chat", **MILLION_IN, at=october)
    assert (before.amount, before.price_id) == (Decimal("2"), prefix.pk)
    assert (after.amount, after.price_id) == (Decimal("7"), exact.pk)


def test_the_longest_seeded_prefix_wins():
    assert _input_price("gpt-4.1-mini-2025-04-14") == Decimal("0.4")
    assert _input_price("gpt-4.1-2025-04-14") == Decimal("2")
    assert _input_price("claude-opus-4-5-20251101") == Decimal("5")
    assert _input_price("claude-opus-4-1-20250805") == Decimal("15")


def test_cached_input_tokens_cost_the_cached_rate():
    cost = step_cost(model="gpt-4o", input_tokens=2_000_000, cached_input_tokens=1_000_000, output_tokens=0, at=LATER)
    assert cost.amount == Decimal("3.750000000")  # 1M at 2.50 + 1M cached at 1.25


# --- Versions ---------------------------------------------------------------------------


def test_a_new_version_applies_from_its_effective_time_and_the_old_one_stays():
    old = price_for(model="mistral-small-2506", at=LATER)
    switch = datetime(2026, 10, 1, 0, 0, tzinfo=UTC)
    new = _llm("mistral-small-", match="prefix", input_price="0.20", provider="mistral_ai", effective_from=switch)

    before = step_cost(model="mistral-small-2506", **MILLION_IN, at=switch - timedelta(microseconds=1))
    at_switch = step_cost(model="mistral-small-2506", **MILLION_IN, at=switch)
    after = step_cost(model="mistral-small-2506", **MILLION_IN, at=switch + timedelta(seconds=1))

    assert (before.amount, before.price_id) == (Decimal("0.15"), old.id)
    assert (at_switch.amount, at_switch.price_id) == (Decimal("0.2"), new.pk)
    assert (after.amount, after.price_id) == (Decimal("0.2"), new.pk)
    assert Price.objects.filter(pk=old.id).exists()


def test_ingested_steps_store_the_version_in_effect_at_their_start(tenant):
    switch = datetime(2026, 10, 1, 0, 0, tzinfo=UTC)
    new = _llm("mistral-small-", match="prefix", input_price="0.20", provider="mistral_ai", effective_from=switch)
    steps = [
        StepEvent(
            trace_id="t",
            span_id=span_id,
            kind="llm",
            model="mistral-small-2506",
            input_tokens=1_000_000,
            started_at=started_at,
            ended_at=started_at + timedelta(seconds=1),
        )
        for span_id, started_at in [("before", switch - timedelta(seconds=1)), ("after", switch)]
    ]
    with organization_scope(tenant.organization):
        ingest(project=tenant.project, steps=steps, announce=False)
        stored = {step.span_id: step for step in Step.objects.all()}
    assert stored["before"].cost == Decimal("0.15") and stored["before"].price_id != new.pk
    assert stored["after"].cost == Decimal("0.2") and stored["after"].price_id == new.pk


def test_a_step_older_than_every_version_takes_the_first_one():
    cost = step_cost(model="mistral-large-2512", **MILLION_IN, at=SEEDED - timedelta(days=30))
    assert cost.amount == Decimal("0.5") and cost.price_id is not None


# --- Organization overrides -------------------------------------------------------------


def test_an_organizations_negotiated_price_wins_for_it_only(tenant, other_tenant):
    negotiated = _llm(
        "mistral-", match="prefix", input_price="0.25", organization=tenant.organization, effective_from=SEEDED
    )
    mine = step_cost(model="mistral-large-2512", **MILLION_IN, at=LATER, organization_id=tenant.organization.pk)
    theirs = step_cost(model="mistral-large-2512", **MILLION_IN, at=LATER, organization_id=other_tenant.organization.pk)
    public = step_cost(model="mistral-large-2512", **MILLION_IN, at=LATER)
    # A broad negotiated prefix wins over the public exact and prefix prices.
    assert (mine.amount, mine.price_id) == (Decimal("0.25"), negotiated.pk)
    assert theirs.amount == public.amount == Decimal("0.5")


def test_before_the_negotiated_price_starts_the_public_one_applies(tenant):
    _llm("mistral-large-", match="prefix", input_price="0.25", organization=tenant.organization, effective_from=LATER)
    org = tenant.organization.pk
    assert _input_price_at("mistral-large-2512", LATER - timedelta(seconds=1), org) == Decimal("0.5")
    assert _input_price_at("mistral-large-2512", LATER, org) == Decimal("0.25")


def _input_price_at(model, at, organization_id):
    return step_cost(model=model, **MILLION_IN, at=at, organization_id=organization_id).amount


def test_a_model_priced_only_for_an_organization_is_unpriced_for_others(tenant, other_tenant):
    _llm("in-house-llm", organization=tenant.organization, effective_from=SEEDED)
    assert step_cost(model="in-house-llm", **MILLION_IN, organization_id=tenant.organization.pk).amount == 1
    assert step_cost(model="in-house-llm", **MILLION_IN, organization_id=other_tenant.organization.pk).amount is None
    assert step_cost(model="in-house-llm", **MILLION_IN).amount is None


# --- Unpriced models and drafts ---------------------------------------------------------


@pytest.mark.parametrize("model", ["mystery-model-9", "mistral-medium", "", "tts"])
def test_unknown_models_are_unpriced_never_zero(model):
    assert step_cost(model=model, **MILLION_IN, at=LATER) == step_cost(model=model, **MILLION_IN)
    cost = step_cost(model=model, **MILLION_IN, at=LATER)
    assert cost.amount is None and cost.price_id is None


def test_drafts_are_never_used_for_costing(tenant):
    _llm("mystery-model-9", status=Price.Status.DRAFT, effective_from=SEEDED)
    _llm("mistral-large-", match="prefix", input_price="7", status=Price.Status.DRAFT, effective_from=SEEDED)
    _llm("mistral-", match="prefix", organization=tenant.organization, status=Price.Status.DRAFT)
    org = tenant.organization.pk
    assert step_cost(model="mystery-model-9", **MILLION_IN, at=LATER).amount is None
    assert _input_price_at("mistral-large-2512", LATER, org) == Decimal("0.5")
    assert tool_cost(tool_name="web_search", organization_id=org).amount == Decimal("0.01")


def test_the_cache_keeps_a_copy_until_prices_changed():
    assert _input_price("brand-new-model") is None
    Price.objects.create(pattern="brand-new-model", input_per_million=1, output_per_million=1, effective_from=SEEDED)
    assert _input_price("brand-new-model") is None
    prices_changed()
    assert _input_price("brand-new-model") == 1


# --- Tool units and GPU hours -----------------------------------------------------------


def test_tools_are_priced_by_their_unit():
    assert tool_cost(tool_name="tts", characters=1_000, calls=3).amount == Decimal("0.015")
    assert tool_cost(tool_name="web_search", calls=3, characters=500).amount == Decimal("0.03")
    assert tool_cost(tool_name="transcribe", seconds=60.0).amount == Decimal("0.006")
    assert tool_cost(tool_name="web_search").price_id is not None


def test_a_tools_characters_are_counted_only_when_its_price_is_per_character():
    counted = []

    def count() -> int:
        counted.append(1)
        return 1_000

    assert tool_cost(tool_name="tts", characters=count).amount == Decimal("0.015")
    assert counted == [1]
    assert tool_cost(tool_name="web_search", characters=count).amount == Decimal("0.01")
    assert tool_cost(tool_name="lookup_order", characters=count).amount is None
    assert counted == [1]  # a tool priced per call, and one without a price, never count


def test_a_tool_without_a_price_is_free_not_unpriced():
    assert tool_cost(tool_name="lookup_order", calls=5) == tool_cost(tool_name="gpt-4o")
    assert tool_cost(tool_name="lookup_order").amount is None


def test_an_organization_negotiates_a_tool_price(tenant):
    negotiated = Price.objects.create(
        kind=Price.Kind.TOOL,
        pattern="web_search",
        unit=Price.Unit.CALL,
        unit_price=Decimal("0.002"),
        organization=tenant.organization,
        effective_from=SEEDED,
    )
    prices_changed()
    cost = tool_cost(tool_name="web_search", calls=10, organization_id=tenant.organization.pk)
    assert (cost.amount, cost.price_id) == (Decimal("0.02"), negotiated.pk)
    assert tool_cost(tool_name="web_search", calls=10).amount == Decimal("0.1")


def test_gpu_rates_prefer_the_backends_own_price_then_any_backend():
    assert gpu_hourly_rate(hardware="h100", backend="huggingface").hourly == Decimal("4.5")
    assert gpu_hourly_rate(hardware="H100", backend="HuggingFace").hourly == Decimal("4.5")
    assert gpu_hourly_rate(hardware="h100").hourly == Decimal("4")
    assert gpu_hourly_rate(hardware="h100", backend="modal").hourly == Decimal("4")
    assert gpu_hourly_rate(hardware="a10g", backend="huggingface").hourly == Decimal("1")
    assert gpu_hourly_rate(hardware="tpu-v5e") is None


def test_an_organization_negotiates_a_gpu_rate(tenant):
    Price.objects.create(kind=Price.Kind.GPU, pattern="a100", hourly=Decimal("1.75"), organization=tenant.organization)
    prices_changed()
    assert gpu_hourly_rate(hardware="a100", organization_id=tenant.organization.pk).hourly == Decimal("1.75")
    assert gpu_hourly_rate(hardware="a100").hourly == Decimal("3")


# --- The seed ---------------------------------------------------------------------------


def test_every_seeded_price_says_its_source_and_is_usable():
    seeded = list(Price.objects.all())
    assert {price.kind for price in seeded} == {"llm", "tool", "gpu"}
    for price in seeded:
        assert price.source and price.organization_id is None and price.status == "published"
        if price.match == "regex":
            re.compile(price.pattern)
    hardware = {price.pattern for price in seeded if price.kind == "gpu"}
    assert hardware == {"cpu-basic", "t4", "l4", "a10g", "a100", "h100", "h200"}
    outside_mistral = [p for p in seeded if p.kind == "llm" and p.provider in {"openai", "anthropic", "google"}]
    assert outside_mistral and all("unverified" in p.source for p in outside_mistral)


def test_seeding_twice_adds_nothing():
    count = Price.objects.count()
    seed.seed_catalog(Price)
    assert Price.objects.count() == count


# --- The admin: versions, drafts and the audit log --------------------------------------


@pytest.fixture
def staff():
    return UserFactory(is_staff=True, is_superuser=True)


def _form(price: Price, **changes) -> dict:
    data = {
        "kind": price.kind,
        "pattern": price.pattern,
        "match": price.match,
        "priority": price.priority,
        "provider": price.provider,
        "organization": price.organization_id or "",
        "input_per_million": price.input_per_million or "",
        "cached_input_per_million": price.cached_input_per_million or "",
        "cache_write_per_million": price.cache_write_per_million or "",
        "output_per_million": price.output_per_million or "",
        "reasoning_output_per_million": price.reasoning_output_per_million or "",
        "tiers": json.dumps(price.tiers),
        "unit": price.unit,
        "unit_price": price.unit_price or "",
        "hourly": price.hourly or "",
        "currency": price.currency,
        "source": price.source,
        "effective_from_0": timezone.localtime(price.effective_from).strftime("%Y-%m-%d"),
        "effective_from_1": timezone.localtime(price.effective_from).strftime("%H:%M:%S"),
        "status": price.status,
    }
    # The browser sends the initial value of a field with a callable default back.
    data["initial-effective_from_0"], data["initial-effective_from_1"] = (
        data["effective_from_0"],
        data["effective_from_1"],
    )
    data.update(changes)
    return data


def _audit(action):
    with dangerously_unscoped("tests read every organization's audit log"):
        return list(AuditEvent.objects.filter(action=action))


def test_the_price_changelist_filters_by_kind_provider_organization_and_status(staff, tenant, client):
    _llm("acme-", match="prefix", organization=tenant.organization)
    client.force_login(staff)
    assert client.get("/admin/billing/price/").status_code == 200
    response = client.get(
        f"/admin/billing/price/?kind=gpu&status=published&organization__id__exact={tenant.organization.pk}"
    )
    assert response.status_code == 200
    assert client.get("/admin/billing/price/?provider=openai&q=gpt").status_code == 200


def test_editing_a_published_price_adds_a_version_and_leaves_the_old_one(staff, tenant, client):
    old = _llm(
        "acme-chat", input_price="1", organization=tenant.organization, effective_from=SEEDED, source="contract 1"
    )
    client.force_login(staff)
    started = timezone.now()
    response = client.post(
        f"/admin/billing/price/{old.pk}/change/", _form(old, input_per_million="0.8", source="contract 2")
    )
    assert response.status_code == 302, response.content.decode()[:2000]

    old.refresh_from_db()
    assert (old.input_per_million, old.source, old.effective_from) == (Decimal("1"), "contract 1", SEEDED)
    new = Price.objects.exclude(pk=old.pk).get(pattern="acme-chat")
    assert new.input_per_million == Decimal("0.8") and new.effective_from >= started and new.created_by == staff
    cost = step_cost(model="acme-chat", **MILLION_IN, organization_id=tenant.organization.pk)
    assert (cost.amount, cost.price_id) == (Decimal("0.8"), new.pk), "the admin refreshed the cache"

    (event,) = _audit("price.version")
    assert event.organization_id == tenant.organization.pk and event.actor_id == staff.pk
    assert event.target_id == str(new.pk) and event.data["previous_id"] == old.pk
    assert event.data["changes"]["input_per_million"] == ["1.000000", "0.8"]
    assert event.data["changes"]["source"] == ["contract 1", "contract 2"]


def test_a_new_version_may_be_given_a_future_effective_time(staff, client):
    old = Price.objects.get(pattern="mistral-large-", organization=None)
    client.force_login(staff)
    response = client.post(
        f"/admin/billing/price/{old.pk}/change/",
        _form(old, input_per_million="0.40", effective_from_0="2026-12-01", effective_from_1="00:00:00"),
    )
    assert response.status_code == 302
    switch = datetime(2026, 12, 1, tzinfo=UTC)
    assert Price.objects.filter(pattern="mistral-large-").count() == 2
    assert step_cost(model="mistral-large-2512", **MILLION_IN, at=switch - timedelta(seconds=1)).amount == Decimal(
        "0.5"
    )
    assert step_cost(model="mistral-large-2512", **MILLION_IN, at=switch).amount == Decimal("0.4")
    # A public price's change lands in the platform-wide audit log (no organization).
    new = Price.objects.latest("pk")
    with dangerously_unscoped("the test reads the platform-wide audit log"):
        event = AuditEvent.objects.get(action="price.version", target_id=str(new.pk))
    assert event.organization_id is None and event.actor_id == staff.pk
    assert event.data["changes"]["input_per_million"] == ["0.500000", "0.40"]


def test_saving_without_changes_adds_no_version(staff, client):
    old = Price.objects.get(pattern="gpt-4.1-mini")
    client.force_login(staff)
    assert client.post(f"/admin/billing/price/{old.pk}/change/", _form(old)).status_code == 302
    assert Price.objects.filter(pattern="gpt-4.1-mini").count() == 1


def test_a_draft_is_edited_in_place_and_audited(staff, tenant, client):
    draft = _llm("acme-chat", organization=tenant.organization, status=Price.Status.DRAFT)
    client.force_login(staff)
    response = client.post(f"/admin/billing/price/{draft.pk}/change/", _form(draft, output_per_million="3"))
    assert response.status_code == 302
    draft.refresh_from_db()
    assert draft.output_per_million == Decimal("3") and Price.objects.filter(pattern="acme-chat").count() == 1
    (event,) = _audit("price.change")
    assert event.target_id == str(draft.pk)


def test_adding_and_deleting_a_negotiated_price_are_audited(staff, tenant, client):
    client.force_login(staff)
    template = Price(kind="tool", pattern="tts", match="prefix", organization=tenant.organization, unit="character")
    response = client.post("/admin/billing/price/add/", _form(template, unit_price="0.00001", source="contract 7"))
    assert response.status_code == 302, response.content.decode()[:2000]
    created = Price.objects.get(organization=tenant.organization)
    assert created.created_by == staff
    assert tool_cost(tool_name="tts", characters=1000, organization_id=tenant.organization.pk).amount == Decimal("0.01")
    (added,) = _audit("price.create")
    assert added.organization_id == tenant.organization.pk and added.data["unit_price"] == "0.00001"

    response = client.post(f"/admin/billing/price/{created.pk}/delete/", {"post": "yes"})
    assert response.status_code == 302
    assert not Price.objects.filter(pk=created.pk).exists()
    (deleted,) = _audit("price.delete")
    assert deleted.target_id == str(created.pk)
    assert tool_cost(tool_name="tts", characters=1000, organization_id=tenant.organization.pk).amount == Decimal(
        "0.015"
    )


def test_the_form_refuses_an_llm_price_without_rates_and_a_broken_regex(staff, client):
    client.force_login(staff)
    template = Price(kind="llm", pattern="acme-(", match="regex")
    response = client.post("/admin/billing/price/add/", _form(template))
    assert response.status_code == 200
    body = response.content.decode()
    assert "Not a valid regular expression" in body and "Required for a LLM tokens price" in body
    assert not Price.objects.filter(pattern="acme-(").exists()


def test_a_step_older_than_the_first_recorded_price_is_priced_with_it(db):
    # The seeded prices take effect on 2026-07-02: a trace from June was "unpriced".
    cost = step_cost(
        model="mistral-large-2512",
        input_tokens=1_000_000,
        cached_input_tokens=0,
        output_tokens=0,
        at=datetime(2026, 6, 1, tzinfo=UTC),
    )
    assert cost.amount == Decimal("0.500000000") and cost.price_id is not None


def test_price_patterns_match_whatever_their_case(db):
    from billing.models import Price
    from billing.services import prices_changed

    Price.objects.create(
        pattern="Acme-Chat-", match="prefix", input_per_million=Decimal("1"), output_per_million=Decimal("1")
    )
    prices_changed()
    cost = step_cost(model="acme-chat-7", input_tokens=1_000_000, cached_input_tokens=0, output_tokens=0)
    assert cost.amount == Decimal("1.000000000")


def test_a_price_with_a_tier_below_zero_is_refused_by_the_admin_and_the_catalog(staff, client):
    old = Price.objects.get(pattern="gpt-4.1-mini")
    client.force_login(staff)
    bad_tiers = json.dumps([{"above_input_tokens": -1, "input_per_million": "2"}])
    response = client.post(f"/admin/billing/price/{old.pk}/change/", _form(old, tiers=bad_tiers))
    assert response.status_code == 200, "the form is shown again with the error"
    assert "above_input_tokens must be a whole number from 0" in response.content.decode()
    assert Price.objects.filter(pattern="gpt-4.1-mini").count() == 1
    with pytest.raises(InvalidRequest, match="above_input_tokens must be a whole number from 0"):
        price_create(price=Price(pattern="acme", tiers=[{"above_input_tokens": -5}]), actor=staff)
    assert not Price.objects.filter(pattern="acme").exists()


def test_part_rates_and_tiers_are_versioned_like_any_rate(staff, client):
    old = Price.objects.get(pattern="gpt-4.1-mini")
    client.force_login(staff)
    tiers = json.dumps([{"above_input_tokens": 128000, "input_per_million": "0.80"}])
    changed = _form(old, cache_write_per_million="0.50", reasoning_output_per_million="2", tiers=tiers)
    assert client.post(f"/admin/billing/price/{old.pk}/change/", changed).status_code == 302
    new = Price.objects.filter(pattern="gpt-4.1-mini").latest("pk")
    assert new.pk != old.pk
    assert (new.cache_write_per_million, new.reasoning_output_per_million) == (Decimal("0.5"), Decimal("2"))
    assert new.tiers == [{"above_input_tokens": 128000, "input_per_million": "0.80"}]
    (event,) = _audit("price.version")
    assert event.data["changes"]["cache_write_per_million"] == [None, "0.50"]


def test_a_price_that_priced_steps_is_not_deleted(staff, tenant, client):
    """Steps name their price without a database constraint (docs/performance.md): Django
    refuses the deletion (PROTECT), in the admin and in the service alike."""
    price = _llm("acme-chat", organization=tenant.organization, input_price="2")
    step = StepEvent(trace_id="t-priced", span_id="s1", kind="llm", model="acme-chat", input_tokens=1_000_000)
    with organization_scope(tenant.organization):
        ingest(project=tenant.project, steps=[step], announce=False)
        assert Step.objects.get().price_id == price.pk
    client.force_login(staff)
    response = client.post(f"/admin/billing/price/{price.pk}/delete/", {"post": "yes"})
    assert response.status_code == 200 and "protected" in response.content.decode()
    with pytest.raises(ProtectedError):
        price_delete(price=price, actor=staff)
    assert Price.objects.filter(pk=price.pk).exists() and not _audit("price.delete")
    with organization_scope(tenant.organization):
        assert Step.objects.get().price_id == price.pk
