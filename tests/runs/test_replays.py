"""Replays: a recorded run re-run with changes through the real mistralai SDK against a
local Mistral-speaking server, with recorded or live tools, forked, repeated; and the API."""

import dataclasses
import uuid
from datetime import timedelta

import pytest
from django.utils import timezone

from agentops.scoping import organization_scope
from runs.events import RunEvent, StepEvent, ToolCallEvent
from runs.execution import run_execute, run_start
from runs.ingest import ingest
from runs.models import Run, Step, ToolCall
from runs.services.agents import agent_create
from runs.services.replay import replay_groups, replay_start
from runs.tools.builtins import BUILTIN_TOOLS
from tests.fake_mistral import completion

CALC = ("call_1", "calculator", {"expression": "6*7"})


@pytest.fixture
def live_calculator_calls(monkeypatch):
    """Every live call of the calculator tool, so a test can prove none was made."""
    calls = []
    real = BUILTIN_TOOLS["calculator"]

    def spy(arguments, context):
        calls.append(arguments)
        return real.call(arguments, context)

    monkeypatch.setitem(BUILTIN_TOOLS, "calculator", dataclasses.replace(real, call=spy))
    return calls


def _use_fake_mistral(tenant, fake_mistral):
    fake_mistral.serve(tenant.organization)


def _execute(run) -> Run:
    run_execute(run_id=run.pk)
    return Run.objects.get(pk=run.pk)


def _source(tenant, fake_mistral, *answers, tools=("calculator",), parameters=None) -> Run:
    """An executed run of a Mistral agent, answered by ``answers`` in turn."""
    for answer in answers:
        fake_mistral.reply(answer)
    _use_fake_mistral(tenant, fake_mistral)
    agent = agent_create(
        project=tenant.project,
        actor=tenant.member,
        name=f"calc-{uuid.uuid4().hex[:6]}",
        model="mistral-large-latest",
        system_prompt="Use the calculator.",
        tools=list(tools),
        parameters=parameters or {"temperature": 0.1, "random_seed": 1},
    )
    run = _execute(run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6*7?"))
    assert run.status == "succeeded", run.error
    return run


def test_replay_with_another_temperature_and_seed_and_recorded_tools(tenant, fake_mistral, live_calculator_calls):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(tool_calls=[CALC]), completion(content="It is 42."))
        assert live_calculator_calls == [{"expression": "6*7"}]  # the source called it for real
        sent_before = len(fake_mistral.requests)

        fake_mistral.reply(completion(tool_calls=[("other_id", "calculator", {"expression": "6*7"})]))
        fake_mistral.reply(completion(content="Forty-two."))
        (replay,) = replay_start(
            source=source, actor=tenant.member, overrides={"temperature": 0.9, "random_seed": 3}, tool_mode="recorded"
        )
        replay = _execute(replay)
        tool_step = Step.objects.get(run=replay, kind="tool")
        call = ToolCall.objects.get(run=replay)

    assert replay.status == "succeeded" and replay.output == "Forty-two."
    assert replay.replay_of_id == source.pk and replay.executed
    requests = fake_mistral.requests[sent_before:]
    assert [r["body"]["temperature"] for r in requests] == [0.9, 0.9]
    assert [r["body"]["random_seed"] for r in requests] == [3, 3]
    assert requests[0]["body"]["messages"][0] == {"role": "system", "content": "Use the calculator."}
    # Served from the recording: no live call, the source's result.
    assert live_calculator_calls == [{"expression": "6*7"}], "a recorded replay calls no live tool"
    assert call.result == {"expression": "6*7", "result": 42}
    assert tool_step.attributes["served"] == "recorded" and tool_step.attributes["recorded_call_id"] == "call_1"


def test_a_call_the_original_never_made_fails_the_replay_by_default(tenant, fake_mistral, live_calculator_calls):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(tool_calls=[CALC]), completion(content="42"))
        fake_mistral.reply(completion(tool_calls=[("c9", "calculator", {"expression": "7*7"})]))
        (replay,) = replay_start(source=source, actor=tenant.member, tool_mode="recorded", unmatched="fail")
        replay = _execute(replay)
        tool_step = Step.objects.get(run=replay, kind="tool")
    assert replay.status == "failed"
    assert "never used" in replay.error and "7*7" in replay.error and "unmatched calls fail" in replay.error
    assert tool_step.status == "error" and tool_step.attributes["served"] == "live"
    assert live_calculator_calls == [{"expression": "6*7"}], "the unmatched call was not made"


