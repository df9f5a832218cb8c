"""The one write path: upserts, ordering, totals, cost, redaction, retention."""

import threading
import time
from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest
from django.contrib.postgres.search import SearchQuery
from django.db import connection, transaction

from agentops.scoping import organization_scope
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest, recompute_run_totals
from runs.models import IngestSettings, MemorySnapshot, Message, Run, Step, ToolCall
from runs.services.redaction import NO_REDACTION, Redactor
from runs.services.settings import ingest_settings_update
from runs.tasks import purge_expired_runs

T0 = datetime(2026, 11, 20, 12, 0, tzinfo=UTC)


def _at(seconds: float) -> datetime:
    return T0 + timedelta(seconds=seconds)


def _trace(trace_id="t1"):
    return [
        StepEvent(
            trace_id=trace_id,
            span_id="root",
            kind="agent",
            name="support agent",
            started_at=_at(0),
            ended_at=_at(10),
            status="ok",
            input={"question": "hi"},
            output={"answer": "hello"},
            run_hints={"session_id": "s-1", "agent_name": "support", "name": "support agent"},
        ),
        StepEvent(
            trace_id=trace_id,
            span_id="llm1",
            parent_span_id="root",
            kind="llm",
            name="chat",
            started_at=_at(1),
            ended_at=_at(3),
            status="ok",
            model="mistral-large-2512",
            input_tokens=1_000_000,
            cached_input_tokens=0,
            output_tokens=1_000_000,
        ),
        StepEvent(
            trace_id=trace_id,
            span_id="tool1",
            parent_span_id="root",
            kind="tool",
            name="search",
            started_at=_at(3),
            ended_at=_at(4),
            status="ok",
        ),
    ]


@pytest.fixture
def project(tenant):
    return tenant.project


def _scope(project):
    return organization_scope(project.organization)


def test_steps_create_the_run_and_totals_follow(project):
    with _scope(project):
        result = ingest(project=project, steps=_trace(), announce=False)
        run = Run.objects.get(pk=result.runs_created[0])
    assert (run.trace_id, run.status, run.session_id, run.agent_name) == ("t1", "succeeded", "s-1", "support")
    assert (run.step_count, run.llm_call_count, run.input_tokens, run.output_tokens) == (3, 1, 1_000_000, 1_000_000)
    assert run.total_cost == Decimal("2.000000000")  # mistral-large: 0.50 in + 1.50 out per million
    assert run.models_used == ["mistral-large-2512"]
    assert (run.started_at, run.ended_at, run.latency_ms) == (_at(0), _at(10), 10_000)


def test_resending_the_same_batch_three_times_adds_no_rows(project):
    with _scope(project):
        for _ in range(3):
            ingest(project=project, steps=_trace(), announce=False)
        assert Run.objects.count() == 1
        assert Step.objects.count() == 3
        assert Run.objects.get().total_cost == Decimal("2.000000000")


def test_steps_before_their_run_and_run_before_its_steps_end_the_same(project):
    run_event = RunEvent(trace_id="t1", fields={"name": "explicit name", "tags": ["prod"], "environment": "prod"})
    with _scope(project):
        ingest(project=project, steps=_trace()[1:], announce=False)
        assert Run.objects.get().status == "running"  # no root yet
        ingest(project=project, runs=[run_event], announce=False)
        ingest(project=project, steps=_trace()[:1], announce=False)
        run = Run.objects.get()
    assert (run.name, run.tags, run.environment, run.status, run.step_count) == (
        "explicit name",
        ["prod"],
        "prod",
        "succeeded",
        3,
    )


