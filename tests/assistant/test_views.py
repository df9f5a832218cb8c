"""The analyst on the pages, as a person finds it: the "Ask about this run" panel of a run
page and the insights panel of a leaderboard. Answers are made by the real executor
(run here, as a worker would) on the offline analyst."""

from __future__ import annotations

import re

import pytest
from django.core.management import call_command

from agentops.scoping import organization_scope
from assistant.models import AnalystQuestion
from evals.models import Dataset
from runs.execution import run_execute
from runs.models import Run, Step

PROJECT = "/o/acme/p/agent"
HTMX = {"HTTP_HX_REQUEST": "true"}


@pytest.fixture
def failed_run(tenant):
    with organization_scope(tenant.organization):
        call_command("seed_demo_runs", "acme/agent", verbosity=0)
        return Run.objects.get(project=tenant.project, status="failed", executed=False)


def ask_url(run):
    return f"{PROJECT}/assistant/runs/{run.pk}/ask/"


def answer_all(tenant):
    with organization_scope(tenant.organization):
        pending = list(AnalystQuestion.objects.filter(answer_run__status="queued").values_list("answer_run", flat=True))
        for run_id in pending:
            run_execute(run_id=run_id)


def test_the_run_page_loads_the_ask_panel(tenant, failed_run, signed_in):
    page = signed_in(tenant.viewer).get(f"{PROJECT}/runs/{failed_run.pk}/")
    assert page.status_code == 200
    assert f'hx-get="{ask_url(failed_run)}"' in page.content.decode()


def test_a_member_asks_the_answer_streams_then_stays_with_its_step_links(tenant, failed_run, signed_in):
    client = signed_in(tenant.member)
    panel = client.get(ask_url(failed_run)).content.decode()
    assert "Ask about this run" in panel and "No question about this run yet." in panel and 'name="question"' in panel

    asked = client.post(ask_url(failed_run), {"question": "Why did it fail?"}, **HTMX)
    assert asked.status_code == 200
    body = asked.content.decode()
    assert "Why did it fail?" in body and "The analyst is answering" in body
    with organization_scope(tenant.organization):
        question = AnalystQuestion.objects.get(subject_run=failed_run)
    assert f'data-event-stream="/api/v1/projects/acme/agent/runs/{question.answer_run_id}/events/"' in body

    answer_all(tenant)
    with organization_scope(tenant.organization):
        failed_step = Step.objects.get(run=failed_run, kind="tool", status="error")
    reloaded = client.get(ask_url(failed_run)).content.decode()  # as on a reload of the run page
    assert "Why did it fail?" in reloaded and "member@acme.example.com" in reloaded
    assert "Offline analyst (no model configured):" in reloaded and "offline analyst</span>" in reloaded
    link = f'href="{PROJECT}/runs/{failed_run.pk}/?tab=trace&amp;step={failed_step.pk}#step-row-{failed_step.pk}"'
    assert link in reloaded and "[step:" not in reloaded
    assert f'href="{PROJECT}/runs/{question.answer_run_id}/"' in reloaded  # the answer's own run
    assert "data-event-stream" not in reloaded
    # The anchor the link points at is on the run page.
    trace = client.get(f"{PROJECT}/runs/{failed_run.pk}/?tab=trace&step={failed_step.pk}").content.decode()
    assert f'id="step-row-{failed_step.pk}"' in trace


def test_without_javascript_the_form_posts_and_comes_back_to_the_run(tenant, failed_run, signed_in):
    response = signed_in(tenant.member).post(ask_url(failed_run), {"question": "Cost?"})
    assert response.status_code == 302
    assert response["Location"] == f"{PROJECT}/runs/{failed_run.pk}/#run-analyst-{failed_run.pk}"


def test_viewers_read_the_answers_but_cannot_ask(tenant, failed_run, signed_in):
    signed_in(tenant.member).post(ask_url(failed_run), {"question": "Why?"}, **HTMX)
    answer_all(tenant)
    viewer = signed_in(tenant.viewer)
    panel = viewer.get(ask_url(failed_run)).content.decode()
    assert "Why?" in panel and "Offline analyst" in panel
    assert 'name="question"' not in panel and "Members ask the analyst" in panel
    refused = viewer.post(ask_url(failed_run), {"question": "Me too?"}, **HTMX)
    assert refused.status_code == 403
    with organization_scope(tenant.organization):
        assert AnalystQuestion.objects.count() == 1


@pytest.mark.parametrize(
    ("question", "message"),
    [("", "the question is empty"), ("   ", "the question is empty"), ("x" * 2001, "at most 2000 characters")],
)
def test_an_empty_or_oversized_question_is_a_400_with_the_reason(tenant, failed_run, signed_in, question, message):
    client = signed_in(tenant.member)
    with organization_scope(tenant.organization):
        runs_before = Run.objects.count()
    in_place = client.post(ask_url(failed_run), {"question": question}, **HTMX)
    assert in_place.status_code == 400
    assert message in in_place.content.decode() and 'name="question"' in in_place.content.decode()
    plain = client.post(ask_url(failed_run), {"question": question})
    assert plain.status_code == 400 and message in plain.content.decode()
    assert client.post(ask_url(failed_run), **HTMX).status_code == 400  # no field at all
    with organization_scope(tenant.organization):
        assert Run.objects.count() == runs_before and not AnalystQuestion.objects.exists()