def test_a_call_the_original_never_made_is_called_live_when_asked(tenant, fake_mistral, live_calculator_calls):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(tool_calls=[CALC]), completion(content="42"))
        fake_mistral.reply(completion(tool_calls=[("c9", "calculator", {"expression": "7*7"})]))
        fake_mistral.reply(completion(content="49"))
        (replay,) = replay_start(source=source, actor=tenant.member, tool_mode="recorded", unmatched="live")
        replay = _execute(replay)
        call = ToolCall.objects.get(run=replay)
    assert replay.status == "succeeded" and replay.output == "49"
    assert call.result == {"expression": "7*7", "result": 49}
    assert live_calculator_calls == [{"expression": "6*7"}, {"expression": "7*7"}]


def test_live_tools_are_called_for_real(tenant, fake_mistral, live_calculator_calls):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(tool_calls=[CALC]), completion(content="42"))
        fake_mistral.reply(completion(tool_calls=[CALC]))
        fake_mistral.reply(completion(content="42 again"))
        (replay,) = replay_start(
            source=source, actor=tenant.member, tool_mode="live", overrides={"model": "mistral-small-latest"}
        )
        replay = _execute(replay)
    assert replay.status == "succeeded" and len(live_calculator_calls) == 2
    assert fake_mistral.requests[-1]["body"]["model"] == "mistral-small-latest"
    assert replay.models_used == ["mistral-large-latest"]  # what the server said it answered with


def test_a_fork_keeps_the_prefix_without_model_calls(tenant, fake_mistral, live_calculator_calls):
    with organization_scope(tenant.organization):
        source = _source(
            tenant,
            fake_mistral,
            completion(tool_calls=[CALC], prompt_tokens=1000, completion_tokens=10),
            completion(tool_calls=[("call_2", "calculator", {"expression": "42+1"})], prompt_tokens=1000),
            completion(content="43", prompt_tokens=1000),
        )
        source_llm2_request = fake_mistral.requests[1]["body"]["messages"]
        sent_before = len(fake_mistral.requests)
        fake_mistral.reply(completion(content="Actually, 42.", prompt_tokens=500, completion_tokens=5))
        (replay,) = replay_start(source=source, actor=tenant.member, fork_step=2, tool_mode="live")
        assert replay.status == "queued"
        copied = list(Step.objects.filter(run=replay).order_by("started_at", "id").values_list("span_id", "kind"))
        assert copied == [("llm-1", "llm"), ("tool-1-0", "tool")], "the prefix is there before it runs"
        replay = _execute(replay)
        steps = {step.span_id: step for step in Step.objects.filter(run=replay)}

    requests = fake_mistral.requests[sent_before:]
    assert len(requests) == 1, "no model call for the kept prefix"
    assert requests[0]["body"]["messages"] == source_llm2_request, "the conversation as it stood at step 2"
    assert replay.status == "succeeded" and replay.output == "Actually, 42."
    assert set(steps) == {"root", "llm-1", "tool-1-0", "llm-2"}
    assert steps["llm-1"].input_tokens == 0 and steps["llm-1"].cost == 0
    assert steps["llm-1"].attributes["original_usage"]["input_tokens"] == 1000
    assert replay.input_tokens == 500, "only the replay's own model call is counted"
    assert live_calculator_calls == [{"expression": "6*7"}, {"expression": "42+1"}], "no tool call in the prefix"


def test_fork_step_out_of_range_is_a_clear_error(tenant, fake_mistral):
    from agentops.errors import InvalidRequest

    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(tool_calls=[CALC]), completion(content="42"))
        with pytest.raises(InvalidRequest, match="fork_step must be from 1 to 2"):
            replay_start(source=source, actor=tenant.member, fork_step=5)
        assert Run.objects.filter(replay_of=source).count() == 0, "nothing half-written"


def test_a_repeat_reports_how_much_the_replays_agree(tenant, fake_mistral):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(content="42"), tools=())
        for answer in ("42", "42", "forty-two"):
            fake_mistral.reply(completion(content=answer, prompt_tokens=10, completion_tokens=len(answer)))
        replays = replay_start(source=source, actor=tenant.member, repeat=3, overrides={"temperature": 1.0})
        for replay in replays:
            _execute(replay)
        (group,) = replay_groups(source)
    assert [run["id"] for run in group["runs"]] == [run.pk for run in replays]
    assert group["ended"] == 3 and group["succeeded"] == 3
    assert group["agreement"] == round(2 / 3, 4) and group["distinct_outputs"] == 2
    assert group["spread"]["tokens"] == {"min": 12, "max": 19, "mean": 14.333333, "stdev": 3.299832}
    assert group["spread"]["step_count"]["min"] == group["spread"]["step_count"]["max"] == 2