def test_a_run_created_with_its_events_merged_is_stored_as_one_updated_after_creation(project):
    """A new run is inserted with what the batch says about it already merged: it ends
    exactly as the same batch leaves a run that existed with nothing stated."""
    explicit = {
        "name": "explicit name",
        "status": "failed",
        "error": "boom \x00 here",
        "tags": ["prod", "eu"],
        "metadata": {"team": "support", "score": float("nan")},
        "started_at": _at(-5),
        "ended_at": _at(-1),
        "release": "1.2.3",
        "agent_name": "support-bot",
        "input": {"question": "where is my order?", "note": "nul \x00"},
        "output": "in transit",
    }
    hinted = _trace()
    hinted[0].run_hints |= {"end_user_id": "u-7", "environment": "staging", "tags": ["ignored"]}
    hinted[1].run_hints = {"agent_version": "v2", "session_id": "inner session", "parent_trace_id": "p1"}
    fields = [f.attname for f in Run._meta.concrete_fields if f.attname not in ("id", "trace_id", "created_at")]
    fields.remove("updated_at")
    stored = []
    with _scope(project):
        for trace_id, existed in (("new", False), ("old", True)):
            if existed:
                ingest(project=project, runs=[RunEvent(trace_id=trace_id)], announce=False)
            steps = [StepEvent(**{**vars(step), "trace_id": trace_id}) for step in hinted]
            ingest(project=project, runs=[RunEvent(trace_id=trace_id, fields=explicit)], steps=steps, announce=False)
            run = Run.objects.get(trace_id=trace_id)
            stored.append({name: getattr(run, name) for name in fields})
        search = dict(Run.objects.values_list("trace_id", "search"))
    assert stored[0] == stored[1]
    assert search["new"] == search["old"]
    assert (stored[0]["name"], stored[0]["tags"], stored[0]["error"]) == ("explicit name", ["prod", "eu"], "boom  here")
    assert stored[0]["metadata"] == {"team": "support", "score": "NaN"}
    assert (stored[0]["input"], stored[0]["agent_name"]) == (
        {"question": "where is my order?", "note": "nul "},
        "support-bot",
    )
    assert (stored[0]["end_user_id"], stored[0]["agent_version"], stored[0]["session_id"]) == ("u-7", "v2", "s-1")
    assert stored[0]["explicit_fields"] == list(explicit)
    assert stored[0]["status_explicit"] is True


def test_unknown_model_is_unpriced_not_free(project):
    step = StepEvent(
        trace_id="t2",
        span_id="x",
        kind="llm",
        model="mystery-model-9",
        input_tokens=10,
        output_tokens=5,
        started_at=_at(0),
        ended_at=_at(1),
    )
    with _scope(project):
        ingest(project=project, steps=[step], announce=False)
        stored = Step.objects.get()
        run = Run.objects.get()
    assert stored.cost is None and stored.unpriced is True
    assert run.unpriced_step_count == 1 and run.total_cost == 0


def test_failed_root_fails_the_run_with_its_error(project):
    steps = _trace()
    steps[0].status, steps[0].error = "error", "RateLimitError: slow down"
    with _scope(project):
        ingest(project=project, steps=steps, announce=False)
        run = Run.objects.get()
    assert (run.status, run.error, run.error_count) == ("failed", "RateLimitError: slow down", 1)


def test_messages_tool_calls_and_memory_link_to_steps_in_any_order(project):
    with _scope(project):
        ingest(
            project=project,
            announce=False,
            messages=[
                MessageEvent(trace_id="t1", message_id="m1", position=1, role="user", content="hi", span_id="llm1")
            ],
            tool_calls=[
                ToolCallEvent(
                    trace_id="t1",
                    call_id="c1",
                    tool_name="search",
                    span_id="tool1",
                    arguments={"q": "x"},
                    result={"hits": 1},
                    latency_ms=1000,
                )
            ],
            snapshots=[MemoryEvent(trace_id="t1", snapshot_id="mem1", sequence=1, state={"k": 1}, span_id="tool1")],
        )
        ingest(project=project, steps=_trace(), announce=False)
        message = Message.objects.get()
        call = ToolCall.objects.get()
    assert message.step.span_id == "llm1"
    assert call.step.span_id == "tool1" and call.arguments == {"q": "x"}


