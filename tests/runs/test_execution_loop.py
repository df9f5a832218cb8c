"""The step loop (runs.execution.loop): the tool-calling loop through the real mistralai
SDK against a local Mistral-speaking server, the offline model, the limits, and a run on
a real Celery worker."""

import time
from decimal import Decimal

import pytest

from agentops.scoping import organization_scope
from runs.execution import run_execute
from runs.models import MemorySnapshot, Message, Run, Step, ToolCall
from tests.fake_mistral import completion
from tests.runs.execution_helpers import start_run, use_fake_mistral


def test_offline_agent_runs_the_tool_loop_end_to_end(tenant):
    with organization_scope(tenant.organization):
        run = start_run(tenant, tools=["calculator", "memory_set"])
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        kinds = list(Step.objects.filter(run=run).order_by("started_at", "id").values_list("span_id", "kind"))
        tool_results = {c.tool_name: c.result for c in ToolCall.objects.filter(run=run)}
        snapshots = list(MemorySnapshot.objects.filter(run=run).values_list("state", flat=True))
    assert run.status == "succeeded", run.error
    assert "[offline model]" in run.output and "42" in run.output
    assert kinds == [
        ("root", "agent"),
        ("llm-1", "llm"),
        ("tool-1-0", "tool"),
        ("llm-2", "llm"),
        ("tool-2-0", "tool"),
        ("llm-3", "llm"),
    ]
    assert tool_results["calculator"] == {"expression": "(6 * 7) + 0", "result": 42}
    assert snapshots == [{"last_question": "What is (6 * 7) + 0?"}]
    assert run.step_count == 6 and run.llm_call_count == 3


def test_mistral_run_through_the_real_sdk(tenant, fake_mistral):
    fake_mistral.reply(
        completion(
            tool_calls=[("call_1", "calculator", {"expression": "6*7"})], prompt_tokens=1_000_000, completion_tokens=0
        )
    )
    fake_mistral.reply(completion(content="The answer is 42.", prompt_tokens=0, completion_tokens=1_000_000))
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(
            tenant,
            model="mistral-large-latest",
            system_prompt="Use the calculator.",
            parameters={"temperature": 0.1, "random_seed": 7},
        )
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        transcript = list(Message.objects.filter(run=run).order_by("position").values_list("role", flat=True))
    assert run.status == "succeeded" and run.output == "The answer is 42."
    assert run.total_cost == Decimal("2.000000000")  # 1M in at 0.50 + 1M out at 1.50
    assert transcript == ["system", "user", "assistant", "tool", "assistant"]
    first, second = fake_mistral.requests
    assert first["auth"] == "Bearer sk-test-key-123456"
    assert first["body"]["temperature"] == 0.1 and first["body"]["random_seed"] == 7
    assert first["body"]["tools"][0]["function"]["name"] == "calculator"
    tool_message = second["body"]["messages"][-1]
    assert tool_message["role"] == "tool" and '"result": 42' in tool_message["content"]


def test_no_key_fails_clearly(tenant):
    with organization_scope(tenant.organization):
        run = start_run(tenant, model="mistral-small-latest")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "failed" and "no Mistral API key is configured" in run.error


def test_step_limit_stops_the_run(tenant):
    with organization_scope(tenant.organization):
        run = start_run(tenant, tools=["calculator", "current_time"], step_limit=1)
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "failed" and run.error == "the step limit of 1 was reached"


@pytest.mark.django_db(transaction=True)
def test_started_run_executes_on_a_real_worker(tenant, celery_worker):
    with organization_scope(tenant.organization):
        run = start_run(tenant)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = Run.dangerously_unscoped_objects.get(pk=run.pk).status
        if status in ("succeeded", "failed"):
            break
        time.sleep(0.1)
    assert status == "succeeded"


def test_a_run_answered_in_one_call_is_stored_in_few_statements(tenant, django_assert_max_num_queries):
    """Executing a run the model answers at once (an experiment's item) stores its start in
    one write and its answer with its end in another: statements sent stay bounded (each
    write is a dozen), and everything is stored."""
    with organization_scope(tenant.organization):
        run = start_run(tenant, tools=[])
        with django_assert_max_num_queries(32):
            run_execute(run_id=run.pk)
        run.refresh_from_db()
        steps = list(Step.objects.filter(run=run).order_by("started_at", "id").values_list("span_id", "status"))
        asked = Step.objects.get(run=run, span_id="llm-1").input["messages"]
        roles = list(Message.objects.filter(run=run).order_by("position").values_list("role", flat=True))
        events = list(run.stream_events.order_by("seq").values_list("type", flat=True))
    assert run.status == "succeeded" and run.output and run.ended_at is not None
    assert steps == [("root", "ok"), ("llm-1", "ok")]
    assert roles == ["user", "assistant"]
    assert asked == [{"role": "user", "content": "What is (6 * 7) + 0?"}], "the model call as it was asked"
    assert run.step_count == 2 and run.llm_call_count == 1
    assert events[0] == "processing" and events[-1] == "turn_complete"