def _ingested_source(tenant, *, with_definitions=True) -> Run:
    now = timezone.now()
    attributes = {"gen_ai.request.temperature": 0.3}
    if with_definitions:
        attributes["gen_ai.tool.definitions"] = (
            '[{"type": "function", "name": "lookup_order", "description": "Find an order",'
            ' "parameters": {"type": "object", "properties": {"id": {"type": "string"}}}}]'
        )
    ingest(
        project=tenant.project,
        runs=[RunEvent(trace_id="ingested-1", fields={"status": "succeeded", "input": "Where is order 7?"})],
        steps=[
            StepEvent(trace_id="ingested-1", span_id="root", kind="agent", name="support", started_at=now),
            StepEvent(
                trace_id="ingested-1",
                span_id="s1",
                parent_span_id="root",
                kind="llm",
                name="chat",
                model="mistral-small-latest",
                started_at=now,
                ended_at=now + timedelta(seconds=1),
                input=[
                    {"role": "system", "parts": [{"type": "text", "content": "You help with orders."}]},
                    {"role": "user", "parts": [{"type": "text", "content": "Where is order 7?"}]},
                ],
                attributes=attributes,
            ),
            StepEvent(
                trace_id="ingested-1",
                span_id="s2",
                parent_span_id="root",
                kind="tool",
                name="lookup_order",
                started_at=now + timedelta(seconds=1),
            ),
        ],
        tool_calls=[
            ToolCallEvent(
                trace_id="ingested-1",
                call_id="t1",
                tool_name="lookup_order",
                span_id="s2",
                arguments={"id": "7"},
                result={"status": "shipped"},
                started_at=now + timedelta(seconds=1),
            )
        ],
    )
    return Run.objects.get(project=tenant.project, trace_id="ingested-1")


def test_an_ingested_run_replays_with_its_recorded_messages_and_tools(tenant, fake_mistral):
    with organization_scope(tenant.organization):
        _use_fake_mistral(tenant, fake_mistral)
        source = _ingested_source(tenant)
        fake_mistral.reply(completion(tool_calls=[("x1", "lookup_order", {"id": "7"})]))
        fake_mistral.reply(completion(content="Order 7 has shipped."))
        (replay,) = replay_start(source=source, actor=tenant.member, overrides={"model": "mistral-large-latest"})
        replay = _execute(replay)
        call = ToolCall.objects.get(run=replay)
    assert replay.status == "succeeded", replay.error
    first = fake_mistral.requests[0]["body"]
    assert first["model"] == "mistral-large-latest" and first["temperature"] == 0.3
    assert first["messages"] == [
        {"role": "system", "content": "You help with orders."},
        {"role": "user", "content": "Where is order 7?"},
    ]
    assert first["tools"][0]["function"]["name"] == "lookup_order"
    assert call.result == {"status": "shipped"}, "served from the recording"


def test_an_ingested_run_without_tool_definitions_cannot_be_replayed(tenant):
    from agentops.errors import InvalidRequest

    with organization_scope(tenant.organization):
        source = _ingested_source(tenant, with_definitions=False)
        with pytest.raises(InvalidRequest, match=r"definitions of the tools it used \(lookup_order"):
            replay_start(source=source, actor=tenant.member)


# The API.


def _replays_url(tenant, run_id):
    return f"/api/v1/projects/acme/{tenant.project.slug}/runs/{run_id}/replays/"