def test_sub_agent_run_links_to_parent_in_either_order(project):
    child = StepEvent(
        trace_id="child", span_id="c", started_at=_at(0), ended_at=_at(1), run_hints={"parent_trace_id": "t1"}
    )
    with _scope(project):
        ingest(project=project, steps=[child], announce=False)
        ingest(project=project, steps=_trace(), announce=False)
        assert Run.objects.get(trace_id="child").parent_run.trace_id == "t1"


def test_redaction_applies_before_storage(project, tenant):
    with _scope(project):
        ingest_settings_update(
            project=project,
            actor=tenant.owner,
            redact=["email", "api_key", "card"],
            custom_patterns=[r"ticket-\d+"],
            retention_days=None,
        )
        step = StepEvent(
            trace_id="t3",
            span_id="s",
            started_at=_at(0),
            ended_at=_at(1),
            input={"text": "mail bob@example.com key sk-abcdefghijklmnop1234 ticket-42"},
            output="card 4111 1111 1111 1111 not 1234 5678 9012 3456",
        )
        ingest(project=project, steps=[step], announce=False)
        stored = Step.objects.get()
    assert stored.input == {"text": "mail [REDACTED] key [REDACTED] [REDACTED]"}
    assert stored.output == "card [REDACTED] not 1234 5678 9012 3456"  # Luhn-invalid digits stay


@pytest.mark.parametrize("padding", [0, 30], ids=["one statement", "copy"])
def test_redaction_reaches_every_free_text_and_payload_of_every_table(project, tenant, padding):
    """Each stored field that carries what the agent saw or said is redacted, whichever
    way the rows are written (a few rows in one statement, many by COPY)."""
    secret = "ticket-42"
    with _scope(project):
        ingest_settings_update(
            project=project, actor=tenant.owner, redact=[], custom_patterns=[r"ticket-\d+"], retention_days=None
        )
        steps = [
            StepEvent(
                trace_id="t4",
                span_id="s",
                started_at=_at(0),
                ended_at=_at(1),
                status=Step.Status.ERROR,
                error=f"failed on {secret}",
                input={"q": secret},
                output=[secret],
                attributes={"note": secret},
                events=[{"name": "exception", "attributes": {"message": secret}}],
            ),
            *(StepEvent(trace_id="t4", span_id=f"pad{i}", started_at=_at(0)) for i in range(padding)),
        ]
        ingest(
            project=project,
            steps=steps,
            messages=[
                MessageEvent(
                    trace_id="t4",
                    message_id="m",
                    position=1,
                    role="assistant",
                    span_id="s",
                    content=f"about {secret}",
                    tool_calls=[{"id": "c", "name": "lookup", "arguments": {"id": secret}}],
                )
            ],
            tool_calls=[
                ToolCallEvent(
                    trace_id="t4",
                    call_id="c",
                    tool_name="lookup",
                    span_id="s",
                    arguments={"id": secret},
                    result=f"found {secret}",
                    error=f"slow on {secret}",
                )
            ],
            snapshots=[MemoryEvent(trace_id="t4", snapshot_id="snap", sequence=1, state={"seen": secret}, span_id="s")],
            announce=False,
        )
        step = Step.objects.get(span_id="s")
        message, tool_call, snapshot = Message.objects.get(), ToolCall.objects.get(), MemorySnapshot.objects.get()
    stored = {
        "step.error": step.error,
        "step.input": step.input,
        "step.output": step.output,
        "step.attributes": step.attributes,
        "step.events": step.events,
        "message.content": message.content,
        "message.tool_calls": message.tool_calls,
        "tool_call.arguments": tool_call.arguments,
        "tool_call.result": tool_call.result,
        "tool_call.error": tool_call.error,
        "snapshot.state": snapshot.state,
    }
    for field_name, value in stored.items():
        assert secret not in str(value), field_name
        assert "[REDACTED]" in str(value), field_name


