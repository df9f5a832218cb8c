"""A worker killed mid-run, for real: a `celery worker` process is SIGKILLed while it
waits for a model's answer, the recovery task finds the stalled run and another worker
resumes it from its saved state, without paying again for the calls that succeeded; a
run cancelled while it had no worker ends cancelled."""

import socket
import time
from datetime import datetime
from decimal import Decimal

import pytest
from django.utils import timezone

from agentops.scoping import organization_scope
from runs.execution import run_cancel, run_execute, run_start, stalled_run_ids
from runs.models import Message, Run, Step
from runs.services.agents import agent_create
from runs.tasks import recover_stalled_runs
from tests.fake_mistral import completion
from tests.worker_process import kill, worker_process

pytestmark = pytest.mark.django_db(transaction=True)

TIMEOUT_SECONDS = 20
# Long enough that the killed worker never gets this answer; the fake server's thread
# that sleeps on it is a daemon and does not hold up its shutdown.
NEVER_DELIVERED_SECONDS = 30


def _wait_for(condition, what: str, timeout: float = TIMEOUT_SECONDS):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out after {timeout} s waiting for {what}")


def _run(pk: int) -> Run:
    return Run.dangerously_unscoped_objects.get(pk=pk)


def _start_run(tenant, fake_mistral) -> Run:
    with organization_scope(tenant.organization):
        fake_mistral.serve(tenant.organization)
        agent = agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="calc",
            model="mistral-large-latest",
            tools=["calculator"],
            system_prompt="Use the calculator.",
        )
        # Committed at once (transactional test): the task goes to the broker.
        return run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6*7?")


def _kill_during_the_second_model_call(tenant, fake_mistral, tmp_path) -> tuple[Run, datetime]:
    """Start a run on a worker process and SIGKILL it while step 2's model call waits for
    its answer (step 1 and its tool call are stored). Returns the run and the kill time."""
    log = tmp_path / "worker.log"
    with worker_process(log) as worker:
        run = _start_run(tenant, fake_mistral)
        try:
            _wait_for(lambda: len(fake_mistral.requests) == 2, "the worker's second model call")
        except AssertionError as exc:
            raise AssertionError(f"{exc}; the worker's log:\n{log.read_text()[-3000:]}") from None
        killed_at = timezone.now()
        kill(worker)
    assert worker.returncode == -9
    return _run(run.pk), killed_at


def _steps(run: Run) -> list[tuple[str, str]]:
    return list(Step.dangerously_unscoped_objects.filter(run=run).order_by("span_id").values_list("span_id", "kind"))


def test_run_of_a_killed_worker_resumes_on_another_without_paying_twice(
    tenant, fake_mistral, tmp_path, settings, request
):
    fake_mistral.reply(
        completion(
            tool_calls=[("call_1", "calculator", {"expression": "6*7"})], prompt_tokens=1_000_000, completion_tokens=0
        )
    )
    # The killed worker's call to the model: it never gets this answer.
    fake_mistral.reply(
        completion(content="never delivered", prompt_tokens=9_000_000, completion_tokens=9_000_000),
        delay=NEVER_DELIVERED_SECONDS,
    )
    # The resumed run's call to the model, for step 2 again.
    fake_mistral.reply(completion(content="The answer is 42.", prompt_tokens=0, completion_tokens=1_000_000))

    run, killed_at = _kill_during_the_second_model_call(tenant, fake_mistral, tmp_path)

    assert run.status == "running" and run.heartbeat_at < killed_at
    killed_claim = run.worker  # host:pid:nonce of the killed worker
    assert killed_claim.startswith(f"{socket.gethostname()}:")
    assert run.execution["step"] == 1 and run.execution["pending"] == []  # saved after step 1's tool
    assert _steps(run) == [("llm-1", "llm"), ("root", "agent"), ("tool-1-0", "tool")]
    # Silent for less than RUN_STALL_SECONDS: a slow worker's run is not taken from it.
    assert stalled_run_ids() == []

    settings.RUN_STALL_SECONDS = 1
    _wait_for(lambda: stalled_run_ids() == [(tenant.organization.pk, run.pk)], "the run to count as stalled")
    request.getfixturevalue("celery_worker")  # the worker that recovers it, in this process
    assert recover_stalled_runs.delay().get(timeout=TIMEOUT_SECONDS) == 1
    run = _wait_for(lambda: (r := _run(run.pk)).status in ("succeeded", "failed") and r, "the run to end")

    assert run.status == "succeeded", run.error
    assert run.output == "The answer is 42."
    # Three calls reached the model: step 1 once, step 2 by the killed worker and again on
    # resuming, with step 1's tool result and nothing else new.
    first, killed, resumed = (r["body"]["messages"] for r in fake_mistral.requests)
    assert [m["role"] for m in first] == ["system", "user"]
    assert killed == resumed
    assert [m["role"] for m in resumed] == ["system", "user", "assistant", "tool"]
    assert resumed[2]["tool_calls"][0]["id"] == "call_1"
    assert resumed[3]["tool_call_id"] == "call_1" and '"result": 42' in resumed[3]["content"]
    # Every step and message stored once; each paid call counted once.
    steps = _steps(run)
    with organization_scope(tenant.organization):
        transcript = list(Message.objects.filter(run=run).order_by("position").values_list("role", flat=True))
    assert steps == [("llm-1", "llm"), ("llm-2", "llm"), ("root", "agent"), ("tool-1-0", "tool")]
    assert transcript == ["system", "user", "assistant", "tool", "assistant"]
    assert run.llm_call_count == 2 and run.step_count == 4
    assert run.input_tokens == 1_000_000 and run.output_tokens == 1_000_000
    assert run.total_cost == Decimal("2.000000000")  # 1M in at 0.50 + 1M out at 1.50
    # Claimed again by another worker, which beat after the kill.
    assert run.worker != killed_claim and run.worker.startswith(f"{socket.gethostname()}:")
    assert run.heartbeat_at > killed_at