def test_api_starts_replays_idempotently_and_lists_them(tenant, fake_mistral, client_for):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(content="42"), tools=())
    client = client_for(tenant.member)
    body = {"overrides": {"temperature": 0.5}, "tool_mode": "live", "repeat": 2}
    first = client.post(_replays_url(tenant, source.pk), body, format="json", HTTP_IDEMPOTENCY_KEY="rk-1")
    again = client.post(_replays_url(tenant, source.pk), body, format="json", HTTP_IDEMPOTENCY_KEY="rk-1")
    assert first.status_code == 202, first.content
    assert again.status_code == 202 and again["Idempotent-Replayed"] == "true"
    ids = [run["id"] for run in first.json()["runs"]]
    assert [run["id"] for run in again.json()["runs"]] == ids and len(ids) == 2
    assert all(run["replay_of_id"] == source.pk and run["status"] == "queued" for run in first.json()["runs"])
    with organization_scope(tenant.organization):
        assert Run.objects.filter(replay_of=source).count() == 2

    listed = client_for(tenant.viewer).get(_replays_url(tenant, source.pk))
    assert listed.status_code == 200
    (group,) = listed.json()["replays"]
    assert group["group"] == first.json()["group"] and group["tool_mode"] == "live"
    assert sorted(run["id"] for run in group["runs"]) == sorted(ids)


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ({"tool_mode": "sometimes"}, "tool_mode"),
        ({"repeat": 0}, "repeat must be a whole number from 1 to 20"),
        ({"overrides": {"colour": "red"}}, "unknown override 'colour'"),
        ({"overrides": {"temperature": 9}}, "temperature must be between"),
        ({"overrides": {"tools": ["nope"]}}, "unknown tool 'nope'"),
        ({"fork_step": 9}, "fork_step must be from 1 to 1"),
    ],
)
def test_api_refuses_bad_replays_with_a_clear_message(tenant, fake_mistral, client_for, body, message):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(content="42"), tools=())
    response = client_for(tenant.member).post(_replays_url(tenant, source.pk), body, format="json")
    assert response.status_code == 400
    assert message in str(response.json()["error"])
    with organization_scope(tenant.organization):
        assert Run.objects.filter(replay_of=source).count() == 0


def test_api_replays_are_for_members_of_the_runs_organization(tenant, other_tenant, fake_mistral, client_for):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(content="42"), tools=())
        running = _ingested_source(tenant)
        Run.objects.filter(pk=running.pk).update(status="running", status_explicit=True)
    assert client_for(tenant.viewer).post(_replays_url(tenant, source.pk), {}, format="json").status_code == 403
    stranger = client_for(other_tenant.owner)
    assert stranger.get(_replays_url(tenant, source.pk)).status_code == 404
    other_url = f"/api/v1/projects/globex/{other_tenant.project.slug}/runs/{source.pk}/replays/"
    assert stranger.post(other_url, {}, format="json").status_code == 404
    busy = client_for(tenant.member).post(_replays_url(tenant, running.pk), {}, format="json")
    assert busy.status_code == 409 and "still running" in busy.json()["error"]["message"]


# The pages.


def test_run_page_offers_a_replay_and_starts_one(tenant, fake_mistral, client_for):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(tool_calls=[CALC]), completion(content="42"))
    page_url = f"/o/acme/p/{tenant.project.slug}/runs/{source.pk}/"
    member = client_for(tenant.member)
    page = member.get(page_url)
    assert page.status_code == 200
    html = page.content.decode()
    assert 'id="replay-start"' in html and 'value="mistral-large-latest"' in html
    assert 'name="fork_step"' in html and 'name="version"' in html

    response = member.post(
        f"{page_url}replays/",
        {
            "model": "mistral-small-latest",
            "system_prompt": "Use the calculator.",
            "tools": ["calculator"],
            "temperature": "0.7",
            "tool_mode": "recorded",
            "unmatched": "fail",
            "repeat": "1",
        },
    )
    with organization_scope(tenant.organization):
        replay = Run.objects.get(replay_of=source)
    assert response.status_code == 302 and response["Location"].endswith(f"/runs/{replay.pk}/")
    assert replay.execution["replay"]["overrides"] == {"temperature": 0.7, "model": "mistral-small-latest"}
    replay_page = member.get(response["Location"]).content.decode()
    assert 'id="replay-source"' in replay_page and f"?a={source.pk}&amp;b={replay.pk}" in replay_page
    source_page = member.get(page_url).content.decode()
    assert f"#{replay.pk}" in source_page and "Replays of this run" in source_page


def test_the_live_refresh_of_an_ended_run_brings_its_replay_form(tenant, fake_mistral, client_for):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(content="42"), tools=())
        running = Run.objects.create(
            organization=tenant.organization, project=tenant.project, trace_id="still-going", status="running"
        )
    member = client_for(tenant.member)
    base = f"/o/acme/p/{tenant.project.slug}/runs"

    ended = member.get(f"{base}/{source.pk}/live/?tab=trace", HTTP_HX_REQUEST="true").content.decode()
    going = member.get(f"{base}/{running.pk}/live/?tab=trace", HTTP_HX_REQUEST="true").content.decode()

    assert f'id="run-replays-{source.pk}" hx-swap-oob="true"' in ended and 'id="replay-start"' in ended
    assert "run-replays-" not in going and 'id="replay-start"' not in going
    # The page it lands in has the slot to swap into.
    page = member.get(f"{base}/{running.pk}/").content.decode()
    assert f'id="run-replays-{running.pk}"' in page