def test_invalid_custom_pattern_is_refused(project, tenant):
    from agentops.errors import InvalidRequest

    with _scope(project), pytest.raises(InvalidRequest, match="invalid regular expression"):
        ingest_settings_update(
            project=project, actor=tenant.owner, redact=[], custom_patterns=["(unclosed"], retention_days=None
        )


def test_retention_purges_only_old_runs_of_that_project(project, other_tenant, tenant):
    old = [StepEvent(trace_id="old", span_id="s", started_at=datetime.now(UTC) - timedelta(days=40))]
    new = [StepEvent(trace_id="new", span_id="s", started_at=datetime.now(UTC) - timedelta(days=1))]
    with _scope(project):
        ingest(project=project, steps=old + new, announce=False)
        ingest_settings_update(project=project, actor=tenant.owner, redact=[], custom_patterns=[], retention_days=30)
    with organization_scope(other_tenant.organization):
        ingest(
            project=other_tenant.project,
            steps=[StepEvent(trace_id="old", span_id="s", started_at=datetime.now(UTC) - timedelta(days=400))],
            announce=False,
        )
    assert purge_expired_runs() == 1
    with _scope(project):
        assert list(Run.objects.values_list("trace_id", flat=True)) == ["new"]
    with organization_scope(other_tenant.organization):
        assert Run.objects.count() == 1
    assert IngestSettings.dangerously_unscoped_objects.count() == 1


# --- Fewer statements, same results ----------------------------------------------------


def _found(project, words: str) -> list[str]:
    query = SearchQuery(words, config="simple", search_type="websearch")
    return list(Run.objects.filter(project=project, search=query).values_list("trace_id", flat=True))


def test_a_batch_of_only_messages_and_tool_calls_links_them_to_existing_steps(project):
    with _scope(project):
        ingest(project=project, steps=_trace(), announce=False)
        ingest(
            project=project,
            messages=[MessageEvent(trace_id="t1", message_id="m1", position=1, role="user", span_id="llm1")],
            announce=False,
        )
        ingest(
            project=project,
            tool_calls=[ToolCallEvent(trace_id="t1", call_id="c1", tool_name="search", span_id="tool1")],
            snapshots=[MemoryEvent(trace_id="t1", snapshot_id="mem1", sequence=1, state={}, span_id="tool1")],
            announce=False,
        )
        assert Message.objects.get().step.span_id == "llm1"
        assert ToolCall.objects.get().step.span_id == "tool1"
        assert MemorySnapshot.objects.get().step.span_id == "tool1"


def test_a_batch_of_only_steps_links_items_of_every_kind_sent_before(project):
    with _scope(project):
        ingest(
            project=project,
            messages=[MessageEvent(trace_id="t1", message_id="m1", position=1, role="user", span_id="llm1")],
            snapshots=[MemoryEvent(trace_id="t1", snapshot_id="mem1", sequence=1, state={}, span_id="tool1")],
            announce=False,
        )
        ingest(project=project, steps=_trace(), announce=False)
        assert Message.objects.get().step.span_id == "llm1"
        assert MemorySnapshot.objects.get().step.span_id == "tool1"


def test_small_and_large_tables_of_one_batch_are_all_stored_and_linked(project):
    steps = [StepEvent(trace_id="t1", span_id=f"s{i}", parent_span_id="root", kind="tool") for i in range(25)]
    messages = [
        MessageEvent(trace_id="t1", message_id=f"m{i}", position=i, role="tool", span_id="s3") for i in range(2)
    ]
    with _scope(project):
        result = ingest(
            project=project,
            steps=steps,
            messages=messages,
            tool_calls=[ToolCallEvent(trace_id="t1", call_id="c1", tool_name="search", span_id="s4")],
            announce=False,
        )
        assert (result.steps, result.messages, result.tool_calls, result.snapshots) == (25, 2, 1, 0)
        assert Run.objects.get().step_count == 25
        assert {m.step.span_id for m in Message.objects.all()} == {"s3"}
        assert ToolCall.objects.get().step.span_id == "s4"


