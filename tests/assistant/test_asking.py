"""The analyst: each answer an executed run of the real executor, whose tools are the MCP
read tools reading for the member who asked, on the organization's Mistral (the local
fake) or, with no key, the offline analyst."""

from __future__ import annotations

import json

import pytest

from agentops.access import resolve_organization, resolve_project
from agentops.errors import Forbidden, InvalidRequest, PaymentRequired
from agentops.scoping import organization_scope
from assistant.analyst.asking import ask_about_run, cited_steps, run_questions
from assistant.analyst.offline import LABEL
from billing.budgets import budget_create, utc_today
from billing.models import UsageDaily
from runs.execution import run_execute
from runs.models import Run, Step, ToolCall
from runs.services.demo import demo_runs_seed
from runs.services.replay import replay_start
from tests.fake_mistral import completion


def access_of(tenant, role="member"):
    access = resolve_organization(org_slug=tenant.organization.slug, user=tenant.user(role))
    return resolve_project(access, tenant.project.slug)


@pytest.fixture
def failed_run(tenant):
    with organization_scope(tenant.organization):
        demo_runs_seed(project=tenant.project)
        return Run.objects.get(project=tenant.project, status="failed")


def answer_of(tenant, question):
    run_execute(run_id=question.answer_run_id)
    with organization_scope(tenant.organization):
        return Run.objects.get(pk=question.answer_run_id)


def test_without_a_key_the_offline_analyst_answers_from_the_run_and_cites_its_failed_step(tenant, failed_run):
    with organization_scope(tenant.organization):
        asked = ask_about_run(access=access_of(tenant), run=failed_run, question="Why did this fail?")
        answer = answer_of(tenant, asked)
        failed_step = Step.objects.get(run=failed_run, kind="tool", status="error")
        calls = list(ToolCall.objects.filter(run=answer).values_list("tool_name", "arguments"))

    assert answer.status == "succeeded" and answer.executed
    assert answer.output.startswith(LABEL)
    assert f"[step:{failed_step.pk}]" in answer.output and "ToolTimeout" in answer.output
    assert calls == [("get_run", {"run_id": failed_run.pk})]
    assert answer.models_used == ["offline-analyst"] and answer.input_tokens > 0
    assert answer.metadata["analyst"]["asked_by"] == tenant.member.pk
    with organization_scope(tenant.organization):
        cited = cited_steps(answer.output, failed_run)
        assert failed_step.pk in cited and set(cited) <= set(
            Step.objects.filter(run=failed_run).values_list("pk", flat=True)
        )
        assert cited_steps(answer.output, answer) == {}  # only the run's own steps
        assert [(q.question, q.answer_run_id) for q in run_questions(run=failed_run)] == [
            ("Why did this fail?", answer.pk)
        ]


def test_with_the_organizations_mistral_key_the_model_reads_with_the_read_tools(
    tenant, failed_run, fake_mistral, settings
):
    settings.ANALYST_MODEL = "mistral-small-latest"
    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(completion(tool_calls=[("c1", "get_run", {"run_id": failed_run.pk})]))
    with organization_scope(tenant.organization):
        step = Step.objects.get(run=failed_run, kind="tool", status="error")
    fake_mistral.reply(completion(content=f"The payments tool timed out [step:{step.pk}]."))

    with organization_scope(tenant.organization):
        asked = ask_about_run(access=access_of(tenant), run=failed_run, question="Why did this fail?")
        answer = answer_of(tenant, asked)

    assert answer.status == "succeeded" and answer.output == f"The payments tool timed out [step:{step.pk}]."
    first, second = (request["body"] for request in fake_mistral.requests)
    assert first["model"] == "mistral-small-latest"
    offered = {tool["function"]["name"] for tool in first["tools"]}
    assert {"get_run", "get_step", "search_runs", "get_leaderboard", "list_sessions", "get_spend"} <= offered
    assert not offered & {"replay_run", "start_run", "submit_job"}  # reads only
    assert f"Subject: run {failed_run.pk}" in first["messages"][0]["content"]
    tool_message = next(m for m in second["messages"] if m["role"] == "tool")
    assert json.loads(tool_message["content"])["run"]["id"] == failed_run.pk
    assert answer.llm_call_count == 2 and answer.total_cost > 0


def test_the_tools_read_only_the_askers_project(tenant, other_tenant, failed_run, fake_mistral):
    with organization_scope(other_tenant.organization):
        demo_runs_seed(project=other_tenant.project)
        theirs = Run.objects.filter(project=other_tenant.project).first()
    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(completion(tool_calls=[("c1", "get_run", {"run_id": theirs.pk})]))
    fake_mistral.reply(completion(content="I could not read it."))
    with organization_scope(tenant.organization):
        answer = answer_of(tenant, ask_about_run(access=access_of(tenant), run=failed_run, question="Compare?"))
        call = ToolCall.objects.get(run=answer)
    assert call.error == "not_found: run not found" and call.result is None


def test_bad_arguments_from_the_model_are_the_tools_error_not_a_crash(tenant, failed_run, fake_mistral):
    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(completion(tool_calls=[("c1", "get_run", {"run_id": "abc"})]))
    fake_mistral.reply(completion(content="Sorry."))
    with organization_scope(tenant.organization):
        answer = answer_of(tenant, ask_about_run(access=access_of(tenant), run=failed_run, question="?"))
        call = ToolCall.objects.get(run=answer)
    assert answer.status == "succeeded"
    assert call.error.startswith("invalid arguments: run_id:")


def test_viewers_cannot_ask_and_bad_questions_are_refused(tenant, failed_run):
    with organization_scope(tenant.organization):
        before = Run.objects.count()
        with pytest.raises(Forbidden, match=r"your role \(viewer\) does not allow you to ask the analyst"):
            ask_about_run(access=access_of(tenant, "viewer"), run=failed_run, question="Why?")
        with pytest.raises(InvalidRequest, match="the question is empty"):
            ask_about_run(access=access_of(tenant), run=failed_run, question="   ")
        with pytest.raises(InvalidRequest, match="at most 2000 characters"):
            ask_about_run(access=access_of(tenant), run=failed_run, question="x" * 2001)
        assert Run.objects.count() == before


def test_a_spent_hard_budget_refuses_a_question(tenant, failed_run):
    with organization_scope(tenant.organization):
        budget_create(organization=tenant.organization, actor=tenant.owner, name="Cap", amount="1", hard_limit=True)
        UsageDaily.dangerously_unscoped_objects.create(
            organization=tenant.organization, project=tenant.project, day=utc_today(), model="m", cost="1"
        )
        with pytest.raises(PaymentRequired):
            ask_about_run(access=access_of(tenant), run=failed_run, question="Why?")
        assert run_questions(run=failed_run) == []


def test_an_answer_replays_with_the_same_tools_for_the_same_asker(tenant, failed_run):
    with organization_scope(tenant.organization):
        answer = answer_of(tenant, ask_about_run(access=access_of(tenant), run=failed_run, question="Why?"))
        (replay,) = replay_start(source=answer, actor=tenant.member, tool_mode="live")
        run_execute(run_id=replay.pk)
        replay.refresh_from_db()
    assert replay.status == "succeeded" and replay.output == answer.output


def test_a_members_agent_is_not_offered_the_analysts_tools(tenant):
    from runs.services.agents import agent_create

    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="unknown tool 'get_run'"):
        agent_create(project=tenant.project, actor=tenant.member, name="spy", model="offline", tools=["get_run"])
