"""The one write path: upserts, ordering, totals, cost, redaction, retention."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

import pytest

from agentops.scoping import organization_scope
from runs.models import IngestSettings, Message, Run, Step, ToolCall
from runs.services.ingest import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent, ingest
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
