"""Correctness review of the trace store: each test pins one bug that was found and fixed
(redaction, transcript, hostile values through ingest(), cost, run status, concurrency)."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.db import connection

from agentops.scoping import organization_scope
from billing.services import step_cost
from runs import selectors
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.ingest import write as ingest_write
from runs.models import Message, Run, Step, ToolCall
from runs.services.redaction import REPLACEMENT, Redactor
from runs.services.settings import ingest_settings_update

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


# --- Redaction ------------------------------------------------------------------------


def test_custom_pattern_with_an_inline_flag_does_not_stop_ingestion(tenant):
    """ "(?i)secret" compiles alone (so the settings accept it) but not inside the
    combined alternation: every ingest of the project used to fail with re.error."""
    project = tenant.project
    with organization_scope(project.organization):
        ingest_settings_update(
            project=project, actor=tenant.owner, redact=["email"], custom_patterns=["(?i)secret"], retention_days=None
        )
        ingest(
            project=project,
            steps=[StepEvent(trace_id="t", span_id="r", input="SECRET sauce for bob@example.com")],
            announce=False,
        )
        step = Step.objects.get(project=project)
    assert step.input == f"{REPLACEMENT} sauce for {REPLACEMENT}"


def test_custom_patterns_keep_their_own_group_numbers():
    # Combined into one alternation, the second pattern's \1 pointed at the first one's group.
    redactor = Redactor([], [r"(a)\1", r"(b)\1"])
    assert redactor.apply("aa bb") == f"{REPLACEMENT} {REPLACEMENT}"


def test_a_pattern_that_can_match_empty_text_does_not_salt_every_string():
    redactor = Redactor([], ["x*"])
    assert redactor.apply("hello") == "hello"
    assert redactor.apply("a xx b") == f"a {REPLACEMENT} b"


def test_redaction_covers_object_keys():
    # Memory and tool results are often keyed by the customer's e-mail address.
    redactor = Redactor(["email"], [])
    assert redactor.apply({"alice@example.com": {"plan": "pro"}}) == {REPLACEMENT: {"plan": "pro"}}


@pytest.mark.parametrize(
    "text",
    [
        "2026-11-20",
        "at 2026-11-20 12:00:00 UTC",
        "20.11.2026 12:00",
        "epoch 1732104000",
        "order 12345678",
        "id 123e4567-e89b-12d3-a456-426614174000",
        "host 192.168.100.200",
        "https://example.com/orders/987654321/items",
        "ts 1732104000127",  # milliseconds; passes the Luhn check
    ],
)
def test_phone_and_card_rules_leave_dates_timestamps_and_ids_alone(text):
    assert Redactor(["phone", "card"], []).apply(text) == text


@pytest.mark.parametrize(
    "phone",
    [
        "+33 6 12 34 56 78",
        "+14155552671",
        "(555) 123-4567",
        "555-123-4567",
        "415.555.2671",
        "06 12 34 56 78",
        "0612345678",
        "4155552671",
    ],
)
def test_phone_rule_still_finds_phone_numbers(phone):
    assert Redactor(["phone"], []).apply(f"call me at {phone} today") == f"call me at {REPLACEMENT} today"
    # A full stop after the number used to hide it (it was taken for a decimal point).
    assert Redactor(["phone"], []).apply(f"Call {phone}.") == f"Call {REPLACEMENT}."


def test_card_rule_still_finds_card_numbers():
    assert Redactor(["card"], []).apply("card 4111 1111 1111 1111 ok") == f"card {REPLACEMENT} ok"


# --- Transcript -----------------------------------------------------------------------


def test_transcript_keeps_a_user_message_repeated_in_the_conversation(tenant):
    """Each LLM call's input repeats the history: only the repetition is left out, not a
    second "yes" the user really sent."""
    project = tenant.project
    calls = [
        [("user", "delete the file?")],
        [("user", "delete the file?"), ("assistant", "Sure?"), ("user", "yes")],
        [
            ("user", "delete the file?"),
            ("assistant", "Sure?"),
            ("user", "yes"),
            ("assistant", "Really?"),
            ("user", "yes"),
        ],
    ]
    answers = ["Sure?", "Really?", "Deleted."]
    events = []
    for call, (inputs, answer) in enumerate(zip(calls, answers, strict=True)):
        span = f"llm{call}"
        events += [
            MessageEvent(
                trace_id="t", message_id=f"{span}:in:{i}", position=call * 1000 + i, role=r, content=c, span_id=span
            )
            for i, (r, c) in enumerate(inputs)
        ]
        events.append(
            MessageEvent(
                trace_id="t",
                message_id=f"{span}:out:0",
                position=call * 1000 + 500,
                role="assistant",
                content=answer,
                span_id=span,
            )
        )
    with organization_scope(project.organization):
        ingest(project=project, messages=events, announce=False)
        run = Run.objects.get(project=project)
        lines = [(m.role, m.content) for m in selectors.transcript(run=run)]
    assert lines == [
        ("user", "delete the file?"),
        ("assistant", "Sure?"),
        ("user", "yes"),
        ("assistant", "Really?"),
        ("user", "yes"),
        ("assistant", "Deleted."),
    ]


# --- Hostile values through ingest() ----------------------------------------------------


def test_ingest_stores_values_postgresql_refuses_instead_of_failing_the_batch(tenant):
    """ingest() is the one write path: the executor hands it a webhook tool's parsed
    JSON and the model's text as they come. NaN, Infinity, NUL characters and unpaired
    surrogates are refused by jsonb and text columns; they must not lose the batch."""
    project = tenant.project
    hostile = {"score": float("nan"), "big": float("inf"), "text": "a\x00b", "bad": "\ud800x", "k\x00": 1}
    with organization_scope(project.organization):
        ingest(
            project=project,
            runs=[RunEvent(trace_id="t", fields={"name": "run\x00", "output": hostile, "error": "e\x00"})],
            steps=[
                StepEvent(
                    trace_id="t",
                    span_id="r",
                    name="root\x00",
                    error="boom\x00",
                    input=hostile,
                    attributes={"x": float("-inf")},
                )
            ],
            messages=[MessageEvent(trace_id="t", message_id="m", position=0, role="tool", content="\x00out\ud800")],
            tool_calls=[ToolCallEvent(trace_id="t", call_id="c", tool_name="web\x00hook", result=hostile)],
            snapshots=[MemoryEvent(trace_id="t", snapshot_id="s", sequence=0, state=hostile)],
            announce=False,
        )
        run = Run.objects.get(project=project)
        step = Step.objects.get(project=project)
        message = Message.objects.get(project=project)
        tool_call = ToolCall.objects.get(project=project)
    assert run.name == "run" and run.error == "e"
    assert step.name == "root" and step.error == "boom"
    assert step.input["score"] == "NaN" and step.input["big"] == "Infinity" and step.input["text"] == "ab"
    assert step.attributes == {"x": "-Infinity"}
    assert message.content == "out?"  # as the OTLP mapping cleans an unpaired surrogate
    assert tool_call.tool_name == "webhook" and tool_call.result["k"] == 1


def test_batch_with_huge_token_counts_is_refused_per_event_not_a_5xx(tenant, key_client):
    """The run's total cost is numeric(18, 9): 200 steps claiming 10^12 tokens each
    overflowed it, and the batch answered 500 (every later batch of that run too)."""
    client = key_client(tenant.project, ["ingest"])
    events = [
        {
            "type": "step",
            "id": f"s{i}",
            "run_id": "r",
            "kind": "llm",
            "model": "magistral-medium-2509",
            "input_tokens": 10**12,
            "output_tokens": 10**12,
            "started_at": "2026-11-20T12:00:00Z",
        }
        for i in range(200)
    ]
    response = client.post("/api/v1/ingest", {"events": events}, format="json")
    assert response.status_code == 207
    results = response.json()["results"]
    assert {(r["status"], r["code"]) for r in results} == {(400, "invalid")}
    assert results[0]["error"]["message"].startswith("input_tokens:")


# --- Full-text search -------------------------------------------------------------------


def test_full_text_search_finds_a_word_at_the_start_of_a_line(tenant):
    """The search text is the payloads' JSON, where a newline is the two characters
    backslash and n: "hello\\nworld" was indexed as "hello" and "nworld"."""
    project = tenant.project
    root = StepEvent(
        trace_id="t", span_id="r", started_at=_at(0), ended_at=_at(1), input="Dear team,\nrefund\tinvoice 42"
    )
    with organization_scope(project.organization):
        ingest(project=project, steps=[root], announce=False)
        found = {
            q: selectors.run_list(project=project, filters=selectors.RunFilters(q=q)).count()
            for q in ("refund", "invoice", "team", '"dear team" -nothing', "C:\\ (x) & | ! <->")
        }
    assert found == {"refund": 1, "invoice": 1, "team": 1, '"dear team" -nothing': 1, "C:\\ (x) & | ! <->": 0}


# --- OTLP -----------------------------------------------------------------------------


def test_a_span_whose_parent_id_is_not_hex_is_rejected_not_made_a_root():
    """In OTLP/JSON a parent id that is not hex stood in as b"\\x00", which reads as "no
    parent": the span became a second root (overriding the run's name, input, output
    and status) instead of being rejected like a bad trace or span id."""
    import json

    from runs.otlp import decode, map_traces

    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "parentSpanId": "not-hex!",
        "name": "child",
        "startTimeUnixNano": "1763640000000000000",
        "endTimeUnixNano": "1763640001000000000",
    }
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    batch = map_traces(decode.decode_traces(body, decode.JSON))
    assert (batch.rejected, batch.steps) == (1, [])
    assert "parent span id" in batch.problems[0]


# --- Cost -----------------------------------------------------------------------------


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


# --- Run status -------------------------------------------------------------------------


def test_run_error_follows_the_root_step_when_it_is_resent_successfully(tenant):
    project = tenant.project
    failed = StepEvent(trace_id="t", span_id="r", started_at=_at(0), ended_at=_at(1), status="error", error="timeout")
    retried = StepEvent(trace_id="t", span_id="r", started_at=_at(0), ended_at=_at(2), status="ok")
    with organization_scope(project.organization):
        ingest(project=project, steps=[failed], announce=False)
        assert Run.objects.get(project=project).error == "timeout"
        ingest(project=project, steps=[retried], announce=False)
        run = Run.objects.get(project=project)
    assert (run.status, run.error) == ("succeeded", "")


def test_an_error_the_client_stated_is_kept(tenant):
    project = tenant.project
    with organization_scope(project.organization):
        ingest(project=project, runs=[RunEvent(trace_id="t", fields={"error": "quota"})], announce=False)
        ingest(
            project=project,
            steps=[StepEvent(trace_id="t", span_id="r", started_at=_at(0), ended_at=_at(1), status="ok")],
            announce=False,
        )
        run = Run.objects.get(project=project)
    assert run.error == "quota"


@pytest.mark.parametrize(("step_status", "run_status"), [("error", "failed"), ("ok", "succeeded")])
def test_a_root_step_with_a_final_status_but_no_end_time_ends_the_run(tenant, step_status, run_status):
    """A script sends {"type": "step", "status": "error", "error": ...} without times: the
    step is over (a status is only known at the end), yet the run stayed "running"."""
    project = tenant.project
    root = StepEvent(trace_id="t", span_id="r", status=step_status, error="boom" if step_status == "error" else "")
    with organization_scope(project.organization):
        ingest(project=project, steps=[root], announce=False)
        run = Run.objects.get(project=project)
    assert (run.status, run.error) == (run_status, "boom" if step_status == "error" else "")


def test_run_latency_is_never_negative(tenant):
    # A client clock stepping back gives a span that ends before it starts.
    project = tenant.project
    with organization_scope(project.organization):
        ingest(
            project=project,
            steps=[StepEvent(trace_id="t", span_id="r", started_at=_at(10), ended_at=_at(4), status="ok")],
            announce=False,
        )
        run = Run.objects.get(project=project)
    assert run.latency_ms == 0


# --- Parent runs ------------------------------------------------------------------------


def test_a_run_resent_with_another_parent_is_linked_to_it(tenant):
    project = tenant.project
    with organization_scope(project.organization):
        parents = [RunEvent(trace_id="p1"), RunEvent(trace_id="p2")]
        ingest(
            project=project, runs=[*parents, RunEvent(trace_id="c", fields={"parent_trace_id": "p1"})], announce=False
        )
        ingest(project=project, runs=[RunEvent(trace_id="c", fields={"parent_trace_id": "p2"})], announce=False)
        runs = {run.trace_id: run for run in Run.objects.filter(project=project)}
        assert runs["c"].parent_run_id == runs["p2"].pk
        ingest(project=project, runs=[RunEvent(trace_id="c", fields={"parent_trace_id": ""})], announce=False)
        assert Run.objects.get(project=project, trace_id="c").parent_run_id is None


def test_a_run_naming_itself_as_parent_is_not_its_own_child(tenant):
    project = tenant.project
    root = StepEvent(trace_id="t", span_id="r", run_hints={"parent_trace_id": "t"})
    with organization_scope(project.organization):
        ingest(project=project, steps=[root], announce=False)
        assert Run.objects.get(project=project).parent_run_id is None


# --- Concurrency ------------------------------------------------------------------------


def test_two_batches_linking_each_others_sub_agents_do_not_deadlock(transactional_db, tenant, monkeypatch):
    """Sub-agent runs C (parent a) and D (parent b) wait for their parents. Batch 1 brings
    parent A and touches D, batch 2 brings parent B and touches C: each locked its own
    runs, then linking the other's child waited for the other batch (a deadlock, and a
    503 for one of them)."""
    project = tenant.project
    with organization_scope(project.organization):
        ingest(
            project=project,
            runs=[
                RunEvent(trace_id="c", fields={"parent_trace_id": "a"}),
                RunEvent(trace_id="d", fields={"parent_trace_id": "b"}),
            ],
            announce=False,
        )

    barrier = threading.Barrier(2, timeout=3)
    original = ingest_write.link_parent_runs

    def link_together(*args, **kwargs):
        # Both batches hold their runs' locks here before either links.
        try:
            barrier.wait()
        except threading.BrokenBarrierError:
            pass  # the other batch waits for a lock we hold: go on
        return original(*args, **kwargs)

    monkeypatch.setattr(ingest_write, "link_parent_runs", link_together)
    errors: list[Exception] = []

    def send(trace_ids):
        try:
            with organization_scope(project.organization):
                steps = [StepEvent(trace_id=t, span_id="s", started_at=_at(0)) for t in trace_ids]
                ingest(project=project, steps=steps, announce=False)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
        finally:
            connection.close()

    threads = [threading.Thread(target=send, args=(ids,)) for ids in (["a", "d"], ["b", "c"])]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(timeout=30)
    assert errors == []
    with organization_scope(project.organization):
        runs = {run.trace_id: run for run in Run.objects.filter(project=project)}
    assert runs["c"].parent_run_id == runs["a"].pk
    assert runs["d"].parent_run_id == runs["b"].pk