def test_another_tenants_run_is_not_found(tenant, other_tenant, failed_run, signed_in):
    outsider = signed_in(other_tenant.owner)
    assert outsider.get(ask_url(failed_run)).status_code == 404
    assert outsider.post(ask_url(failed_run), {"question": "Why?"}).status_code == 404
    with organization_scope(other_tenant.organization):
        call_command("seed_demo_runs", "globex/agent", verbosity=0)
        theirs = Run.objects.filter(project=other_tenant.project).first()
    assert signed_in(tenant.owner).post(ask_url(theirs), {"question": "Why?"}).status_code == 404


@pytest.fixture
def leaderboard(tenant):
    with organization_scope(tenant.organization):
        call_command("seed_demo_runs", "acme/agent", verbosity=0)
        call_command("seed_demo_evals", "acme/agent", verbosity=0)
        return Dataset.objects.get(project=tenant.project)


def test_leaderboard_insights_are_generated_on_request_dated_with_their_numbers(tenant, leaderboard, signed_in):
    client = signed_in(tenant.member)
    insights_url = f"{PROJECT}/assistant/datasets/{leaderboard.pk}/insights/"
    page = client.get(f"{PROJECT}/evals/datasets/{leaderboard.pk}/leaderboard/").content.decode()
    assert f'hx-get="{insights_url}"' in page
    empty = client.get(insights_url).content.decode()
    assert "No insights yet." in empty and "Generate insights" in empty

    assert client.post(insights_url, **HTMX).status_code == 200
    answer_all(tenant)
    shown = client.get(insights_url).content.decode()
    with organization_scope(tenant.organization):
        insight = AnalystQuestion.objects.get(dataset=leaderboard)
    assert "Top performers:" in shown and "Cost and quality:" in shown and "no significant regression" in shown
    assert re.search(r"pass rate 100\.0%", shown)
    assert f'Generated <time datetime="{insight.created_at.isoformat()}' in shown
    assert "Numbers from: <code>get_leaderboard(dataset=" in shown and "<code>compare_experiments(a=" in shown
    assert "Refresh insights" in shown

    client.post(insights_url, **HTMX)  # refreshed: a new, later answer is the one shown
    answer_all(tenant)
    with organization_scope(tenant.organization):
        latest = AnalystQuestion.objects.filter(dataset=leaderboard).order_by("-created_at").first()
    assert latest.pk != insight.pk
    assert f'href="{PROJECT}/runs/{latest.answer_run_id}/"' in client.get(insights_url).content.decode()


def test_viewers_read_insights_but_cannot_refresh_them(tenant, leaderboard, signed_in):
    insights_url = f"{PROJECT}/assistant/datasets/{leaderboard.pk}/insights/"
    viewer = signed_in(tenant.viewer)
    assert "Generate insights" not in viewer.get(insights_url).content.decode()
    assert viewer.post(insights_url).status_code == 403
    assert signed_in(tenant.owner).get(f"{PROJECT}/assistant/datasets/999999/insights/").status_code == 404


def test_a_member_chats_with_the_analyst_in_a_session_with_its_tool_calls_visible(tenant, failed_run, signed_in):
    from runs.models import Session
    from runs.services.sessions import session_send

    client = signed_in(tenant.member)
    chat_page = client.get(f"{PROJECT}/runs/chat/").content.decode()
    assert f'action="{PROJECT}/assistant/chat/"' in chat_page and "Chat with the analyst" in chat_page

    opened = client.post(f"{PROJECT}/assistant/chat/")
    with organization_scope(tenant.organization):
        session = Session.objects.select_related("agent", "agent_version").get(agent__name="AgentOps analyst")
    assert opened.status_code == 302 and opened["Location"] == f"{PROJECT}/runs/chat/{session.pk}/"
    assert session.agent.name == "AgentOps analyst" and session.started_by == tenant.member
    assert session.agent_version.model == "offline-analyst" and session.agent_version.toolset == "analyst"

    with organization_scope(tenant.organization):
        message = session_send(session=session, actor=tenant.member, content="Which runs failed?")
        run_execute(run_id=message.run_id)  # as a worker would
        turn = Run.objects.get(pk=message.run_id)
    assert turn.status == "succeeded" and turn.output.startswith("Offline analyst (no model configured):")
    assert f"run {failed_run.pk} " in turn.output  # read with search_runs, for the member who opened the chat
    page = client.get(f"{PROJECT}/runs/chat/{session.pk}/").content.decode()
    assert "search_runs" in page and "Which runs failed?" in page

    # A second chat reuses the analyst agent (same version while the model is the same).
    client.post(f"{PROJECT}/assistant/chat/")
    with organization_scope(tenant.organization):
        assert Session.objects.filter(agent=session.agent).count() == 2 and session.agent.versions.count() == 1
    assert signed_in(tenant.viewer).post(f"{PROJECT}/assistant/chat/").status_code == 403


