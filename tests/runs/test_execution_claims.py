"""A worker's hold on a run (runs.execution.claims): a run is executed once, a run whose
worker died or was only slow is taken over and resumes without paying twice, and the
attempts limit. Real killed worker processes are in test_worker_killed.py."""

import pytest

from agentops.scoping import organization_scope
from runs.execution import run_cancel, run_execute, run_start
from runs.models import Run, Step, ToolCall
from tests.fake_mistral import completion
from tests.runs.execution_helpers import start_run, use_fake_mistral


def test_a_run_is_executed_once_even_if_delivered_twice(tenant):
    with organization_scope(tenant.organization):
        run = start_run(tenant)
        run_execute(run_id=run.pk)
        run_execute(run_id=run.pk)
        assert Step.objects.filter(run=run, kind="llm").count() == 2


def test_run_whose_worker_died_resumes_without_repeating_a_paid_call(tenant, fake_mistral, monkeypatch):
    from datetime import timedelta

    from django.utils import timezone

    from runs.execution import claims, loop

    fake_mistral.reply(completion(tool_calls=[("c1", "calculator", {"expression": "6*7"})]))
    fake_mistral.reply(completion(content="42"))
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest")

        def die(*args, **kwargs):
            raise SystemExit("the worker was killed")

        monkeypatch.setattr(loop, "run_pending_tools", die)
        with pytest.raises(SystemExit):
            run_execute(run_id=run.pk)
        monkeypatch.undo()
        assert claims.stalled_run_ids() == []  # its heartbeat is fresh
        Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
        assert claims.stalled_run_ids() == [(tenant.organization.pk, run.pk)]
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        assert ToolCall.objects.filter(run=run).count() == 1
    assert run.status == "succeeded" and run.output == "42"
    assert len(fake_mistral.requests) == 2  # the first call was not made again


def test_a_worker_whose_run_was_taken_over_stops_without_writing(tenant, fake_mistral, monkeypatch):
    """A worker silent past RUN_STALL_SECONDS (not dead, only slow) may see its run
    handed to another: its late answer is not stored, and it does not end the run."""
    from agentops.llm.mistral import MistralProvider

    fake_mistral.reply(completion(content="late answer"))
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest")
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

    from runs.execution import claims

    with organization_scope(tenant.organization):
        run = start_run(tenant)
        cancelled = run_start(
            project=tenant.project, agent=run.executed_version.agent, actor=tenant.member, input="1+1"
        )
        run_cancel(run=cancelled, actor=tenant.member)
        assert claims.stalled_run_ids() == []  # just queued: its task is on its way
        Run.objects.filter(pk__in=[run.pk, cancelled.pk]).update(created_at=timezone.now() - timedelta(minutes=10))
        assert claims.stalled_run_ids() == [(tenant.organization.pk, run.pk)]
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

    from runs.execution import claims, loop, starting

    fake_mistral.reply(completion(tool_calls=[("c1", "calculator", {"expression": "6*7"})]))
    fake_mistral.reply(completion(content="42"))
    fake_mistral.reply(completion(content="paid for twice"))
    monkeypatch.setattr(starting, "_enqueue", lambda *args: None)  # this test is the worker
    store_answer = loop.store_answer

    def store_then_die_at_commit(run, state, step, spec, provider, started, parameters, result, position):
        store_answer(run, state, step, spec, provider, started, parameters, result, position)
        if not result.tool_calls:

            def die():
                raise SystemExit("the worker was killed")

            transaction.on_commit(die)

    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest")
        monkeypatch.setattr(loop, "store_answer", store_then_die_at_commit)
        with pytest.raises(SystemExit):
            run_execute(run_id=run.pk)
        monkeypatch.undo()
        # Recovery, once the dead worker's heartbeat is old.
        Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
        for _organization_id, run_id in claims.stalled_run_ids():
            run_execute(run_id=run_id)
        run.refresh_from_db()
        llm_steps = Step.objects.filter(run=run, kind="llm").count()
    assert run.status == "succeeded" and run.output == "42"
    assert len(fake_mistral.requests) == 2, "the stored final answer was not asked for again"
    assert run.llm_call_count == 2 and llm_steps == 2


def test_a_run_that_kills_its_worker_every_time_fails_after_the_attempts_limit(tenant, fake_mistral, monkeypatch):
    """Each attempt makes a paid model call, then the worker dies (as an out-of-memory
    kill would): after RUN_MAX_ATTEMPTS attempts recovery fails the run, saying why."""
    from datetime import timedelta

    from django.conf import settings
    from django.utils import timezone

    from runs.execution import claims, loop

    assert settings.RUN_MAX_ATTEMPTS == 3
    for _ in range(5):
        fake_mistral.reply(completion(tool_calls=[("c1", "calculator", {"expression": "6*7"})]))

    def die(*args, **kwargs):
        raise SystemExit("the worker was killed")

    monkeypatch.setattr(loop, "store_answer", die)
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest")
        with pytest.raises(SystemExit):
            run_execute(run_id=run.pk)  # the first attempt
        for _attempt in (2, 3, 4):
            Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now() - timedelta(minutes=10))
            assert claims.stalled_run_ids() == [(tenant.organization.pk, run.pk)]
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
    assert claims.stalled_run_ids() == []


def test_a_claim_returns_the_run_with_its_project_and_organization_in_one_statement(
    tenant, other_tenant, django_assert_num_queries
):
    """The claim and the read of what the worker needs are one statement; a run of
    another organization than the task's is not taken, and a run taken is not taken again."""
    from runs.execution.claims import claim_run

    with organization_scope(tenant.organization):
        run = start_run(tenant)
    with organization_scope(other_tenant.organization):
        assert claim_run(run.pk) is None
    with organization_scope(tenant.organization):
        with django_assert_num_queries(1):
            claimed = claim_run(run.pk)
            assert claimed.project.organization == tenant.organization
            assert claimed.project.slug == tenant.project.slug
        stored = Run.objects.get(pk=run.pk)
        assert claimed.status == stored.status == "running"
        assert claimed.worker == stored.worker != ""
        assert claimed.execution == stored.execution and "spec" in claimed.execution
        assert claimed.input == stored.input and claimed.metadata == stored.metadata
        assert claim_run(run.pk) is None  # its worker beats: nobody else takes it


def test_an_executed_run_is_created_with_its_executor_fields(tenant, django_assert_max_num_queries):
    """create_executed_run stores the run through ingest and marks it executed in one more
    statement, returning the stored run."""
    from runs.execution import create_executed_run, version_spec
    from runs.services.agents import agent_create

    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=tenant.member, name="a", model="offline")
        version = agent.versions.get()
        # The project's redaction settings, ingest's five (lock, insert, fields, totals,
        # ledger mark) and the executor's fields.
        with django_assert_max_num_queries(7):
            run = create_executed_run(
                project=tenant.project,
                actor=None,
                name="item",
                agent_name="a",
                input="hello",
                spec=version_spec(version),
                parameters={"temperature": 0},
                version=version,
                audit=None,
                fields={"tags": ["experiment:1"], "metadata": {"experiment": 1}},
            )
        stored = Run.objects.get(pk=run.pk)
    assert stored.executed and stored.executed_version_id == version.pk and stored.status == "queued"
    assert stored.execution == {"parameters": {"temperature": 0}, "spec": version_spec(version)}
    assert stored.metadata == {"experiment": 1, "executed": True, "parameters": {"temperature": 0}}
    for field in ("status", "trace_id", "input", "metadata", "tags", "execution", "executed", "created_at"):
        assert getattr(run, field) == getattr(stored, field), field
    assert run.executed_version is version