def test_sub_agent_run_arriving_after_its_parent_links_and_follows_a_new_parent(project):
    def child(parent):
        return StepEvent(trace_id="child", span_id="c", run_hints={"parent_trace_id": parent})

    with _scope(project):
        ingest(project=project, steps=_trace("t1") + _trace("t2"), announce=False)
        ingest(project=project, steps=[child("t1")], announce=False)
        assert Run.objects.get(trace_id="child").parent_run.trace_id == "t1"
        # Batches of the parent and of the child that name no parent leave the link alone.
        ingest(project=project, steps=_trace("t1"), announce=False)
        ingest(project=project, steps=[StepEvent(trace_id="child", span_id="d", parent_span_id="c")], announce=False)
        assert Run.objects.get(trace_id="child").parent_run.trace_id == "t1"
        ingest(project=project, runs=[RunEvent(trace_id="child", fields={"parent_trace_id": "t2"})], announce=False)
        assert Run.objects.get(trace_id="child").parent_run.trace_id == "t2"


def test_sub_agent_runs_waiting_for_a_parent_all_link_when_it_arrives(project):
    with _scope(project):
        for name in ("c1", "c2"):
            ingest(project=project, runs=[RunEvent(trace_id=name, fields={"parent_trace_id": "p"})], announce=False)
        ingest(project=project, steps=[StepEvent(trace_id="p", span_id="root")], announce=False)
        parent = Run.objects.get(trace_id="p")
        assert set(parent.children.values_list("trace_id", flat=True)) == {"c1", "c2"}


def test_run_resent_with_only_steps_keeps_its_explicit_status_and_error(project):
    stated = RunEvent(trace_id="t1", fields={"status": "failed", "error": "stopped by the operator"})
    with _scope(project):
        ingest(project=project, runs=[stated], steps=_trace(), announce=False)
        ingest(project=project, steps=_trace(), announce=False)
        run = Run.objects.get()
    assert (run.status, run.error, run.step_count) == ("failed", "stopped by the operator", 3)


def test_run_without_steps_keeps_its_status_and_times(project):
    stated = RunEvent(trace_id="t1", fields={"status": "queued", "started_at": _at(0), "ended_at": _at(2)})
    with _scope(project):
        ingest(project=project, runs=[stated], announce=False)
        ingest(
            project=project,
            messages=[MessageEvent(trace_id="t1", message_id="m1", position=1, role="user")],
            announce=False,
        )
        run = Run.objects.get()
    assert (run.status, run.step_count, run.started_at, run.ended_at, run.latency_ms) == (
        "queued",
        0,
        _at(0),
        _at(2),
        2000,
    )


def test_run_without_steps_gets_its_latency_from_its_stated_times(project):
    stated = RunEvent(trace_id="t1", fields={"status": "succeeded", "started_at": _at(0), "ended_at": _at(2)})
    with _scope(project):
        ingest(project=project, runs=[stated], announce=False)
        run = Run.objects.get()
    assert (run.status, run.error, run.latency_ms) == ("succeeded", "", 2000)


def test_search_text_follows_later_changes_of_name_input_and_output(project):
    with _scope(project):
        ingest(project=project, runs=[RunEvent(trace_id="t1", fields={"input": "alpha"})], announce=False)
        assert _found(project, "alpha") == ["t1"]
        ingest(project=project, runs=[RunEvent(trace_id="t1", fields={"input": "bravo"})], announce=False)
        assert (_found(project, "alpha"), _found(project, "bravo")) == ([], ["t1"])
        # An inner step leaves the search text as it was; a root span's output adds to it.
        ingest(project=project, steps=_trace()[1:], announce=False)
        assert _found(project, "bravo") == ["t1"]
        root = StepEvent(trace_id="t1", span_id="root", name="charlie", output="delta")
        ingest(project=project, steps=[root], announce=False)
        assert _found(project, "charlie delta bravo") == ["t1"]


