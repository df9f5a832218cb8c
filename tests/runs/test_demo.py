"""Sample runs for the demo project."""

from django.core.management import call_command

from agentops.scoping import organization_scope
from runs.models import Run


def test_sample_runs_are_added_once_and_read_like_real_ones(tenant, capsys):
    call_command("seed_demo_runs", "acme/agent")
    assert "Added 3 sample run(s) to acme/agent" in capsys.readouterr().out
    call_command("seed_demo_runs", "acme/agent")
    assert "already has runs" in capsys.readouterr().out
    with organization_scope(tenant.organization):
        runs = list(Run.objects.filter(executed=False).order_by("trace_id"))
        executed = Run.objects.get(executed=True, replay_of__isnull=True)
        replay = Run.objects.get(replay_of=executed)
    assert [run.status for run in runs] == ["succeeded", "succeeded", "failed"]
    assert all(run.total_cost > 0 and run.unpriced_step_count == 0 for run in runs)
    assert runs[0].step_count == 4 and runs[2].step_count == 3
    assert runs[2].error.startswith("ToolTimeout")
    assert executed.status == "succeeded" and "84" in executed.output
    assert executed.unpriced_step_count == 0  # the offline model is priced at zero
    # The demo replay answered its tool calls from the recording, and agrees.
    assert replay.status == "succeeded" and replay.output == executed.output
    assert replay.execution["replay"]["tool_mode"] == "recorded"
