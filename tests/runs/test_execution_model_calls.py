"""One model call of an executed run (runs.execution.model_calls): retries, failures and
time limits of the call, and a cancellation while the model streams its answer."""

import time
from decimal import Decimal

import pytest

from agentops.scoping import organization_scope
from runs.execution import run_cancel, run_execute
from runs.models import Run, Step
from tests.fake_mistral import completion
from tests.runs.execution_helpers import start_run, use_fake_mistral


def test_rate_limit_is_retried_honouring_retry_after(tenant, fake_mistral):
    fake_mistral.reply({"message": "slow down"}, status=429, headers={"Retry-After": "1"})
    fake_mistral.reply(completion(content="done"))
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest", tools=[])
        started = time.monotonic()
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "succeeded" and len(fake_mistral.requests) == 2
    assert time.monotonic() - started >= 1.0


def test_provider_failure_fails_the_run_with_the_failing_step(tenant, fake_mistral, settings):
    for _ in range(20):
        fake_mistral.reply({"message": "bad request"}, status=400)
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        failing = Step.objects.get(run=run, span_id="llm-1")
    assert run.status == "failed" and run.error.startswith("step 1: Mistral answered HTTP 400")
    assert failing.status == "error"


def test_server_error_is_retried_then_the_run_goes_on(tenant, fake_mistral):
    fake_mistral.reply({"message": "overloaded"}, status=503)
    fake_mistral.reply(completion(content="fine now"))
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest", tools=[])
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "succeeded" and run.output == "fine now" and len(fake_mistral.requests) == 2


def test_a_model_call_that_is_too_slow_fails_the_run(tenant, fake_mistral, settings):
    settings.LLM_CALL_TIMEOUT_SECONDS = 1
    settings.LLM_RETRY_MAX_SECONDS = 1
    for _ in range(3):
        fake_mistral.reply(completion(content="too late"), delay=3)
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest", tools=[])
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "failed" and run.error.startswith("step 1: calling Mistral failed")


@pytest.mark.django_db(transaction=True)
def test_cancelling_a_run_while_the_model_streams_stops_reading_the_answer(tenant, fake_mistral, celery_worker):
    # About 40 s of answer, three words every 0.2 s: the run must end long before that.
    fake_mistral.reply(completion(content="word " * 600), chunk_delay=0.2)
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest", tools=[])
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
        run = start_run(tenant, model="mistral-small-latest", tools=[])
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        failing = Step.objects.get(run=run, span_id="llm-1")
    assert run.status == "failed"
    assert len(attempts) == 3, "three connection attempts, not the SDK's backoff budget's worth"
    assert run.error.startswith(f"step 1: calling Mistral failed: cannot connect to http://127.0.0.1:{port} (")
    assert "Connection refused" in run.error and run.error.endswith("; 3 attempts)")
    assert failing.status == "error"


def test_mistral_cached_and_reasoning_tokens_are_stored_on_the_step_and_priced_once(tenant, fake_mistral):
    body = completion(content="42", model="magistral-medium-2509", prompt_tokens=2_000, completion_tokens=300)
    body["usage"]["prompt_tokens_details"] = {"cached_tokens": 500}
    body["usage"]["completion_tokens_details"] = {"reasoning_tokens": 200}
    fake_mistral.reply(body)
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="magistral-medium-2509", tools=[])
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        step = Step.objects.get(run=run, span_id="llm-1")
    assert run.status == "succeeded"
    assert (step.input_tokens, step.cached_input_tokens, step.output_tokens, step.reasoning_output_tokens) == (
        2_000,
        500,
        300,
        200,
    )
    # Magistral Medium: $2 input (no cache rate published), $5 output, reasoning included.
    assert step.cost == (2_000 * Decimal("2") + 300 * Decimal("5")) / 1_000_000
    assert run.reasoning_output_tokens == 200
