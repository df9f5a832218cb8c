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
        executed = Run.objects.get(executed=True, replay_of__isnull=True, agent_session__isnull=True)
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


def test_each_sample_run_can_be_replayed_from_its_page_without_a_mistral_key(tenant, client_for):
    """A newcomer's first replay: the sample runs offer the replay form, starting on the
    offline model (no key yet), and the replay succeeds with its tool calls served from
    the recording."""
    from runs.execution import run_execute

    call_command("seed_demo_runs", "acme/agent")
    member = client_for(tenant.member)
    with organization_scope(tenant.organization):
        samples = list(Run.objects.filter(executed=False).order_by("trace_id"))
    assert len(samples) == 3
    for sample in samples:
        page_url = f"/o/acme/p/agent/runs/{sample.pk}/"
        html = member.get(page_url).content.decode()
        assert 'id="replay-refusal"' not in html, html[html.find("replay-refusal") - 100 :][:400]
        assert 'id="replay-start"' in html and 'name="model" value="offline"' in html
        assert "has no Mistral key" in html

        response = member.post(
            f"{page_url}replays/",
            {
                "model": "offline",
                "system_prompt": "You are the support agent of Acme. Use the tools; answer in two sentences.",
                "tools": [tool for tool in ("docs_search", "payments_lookup") if tool in html],
                "tool_mode": "recorded",
                "unmatched": "fail",
                "repeat": "1",
            },
        )
        assert response.status_code == 302, response
        with organization_scope(tenant.organization):
            replay = Run.objects.get(replay_of=sample)
            run_execute(run_id=replay.pk)
            replay.refresh_from_db()
            served = list(replay.steps.filter(kind="tool").values_list("attributes__served", flat=True))
        assert replay.status == "succeeded", replay.error
        assert served == ["recorded"]


def test_the_demo_session_has_turns_that_each_see_the_ones_before(tenant, capsys):
    from runs.models import Session
    from runs.services.demo import DEMO_SESSION_MESSAGES

    call_command("seed_demo_runs", "acme/agent")
    assert "Added a demo session with 3 turns" in capsys.readouterr().out
    call_command("seed_demo_runs", "acme/agent")
    with organization_scope(tenant.organization):
        session = Session.objects.get()
        turns = list(Run.objects.filter(agent_session=session).order_by("turn"))
    assert [(t.turn, t.input, t.status) for t in turns] == [
        (n + 1, text, "succeeded") for n, text in enumerate(DEMO_SESSION_MESSAGES)
    ]
    users = [m["content"] for m in turns[-1].execution["conversation"] if m["role"] == "user"]
    assert users == DEMO_SESSION_MESSAGES, "the last turn carries the whole conversation"