def test_new_runs_get_search_text_even_without_name_input_or_output(project):
    with _scope(project):
        ingest(project=project, steps=[StepEvent(trace_id="t1", span_id="s", parent_span_id="r")], announce=False)
        assert Run.objects.filter(search__isnull=False).count() == 1


def test_recompute_run_totals_refreshes_search_text_by_default(project):
    with _scope(project):
        result = ingest(project=project, runs=[RunEvent(trace_id="t1", fields={"input": "alpha"})], announce=False)
        Run.objects.filter(pk=result.runs_created[0]).update(input="echo")  # as another writer would
        recompute_run_totals(result.runs_created)
        assert (_found(project, "alpha"), _found(project, "echo")) == ([], ["t1"])


def test_updated_at_moves_on_every_batch_and_only_the_first_creates(project):
    with _scope(project):
        first = ingest(project=project, steps=_trace(), announce=False)
        created = Run.objects.get()
        second = ingest(
            project=project,
            messages=[MessageEvent(trace_id="t1", message_id="m1", position=1, role="user")],
            announce=False,
        )
        run = Run.objects.get()
    assert first.runs_created == first.runs_touched == [run.pk]
    assert (second.runs_created, second.runs_touched) == ([], [run.pk])
    assert created.created_at == created.updated_at
    assert run.created_at == created.created_at and run.updated_at > created.updated_at


def test_a_batch_with_new_and_known_runs_creates_only_the_new(project):
    with _scope(project):
        ingest(project=project, steps=_trace("t1"), announce=False)
        result = ingest(project=project, steps=_trace("t1") + _trace("t2"), announce=False)
        assert result.runs_created == [Run.objects.get(trace_id="t2").pk]
        assert len(result.runs_touched) == 2


def test_a_given_redactor_is_used_instead_of_reading_the_settings(project):
    step = StepEvent(trace_id="t1", span_id="s", input="mail bob@example.com")
    with _scope(project):
        ingest(project=project, steps=[step], redactor=Redactor(["email"], []), announce=False)
        assert Step.objects.get().input == "mail [REDACTED]"


def test_a_small_batch_for_a_known_run_takes_four_statements(project, django_assert_max_num_queries):
    """Lock the run; upsert the step and message; link, recompute and touch the run; mark
    it for the usage ledger."""
    step = StepEvent(trace_id="t1", span_id="llm9", parent_span_id="root", kind="llm", model="mistral-large-2512")
    message = MessageEvent(trace_id="t1", message_id="m9", position=9, role="assistant", span_id="llm9")
    with _scope(project):
        ingest(project=project, steps=_trace(), announce=False)
        with django_assert_max_num_queries(4):
            ingest(project=project, steps=[step], messages=[message], redactor=NO_REDACTION, announce=False)
        assert Message.objects.get().step.span_id == "llm9"
        assert Run.objects.get().llm_call_count == 2