def test_a_run_that_cannot_be_replayed_says_why_once(tenant, client_for):
    with organization_scope(tenant.organization):
        source = _ingested_source(tenant, with_definitions=False)
    page_url = f"/o/acme/p/{tenant.project.slug}/runs/{source.pk}/"
    member = client_for(tenant.member)

    html = member.get(page_url).content.decode()
    flash = member.post(f"{page_url}replays/", {"repeat": "1"}, follow=True).content.decode()

    for text in (html, flash):
        assert "This run cannot be replayed: it does not carry the definitions of the tools it used" in text
        assert "cannot be replayed: this run cannot be replayed" not in text.lower()


def test_replay_form_errors_and_roles(tenant, fake_mistral, client_for):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(content="42"), tools=())
    page_url = f"/o/acme/p/{tenant.project.slug}/runs/{source.pk}/"
    viewer_page = client_for(tenant.viewer).get(page_url).content.decode()
    assert 'id="replay-start"' not in viewer_page, "viewers do not see the form"
    assert client_for(tenant.viewer).post(f"{page_url}replays/", {"repeat": "1"}).status_code == 403
    member = client_for(tenant.member)
    response = member.post(
        f"{page_url}replays/",
        {"model": "mistral-large-latest", "tool_mode": "live", "unmatched": "fail", "repeat": "50"},
        follow=True,
    )
    assert "The replay was not started" in response.content.decode() and "Repeat" in response.content.decode()
    with organization_scope(tenant.organization):
        assert not Run.objects.filter(replay_of=source).exists()


def test_a_call_approved_with_edited_arguments_is_replayed_from_the_recording_without_asking_again(
    tenant, fake_mistral, live_calculator_calls
):
    from runs.models import Approval
    from runs.services.approvals import approval_decide

    with organization_scope(tenant.organization):
        fake_mistral.reply(completion(tool_calls=[CALC]))
        fake_mistral.reply(completion(content="It is 42."))
        _use_fake_mistral(tenant, fake_mistral)
        agent = agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="approved-calc",
            model="mistral-large-latest",
            tools=["calculator"],
            approval_tools=["calculator"],
        )
        source = _execute(run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is 6*7?"))
        assert source.status == "waiting"
        approval_decide(
            approval=Approval.objects.get(run=source),
            actor=tenant.member,
            approve=True,
            arguments={"expression": "2*21"},
        )
        source = _execute(source)
        assert source.status == "succeeded", source.error
        assert live_calculator_calls == [{"expression": "2*21"}]

        # The replays' model asks for the call as the source's model did, before the edit.
        for _ in range(2):
            fake_mistral.reply(completion(tool_calls=[("other_id", "calculator", {"expression": "6*7"})]))
            fake_mistral.reply(completion(content="Forty-two."))
        replays = [_execute(replay) for replay in replay_start(source=source, actor=tenant.member, repeat=2)]
        calls = [ToolCall.objects.get(run=replay) for replay in replays]
        steps = [Step.objects.get(run=replay, kind="tool") for replay in replays]
        approvals = Approval.objects.filter(run__in=replays).count()
        (group,) = replay_groups(source)

    assert [replay.status for replay in replays] == ["succeeded", "succeeded"], [r.error for r in replays]
    assert approvals == 0, "no person is asked again"
    assert live_calculator_calls == [{"expression": "2*21"}], "served from the recording"
    for call, step in zip(calls, steps, strict=True):
        assert call.arguments == {"expression": "2*21"} and call.result == {"expression": "2*21", "result": 42}
        assert step.attributes["served"] == "recorded" and step.attributes["recorded_call_id"] == "call_1"
        assert step.attributes["requested_arguments"] == {"expression": "6*7"}
    assert group["agreement"] == 1.0


def test_failed_replays_never_count_as_agreeing(tenant, fake_mistral):
    with organization_scope(tenant.organization):
        source = _source(tenant, fake_mistral, completion(content="42"), tools=())
        fake_mistral.reply(completion(content="42"))
        fake_mistral.reply({"message": "bad request"}, status=400)
        fake_mistral.reply({"message": "bad request"}, status=400)
        replays = replay_start(source=source, actor=tenant.member, repeat=3)
        statuses = [_execute(replay).status for replay in replays]
        (group,) = replay_groups(source)
    assert statuses == ["succeeded", "failed", "failed"]
    assert group["ended"] == 3 and group["succeeded"] == 1
    assert group["agreement"] == round(1 / 3, 4) and group["distinct_outputs"] == 1
