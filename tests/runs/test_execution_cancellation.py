"""Cancelling executed runs (runs.execution.cancellation): queued and running runs.
Waiting runs are in test_approvals.py, a cancellation while the model streams in
test_execution_model_calls.py."""

from agentops.scoping import organization_scope
from runs.execution import run_cancel, run_execute
from runs.models import Run, Step
from tests.fake_mistral import completion
from tests.runs.execution_helpers import start_run, use_fake_mistral


def test_cancelling_a_queued_run_stops_it_before_it_starts(tenant):
    with organization_scope(tenant.organization):
        run = start_run(tenant)
        run_cancel(run=run, actor=tenant.member)
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        assert Step.objects.filter(run=run, kind="llm").count() == 0
    assert run.status == "cancelled"


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
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        steps = sorted(Step.objects.filter(run=run).values_list("span_id", flat=True))
    assert run.status == "cancelled" and run.error == "cancelled"
    assert steps == ["llm-1", "root", "tool-1-0"], "the tool's step is kept; no model call after it"
    assert len(fake_mistral.requests) == 1
