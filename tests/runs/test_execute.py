"""The platform's own executor: the tool-calling loop through the real mistralai SDK
against a local Mistral-speaking server, the offline model, cancellation, limits, and a
run on a real Celery worker."""

import time
from decimal import Decimal

import pytest

from agentops.scoping import organization_scope
from runs.models import MemorySnapshot, Message, Run, Step, ToolCall
from runs.services.agents import agent_create
from runs.services.execute import run_cancel, run_execute, run_start
from tests.fake_mistral import completion


def _start(tenant, django_capture_on_commit_callbacks=None, **agent_fields):
    fields = {"name": "calc", "model": "offline", "tools": ["calculator"], **agent_fields}
    agent = agent_create(project=tenant.project, actor=tenant.member, **fields)
    return run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is (6 * 7) + 0?")


def _use_fake_mistral(tenant, fake_mistral):
    """The organization's Mistral key, with the local Mistral-speaking server as base URL."""
    fake_mistral.serve(tenant.organization)


def test_offline_agent_runs_the_tool_loop_end_to_end(tenant):
    with organization_scope(tenant.organization):
        run = _start(tenant, tools=["calculator", "memory_set"])
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
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(
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


def test_rate_limit_is_retried_honouring_retry_after(tenant, fake_mistral):
    fake_mistral.reply({"message": "slow down"}, status=429, headers={"Retry-After": "1"})
    fake_mistral.reply(completion(content="done"))
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest", tools=[])
        started = time.monotonic()
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "succeeded" and len(fake_mistral.requests) == 2
    assert time.monotonic() - started >= 1.0


def test_provider_failure_fails_the_run_with_the_failing_step(tenant, fake_mistral, settings):
    for _ in range(20):
        fake_mistral.reply({"message": "bad request"}, status=400)
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        failing = Step.objects.get(run=run, span_id="llm-1")
    assert run.status == "failed" and run.error.startswith("step 1: Mistral answered HTTP 400")
    assert failing.status == "error"


def test_no_key_fails_clearly(tenant):
    with organization_scope(tenant.organization):
        run = _start(tenant, model="mistral-small-latest")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "failed" and "no Mistral API key is configured" in run.error


def test_step_limit_stops_the_run(tenant):
    with organization_scope(tenant.organization):
        run = _start(tenant, tools=["calculator", "current_time"], step_limit=1)
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "failed" and run.error == "the step limit of 1 was reached"


def test_cancelling_a_queued_run_stops_it_before_it_starts(tenant):
    with organization_scope(tenant.organization):
        run = _start(tenant)
        run_cancel(run=run, actor=tenant.member)
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        assert Step.objects.filter(run=run, kind="llm").count() == 0
    assert run.status == "cancelled"


def test_a_run_is_executed_once_even_if_delivered_twice(tenant):
    with organization_scope(tenant.organization):
        run = _start(tenant)
        run_execute(run_id=run.pk)
        run_execute(run_id=run.pk)
        assert Step.objects.filter(run=run, kind="llm").count() == 2


@pytest.mark.django_db(transaction=True)
def test_started_run_executes_on_a_real_worker(tenant, celery_worker):
    with organization_scope(tenant.organization):
        run = _start(tenant)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        status = Run.dangerously_unscoped_objects.get(pk=run.pk).status
        if status in ("succeeded", "failed"):
            break
        time.sleep(0.1)
    assert status == "succeeded"


def test_repeated_action_gets_a_warning_then_stops_the_run(tenant, fake_mistral):
    for _ in range(6):
        fake_mistral.reply(completion(tool_calls=[("c", "calculator", {"expression": "1+1"})]))
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "failed"
    assert run.error == "repeated action: calculator was called with the same arguments 4 times in a row"
    fourth_request = fake_mistral.requests[3]["body"]["messages"]
    assert fourth_request[-1]["role"] == "user" and "same arguments 3 times in a row" in fourth_request[-1]["content"]
    assert len(fake_mistral.requests) == 4


def test_run_whose_worker_died_resumes_without_repeating_a_paid_call(tenant, fake_mistral, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from runs.services import execute

    fake_mistral.reply(completion(tool_calls=[("c1", "calculator", {"expression": "6*7"})]))
    fake_mistral.reply(completion(content="42"))
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest")

        def die(*args, **kwargs):
            raise SystemExit("the worker was killed")

        monkeypatch.setattr(execute, "_run_pending_tools", die)
        with pytest.raises(SystemExit):
            run_execute(run_id=run.pk)
        monkeypatch.undo()
        assert execute.stalled_run_ids() == []  # its heartbeat is fresh
        Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
        assert execute.stalled_run_ids() == [(tenant.organization.pk, run.pk)]
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        assert ToolCall.objects.filter(run=run).count() == 1
    assert run.status == "succeeded" and run.output == "42"
    assert len(fake_mistral.requests) == 2  # the first call was not made again


def test_long_conversation_is_compacted_and_the_compaction_recorded(tenant, fake_mistral, monkeypatch):
    from agentops.llm import context

    monkeypatch.setitem(context.CONTEXT_WINDOWS, "mistral-small", 400)
    for n in range(6):
        fake_mistral.reply(completion(tool_calls=[(f"c{n}", "calculator", {"expression": f"{n} + {n} * 1000"})]))
    fake_mistral.reply(completion(content="All done."))
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest", system_prompt="You are a careful calculator. " * 5)
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        compactions = list(Step.objects.filter(run=run, name="context compaction"))
        summarising = Step.objects.filter(run=run, name__startswith="summarise").count()
    assert run.status == "succeeded" and run.output == "All done."
    assert compactions and summarising == len(compactions)
    assert compactions[0].attributes["messages_after"] < compactions[0].attributes["messages_before"]
    agent_requests = [
        r["body"]["messages"]
        for r in fake_mistral.requests
        if not r["body"]["messages"][0]["content"].startswith("Summarise")
    ]
    last = agent_requests[-1]
    assert last[0]["role"] == "system" and last[1] == {"role": "user", "content": "What is (6 * 7) + 0?"}
    assert any("Summary of the earlier conversation: The user asked" in (m.get("content") or "") for m in last)
    # Uncompacted, the last request would hold system + user + 6 x (tool call, tool result) = 14.
    assert len(last) < 14


def test_server_error_is_retried_then_the_run_goes_on(tenant, fake_mistral):
    fake_mistral.reply({"message": "overloaded"}, status=503)
    fake_mistral.reply(completion(content="fine now"))
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest", tools=[])
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "succeeded" and run.output == "fine now" and len(fake_mistral.requests) == 2


def test_a_model_call_that_is_too_slow_fails_the_run(tenant, fake_mistral, settings):
    settings.LLM_CALL_TIMEOUT_SECONDS = 1
    settings.LLM_RETRY_MAX_SECONDS = 1
    for _ in range(3):
        fake_mistral.reply(completion(content="too late"), delay=3)
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest", tools=[])
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "failed" and run.error.startswith("step 1: calling Mistral failed")


def test_a_worker_whose_run_was_taken_over_stops_without_writing(tenant, fake_mistral, monkeypatch):
    """A worker silent past RUN_STALL_SECONDS (not dead, only slow) may see its run
    handed to another: its late answer is not stored, and it does not end the run."""
    from agentops.llm.mistral import MistralProvider

    fake_mistral.reply(completion(content="late answer"))
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest")
        answer = MistralProvider.chat

        def slow_chat(self, **kwargs):
            result = answer(self, **kwargs)
            # Meanwhile the recovery task gave the run to another worker.
            Run.objects.filter(pk=run.pk).update(worker="other-host:1:abcd")
            return result

        monkeypatch.setattr(MistralProvider, "chat", slow_chat)
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        kinds = sorted(Step.objects.filter(run=run).values_list("kind", flat=True))
    assert run.status == "running" and run.worker == "other-host:1:abcd"
    assert kinds == ["agent"], "the late model call was not stored"
    assert "late answer" not in str(run.execution)


def test_a_queued_run_no_worker_took_is_handed_out_again(tenant):
    from datetime import timedelta

    from django.utils import timezone

    from runs.services import execute

    with organization_scope(tenant.organization):
        run = _start(tenant)
        cancelled = run_start(
            project=tenant.project, agent=run.executed_version.agent, actor=tenant.member, input="1+1"
        )
        run_cancel(run=cancelled, actor=tenant.member)
        assert execute.stalled_run_ids() == []  # just queued: its task is on its way
        Run.objects.filter(pk__in=[run.pk, cancelled.pk]).update(created_at=timezone.now() - timedelta(minutes=10))
        assert execute.stalled_run_ids() == [(tenant.organization.pk, run.pk)]
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "succeeded"


@pytest.mark.django_db(transaction=True)
def test_a_worker_that_dies_right_after_storing_the_final_answer_does_not_pay_for_it_again(
    tenant, fake_mistral, monkeypatch
):
    """The worker is killed the moment the final answer's step is committed: recovery
    finds the run ended with that answer, and the model is not asked again."""
    from datetime import timedelta

    from django.db import transaction
    from django.utils import timezone

    from runs.services import execute

    fake_mistral.reply(completion(tool_calls=[("c1", "calculator", {"expression": "6*7"})]))
    fake_mistral.reply(completion(content="42"))
    fake_mistral.reply(completion(content="paid for twice"))
    monkeypatch.setattr(execute, "_enqueue", lambda *args: None)  # this test is the worker
    store_answer = execute._store_answer

    def store_then_die_at_commit(run, state, step, spec, provider, started, parameters, result, position):
        store_answer(run, state, step, spec, provider, started, parameters, result, position)
        if not result.tool_calls:

            def die():
                raise SystemExit("the worker was killed")

            transaction.on_commit(die)

    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest")
        monkeypatch.setattr(execute, "_store_answer", store_then_die_at_commit)
        with pytest.raises(SystemExit):
            run_execute(run_id=run.pk)
        monkeypatch.undo()
        # Recovery, once the dead worker's heartbeat is old.
        Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
        for _organization_id, run_id in execute.stalled_run_ids():
            run_execute(run_id=run_id)
        run.refresh_from_db()
        llm_steps = Step.objects.filter(run=run, kind="llm").count()
    assert run.status == "succeeded" and run.output == "42"
    assert len(fake_mistral.requests) == 2, "the stored final answer was not asked for again"
    assert run.llm_call_count == 2 and llm_steps == 2


def test_cancelling_a_running_run_ends_it_after_the_step_in_progress(tenant, fake_mistral, monkeypatch):
    import dataclasses

    from runs.tools.builtins import BUILTIN_TOOLS

    fake_mistral.reply(completion(tool_calls=[("c1", "calculator", {"expression": "6*7"})]))
    fake_mistral.reply(completion(content="never asked for"))
    real = BUILTIN_TOOLS["calculator"]

    def cancelled_meanwhile(arguments, context):
        # A person cancels the run while its tool runs.
        run_cancel(run=Run.objects.get(pk=context.run_id), actor=tenant.member)
        return real.call(arguments, context)

    monkeypatch.setitem(BUILTIN_TOOLS, "calculator", dataclasses.replace(real, call=cancelled_meanwhile))
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        steps = sorted(Step.objects.filter(run=run).values_list("span_id", flat=True))
    assert run.status == "cancelled" and run.error == "cancelled"
    assert steps == ["llm-1", "root", "tool-1-0"], "the tool's step is kept; no model call after it"
    assert len(fake_mistral.requests) == 1


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_run_while_the_model_streams_stops_reading_the_answer(tenant, fake_mistral, celery_worker):
    # About 40 s of answer, three words every 0.2 s: the run must end long before that.
    fake_mistral.reply(completion(content="word " * 600), chunk_delay=0.2)
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest", tools=[])
    deadline = time.monotonic() + 30
    while not fake_mistral.requests and time.monotonic() < deadline:
        time.sleep(0.05)
    assert fake_mistral.requests, "the worker never called the model"
    with organization_scope(tenant.organization):
        run_cancel(run=run, actor=tenant.member)
    deadline = time.monotonic() + 20
    while (status := Run.dangerously_unscoped_objects.get(pk=run.pk).status) == "running":
        assert time.monotonic() < deadline, "the run still streams its answer after the cancellation"
        time.sleep(0.1)
    run.refresh_from_db()
    step = Step.dangerously_unscoped_objects.get(run=run, span_id="llm-1")
    assert status == "cancelled" and run.error == "cancelled" and run.output is None
    assert step.status == "error" and step.error == "cancelled while the model was answering"


def test_a_run_that_kills_its_worker_every_time_fails_after_the_attempts_limit(tenant, fake_mistral, monkeypatch):
    """Each attempt makes a paid model call, then the worker dies (as an out-of-memory
    kill would): after RUN_MAX_ATTEMPTS attempts recovery fails the run, saying why."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from runs.services import execute

    assert settings.RUN_MAX_ATTEMPTS == 3
    for _ in range(5):
        fake_mistral.reply(completion(tool_calls=[("c1", "calculator", {"expression": "6*7"})]))

    def die(*args, **kwargs):
        raise SystemExit("the worker was killed")

    monkeypatch.setattr(execute, "_store_answer", die)
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        run = _start(tenant, model="mistral-small-latest")
        with pytest.raises(SystemExit):
            run_execute(run_id=run.pk)  # the first attempt
        for _attempt in (2, 3, 4):
            Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
            assert execute.stalled_run_ids() == [(tenant.organization.pk, run.pk)]
            try:
                run_execute(run_id=run.pk)  # recovery hands it to a worker again
            except SystemExit:
                continue
        run.refresh_from_db()
    assert run.status == "failed"
    assert run.error == (
        "given up after 3 attempts: the worker executing the run stopped (killed or crashed) during each of them, "
        "so it is not tried again (RUN_MAX_ATTEMPTS is 3)"
    )
    assert len(fake_mistral.requests) == 3, "one paid model call per attempt, and no fourth attempt"
    assert execute.stalled_run_ids() == []


def test_a_model_endpoint_that_refuses_connections_fails_the_run_after_a_few_attempts(tenant, monkeypatch):
    """A dead endpoint must not hold a worker for the SDK's whole backoff budget (about
    75 s): connections are counted where they are made, in the socket layer."""
    import socket

    from agentops.services.secrets import provider_secret_set

    with socket.socket() as probe:  # a port nothing listens on once the probe is closed
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    attempts = []
    create_connection = socket.create_connection

    def counted(address, *args, **kwargs):
        if tuple(address)[1] == port:
            attempts.append(address)
        return create_connection(address, *args, **kwargs)

    monkeypatch.setattr(socket, "create_connection", counted)
    with organization_scope(tenant.organization):
        provider_secret_set(
            organization=tenant.organization,
            actor=None,
            provider="mistral",
            api_key="sk-test-key-123456",
            base_url=f"http://127.0.0.1:{port}",
        )
        run = _start(tenant, model="mistral-small-latest", tools=[])
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        failing = Step.objects.get(run=run, span_id="llm-1")
    assert run.status == "failed"
    assert len(attempts) == 3, "three connection attempts, not the SDK's backoff budget's worth"
    assert run.error.startswith(f"step 1: calling Mistral failed: cannot connect to http://127.0.0.1:{port} (")
    assert "Connection refused" in run.error and run.error.endswith("; 3 attempts)")
    assert failing.status == "error"