def test_a_large_batch_of_new_traces_takes_five_statements_whatever_its_size(
    project, make_api_key, django_assert_max_num_queries
):
    """An OTLP export of new traces: lock the runs; create them with what the root spans
    say about them already merged (no second write of the runs); look up the new steps'
    ids for their messages and tool calls; recompute the runs; mark them for the usage
    ledger. The steps, messages and tool calls themselves go by COPY (no statement of
    their own, no second write to link them)."""
    key, _ = make_api_key(project)
    steps, messages, calls = [], [], []
    for trace in range(40):
        trace_id = f"t{trace}"
        steps += _trace(trace_id)
        messages.append(MessageEvent(trace_id=trace_id, message_id="m1", position=1, role="user", span_id="llm1"))
        calls.append(ToolCallEvent(trace_id=trace_id, call_id="c1", tool_name="search", span_id="tool1"))
    with _scope(project):
        # The prices are read once and kept: read them first.
        ingest(project=project, steps=_trace("warm-up"), redactor=NO_REDACTION, announce=False)
        with django_assert_max_num_queries(5):
            result = ingest(
                project=project,
                steps=steps,
                messages=messages,
                tool_calls=calls,
                redactor=NO_REDACTION,
                api_key=key,
                announce=False,
            )
        assert (len(result.runs_created), result.steps, result.messages, result.tool_calls) == (40, 120, 40, 40)
        runs = list(Run.objects.exclude(trace_id="warm-up"))
        assert len(runs) == 40 and {run.api_key_id for run in runs} == {key.pk}
        assert {(run.step_count, run.llm_call_count, run.agent_name, run.session_id) for run in runs} == {
            (3, 1, "support", "s-1")
        }
        assert Step.objects.filter(run__in=runs).count() == 120
        assert all(m.step.span_id == "llm1" and m.step.run_id == m.run_id for m in Message.objects.all())
        assert all(c.step.span_id == "tool1" and c.step.run_id == c.run_id for c in ToolCall.objects.all())


def test_a_run_created_by_a_concurrent_batch_is_locked_and_updated(transactional_db, tenant):
    """Batch 2 starts while batch 1, which creates the run, has not committed: batch 2
    finds no run to lock, its INSERT waits for batch 1 to commit, and it locks the run then."""
    project = tenant.project
    created = threading.Event()
    results, errors = {}, []

    def send(name, steps, hold=False):
        try:
            with _scope(project), transaction.atomic():
                results[name] = ingest(project=project, steps=steps, announce=False)
                if hold:
                    created.set()
                    time.sleep(0.5)
        except Exception as exc:  # noqa: BLE001 - reported by the assertion below
            errors.append(exc)
            created.set()
        finally:
            connection.close()

    first = threading.Thread(target=send, args=("first", _trace()[:2], True))
    second = threading.Thread(target=send, args=("second", _trace()[2:]))
    first.start()
    created.wait(timeout=10)
    second.start()
    for thread in (first, second):
        thread.join(timeout=30)
    assert errors == []
    with _scope(project):
        run = Run.objects.get()
    assert results["first"].runs_created == [run.pk] and results["second"].runs_created == []
    assert (run.step_count, run.status) == (3, "succeeded")


def test_items_of_a_new_run_without_their_step_yet_are_linked_when_it_comes(project):
    """A large batch creating its runs links its items to its steps by a look-up and
    skips the link statement; an item whose step is not in the batch is still linked
    by the batch that brings the step."""
    steps, messages = [], []
    for trace in range(8):
        trace_id = f"t{trace}"
        steps += _trace(trace_id)[:2]  # no tool1 yet
        messages += [
            MessageEvent(trace_id=trace_id, message_id="m1", position=1, role="user", span_id="llm1"),
            MessageEvent(trace_id=trace_id, message_id="m2", position=2, role="tool", span_id="tool1"),
        ]
    with _scope(project):
        ingest(project=project, steps=steps, messages=messages, redactor=NO_REDACTION, announce=False)
        assert {(m.message_id, m.step.span_id if m.step else None) for m in Message.objects.all()} == {
            ("m1", "llm1"),
            ("m2", None),
        }
        later = [step for trace in range(8) for step in _trace(f"t{trace}")[2:]]
        ingest(project=project, steps=later, redactor=NO_REDACTION, announce=False)
        assert {(m.message_id, m.step.span_id) for m in Message.objects.all()} == {("m1", "llm1"), ("m2", "tool1")}
        assert all(m.step.run_id == m.run_id for m in Message.objects.all())