def _open_analyst_chat(tenant, client):
    from runs.models import Session

    opened = client.post(f"{PROJECT}/assistant/chat/")
    session_id = int(opened["Location"].rstrip("/").rsplit("/", 1)[1])
    with organization_scope(tenant.organization):
        return Session.objects.select_related("agent").get(pk=session_id)


def test_the_analyst_agent_is_not_listed_edited_or_run_as_a_members_own_agent(tenant, signed_in, client_for):
    from runs.services.sessions import session_send

    member = signed_in(tenant.member)
    session = _open_analyst_chat(tenant, member)
    analyst = session.agent
    api, base = client_for(tenant.member), "/api/v1/projects/acme/agent"

    assert "AgentOps analyst" not in member.get(f"{PROJECT}/runs/agents/").content.decode()
    assert [agent["name"] for agent in api.get(f"{base}/agents/").json()] == []
    assert member.get(f"{PROJECT}/runs/agents/{analyst.pk}/").status_code == 404
    assert member.post(f"{PROJECT}/runs/agents/{analyst.pk}/edit/", {"model": "offline"}).status_code == 404
    assert member.post(f"{PROJECT}/runs/agents/{analyst.pk}/runs/", {"input": "hi"}).status_code == 404
    assert api.get(f"{base}/agents/{analyst.pk}/").status_code == 404
    assert api.patch(f"{base}/agents/{analyst.pk}/", {"model": "offline"}, format="json").status_code == 404
    assert api.get(f"{base}/agents/{analyst.pk}/versions/").status_code == 404
    assert api.post(f"{base}/runs/", {"agent": analyst.pk, "input": "hi"}, format="json").status_code == 404
    assert api.post(f"{base}/agent-sessions/", {"agent": analyst.pk}, format="json").status_code == 404
    # Its chat still opens, the page's own picker of agents does not offer it, and its
    # configuration is as the platform made it.
    chat_page = member.get(f"{PROJECT}/runs/chat/")
    assert chat_page.status_code == 200 and f'value="{analyst.pk}"' not in chat_page.content.decode()
    with organization_scope(tenant.organization):
        analyst.refresh_from_db()
        assert analyst.latest_version == 1 and analyst.versions.get().toolset == "analyst"
        turn = session_send(session=session, actor=tenant.member, content="Which runs failed?").run_id
    # A turn's run page names the agent without a link to a page that is not there.
    run_page = member.get(f"{PROJECT}/runs/{turn}/").content.decode()
    assert "AgentOps analyst · version 1" in run_page and f"/runs/agents/{analyst.pk}/" not in run_page


def test_a_members_own_agent_named_agentops_analyst_stays_theirs(tenant, signed_in, client_for):
    from runs.services.agents import agent_create

    with organization_scope(tenant.organization):
        own = agent_create(project=tenant.project, actor=tenant.member, name="AgentOps analyst", model="offline")
    member = signed_in(tenant.member)
    session = _open_analyst_chat(tenant, member)
    assert session.agent_id != own.pk and session.agent.platform == "analyst"
    with organization_scope(tenant.organization):
        own.refresh_from_db()
        assert own.latest_version == 1 and [v.toolset for v in own.versions.all()] == [""]
    # Theirs stays on their agents page and API, editable as any of their agents.
    api, base = client_for(tenant.member), "/api/v1/projects/acme/agent"
    assert [agent["id"] for agent in api.get(f"{base}/agents/").json()] == [own.pk]
    edited = api.patch(f"{base}/agents/{own.pk}/", {"system_prompt": "Mine."}, format="json")
    assert edited.status_code == 200 and edited.json()["latest_version"] == 2
    assert _open_analyst_chat(tenant, member).agent_id == session.agent_id


def test_an_agent_a_member_names_agentops_analyst_later_is_never_taken_for_the_analyst(tenant, signed_in, client_for):
    member = signed_in(tenant.member)
    analyst = _open_analyst_chat(tenant, member).agent
    api, base = client_for(tenant.member), "/api/v1/projects/acme/agent"
    created = api.post(
        f"{base}/agents/", {"name": "AgentOps analyst", "model": "offline", "platform": "analyst"}, format="json"
    )
    assert created.status_code == 400 and "platform" in created.content.decode()  # not a field people set
    created = api.post(f"{base}/agents/", {"name": "AgentOps analyst", "model": "offline"}, format="json")
    assert created.status_code == 201
    assert _open_analyst_chat(tenant, member).agent_id == analyst.pk
    with organization_scope(tenant.organization):
        from runs.models import Agent

        assert Agent.objects.get(pk=created.json()["id"]).platform == ""
        assert Agent.objects.get(pk=created.json()["id"]).versions.count() == 1