def test_run_cancelled_after_its_worker_was_killed_ends_cancelled(tenant, fake_mistral, tmp_path, settings, request):
    fake_mistral.reply(completion(tool_calls=[("call_1", "calculator", {"expression": "6*7"})]))
    fake_mistral.reply(completion(content="never delivered"), delay=NEVER_DELIVERED_SECONDS)

    run, _killed_at = _kill_during_the_second_model_call(tenant, fake_mistral, tmp_path)
    with organization_scope(tenant.organization):
        run_cancel(run=run, actor=tenant.member)
    # Nobody is left to notice the cancellation: the run is still "running".
    assert _run(run.pk).status == "running"

    settings.RUN_STALL_SECONDS = 1
    _wait_for(lambda: stalled_run_ids() == [(tenant.organization.pk, run.pk)], "the run to count as stalled")
    request.getfixturevalue("celery_worker")
    assert recover_stalled_runs.delay().get(timeout=TIMEOUT_SECONDS) == 1
    run = _wait_for(lambda: (r := _run(run.pk)).status != "running" and r, "the run to end")

    assert run.status == "cancelled" and run.error == "cancelled"
    assert len(fake_mistral.requests) == 2  # no model call after the cancellation
    assert _steps(run) == [("llm-1", "llm"), ("root", "agent"), ("tool-1-0", "tool")]


def test_a_run_that_kills_its_worker_on_every_attempt_fails_after_the_attempts_limit(
    tenant, fake_mistral, tmp_path, settings
):
    """Each attempt's worker process is SIGKILLed while it waits for the model (as an
    out-of-memory kill would): after RUN_MAX_ATTEMPTS (3) attempts, recovery fails the run
    instead of paying for a fourth model call."""
    for _ in range(4):
        fake_mistral.reply(completion(content="never delivered"), delay=NEVER_DELIVERED_SECONDS)
    settings.RUN_STALL_SECONDS = 1  # this process's recovery; the workers get the same
    run = None
    for attempt in (1, 2, 3):
        log = tmp_path / f"worker-{attempt}.log"
        with worker_process(log, name=f"doomed{attempt}", RUN_STALL_SECONDS="1") as worker:
            if run is None:
                run = _start_run(tenant, fake_mistral)
            else:
                stalled = [(tenant.organization.pk, run.pk)]
                _wait_for(lambda stalled=stalled: stalled_run_ids() == stalled, "the run to stall")
                assert recover_stalled_runs() == 1  # hands it to the worker process
            try:
                _wait_for(lambda n=attempt: len(fake_mistral.requests) == n, f"attempt {attempt}'s model call")
            except AssertionError as exc:
                raise AssertionError(f"{exc}; the worker's log:\n{log.read_text()[-3000:]}") from None
            kill(worker)
        assert _run(run.pk).status == "running"

    _wait_for(lambda: stalled_run_ids() == [(tenant.organization.pk, run.pk)], "the run to stall")
    with organization_scope(tenant.organization):
        run_execute(run_id=run.pk)  # what the recovery task's execute_run does on a worker
    run = _run(run.pk)
    assert run.status == "failed"
    assert run.error.startswith("given up after 3 attempts: the worker executing the run stopped")
    assert len(fake_mistral.requests) == 3, "no fourth paid model call"
    assert stalled_run_ids() == []
