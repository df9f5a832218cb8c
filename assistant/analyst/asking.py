"""Putting a question to the analyst, and reading the answers back.

A question starts an executed run of the analyst (``create_executed_run``: queued, then
a worker runs the tool-calling loop, streaming its answer to the run's event stream) on
the organization's model: Mistral (``ANALYST_MODEL``) when the organization has a
Mistral key, otherwise the offline analyst. Asking is work: it needs ``work:write``
(members ask, viewers read the answers), is refused by a spent hard budget (402) and
is audited (``analyst.ask``). The run records who asked (``metadata.analyst``), so its
tools read for them, and the question is kept with its subject (``AnalystQuestion``).
"""

from __future__ import annotations

import re

from django.conf import settings
from django.db import transaction

from agentops.errors import InvalidRequest
from agentops.models import ProviderSecret
from assistant.analyst.offline import OFFLINE_ANALYST_MODEL
from assistant.analyst.tools import TOOLSET
from assistant.models import AnalystQuestion
from assistant.read_tools import TOOLS
from billing.budgets import check_work_allowed
from runs.execution import create_executed_run
from runs.models import Agent, AgentVersion, Run, Session, Step
from runs.services.sessions import session_create

ANALYST_NAME = "AgentOps analyst"
MAX_QUESTION_CHARS = 2000
STEP_LIMIT = 8
INSIGHTS_QUESTION = (
    "Summarise this leaderboard: the top performers, the cost and quality trade-offs, and any significant "
    "regression of the latest experiment against the one before it. Give the numbers you used."
)
CITATION = re.compile(r"\[step:(\d+)\]")

SYSTEM_PROMPT = """You are the AgentOps analyst of the project {project}. Answer the member's question from the \
platform's data, which you read with your tools (read-only; they see this project only). Be brief and concrete, and \
give the numbers you used. When a fact comes from a step of a run, cite the step as [step:<step id>] (the id from \
get_run or get_step), so the page links to it. Do not invent ids or numbers: when the tools do not say, say so.
{subject}"""


def analyst_model(organization) -> str:
    """Mistral when the organization has a Mistral key, otherwise the offline analyst."""
    has_key = ProviderSecret.objects.filter(organization=organization, provider="mistral").exists()
    return settings.ANALYST_MODEL if has_key else OFFLINE_ANALYST_MODEL


def analyst_spec(project, subject: str) -> dict:
    """What an analyst run executes (``runs.execution.Spec``): the read tools, from the
    ``analyst`` tool set, on the organization's model."""
    return {
        "model": analyst_model(project.organization),
        "system_prompt": SYSTEM_PROMPT.format(project=f"{project.organization.slug}/{project.slug}", subject=subject),
        "tools": [tool.__name__ for tool in TOOLS],
        "approval_tools": [],
        "step_limit": STEP_LIMIT,
        "tool_definitions": [],
        "toolset": TOOLSET,
    }


def clean_question(question) -> str:
    if not isinstance(question, str) or not question.strip():
        raise InvalidRequest("question: ask something (the question is empty)")
    question = question.strip()
    if len(question) > MAX_QUESTION_CHARS:
        raise InvalidRequest(f"question: at most {MAX_QUESTION_CHARS} characters (this one has {len(question)})")
    return question


def _ask(*, access, subject: str, subject_line: str, question: str, subject_run=None, dataset=None) -> AnalystQuestion:
    access.require("work:write", "ask the analyst")
    project, user = access.project, access.membership.user if access.membership else None
    check_work_allowed(project=project, api_key=access.api_key, work="run")
    with transaction.atomic():
        run = create_executed_run(
            project=project,
            actor=access.actor,
            api_key=access.api_key,
            name=f"Analyst: {question[:80]}",
            agent_name=ANALYST_NAME,
            input=question,
            spec=analyst_spec(project, subject_line),
            parameters={},
            audit=(
                "analyst.ask",
                {"subject": subject, "run": getattr(subject_run, "pk", None), "dataset": getattr(dataset, "pk", None)},
            ),
            fields={
                "tags": ["analyst"],
                "metadata": {
                    "analyst": {
                        "asked_by": user.pk if user else None,
                        "subject": subject,
                        "subject_id": (subject_run or dataset).pk,
                    }
                },
            },
        )
        return AnalystQuestion.objects.create(
            organization_id=project.organization_id,
            project=project,
            subject=subject,
            subject_run=subject_run,
            dataset=dataset,
            question=question,
            answer_run=run,
            asked_by=user,
        )


def ask_about_run(*, access, run: Run, question) -> AnalystQuestion:
    """Ask the analyst about ``run`` (of ``access.project``)."""
    question = clean_question(question)
    return _ask(
        access=access,
        subject=AnalystQuestion.Subject.RUN,
        subject_line=f"Subject: run {run.pk} (read it with get_run; its steps with get_step).",
        question=question,
        subject_run=run,
    )


def refresh_insights(*, access, dataset) -> AnalystQuestion:
    """Ask the analyst for new insights on ``dataset``'s leaderboard."""
    return _ask(
        access=access,
        subject=AnalystQuestion.Subject.LEADERBOARD,
        subject_line=(
            f"Subject: the leaderboard of dataset {dataset.pk} ({dataset.name}; read it with get_leaderboard, "
            "and compare the latest experiments with compare_experiments)."
        ),
        question=INSIGHTS_QUESTION,
        dataset=dataset,
    )


CHAT_SUBJECT = (
    "Subject: the project (its runs, spend, budgets, evaluations, jobs and sessions; a member chats with you, "
    "each message a turn)."
)


def analyst_agent(*, project, actor) -> Agent:
    """The project's analyst as an agent, for chat sessions: made on first use, and given a
    new version when the organization's model changes (a Mistral key added or removed).
    Made here, not by the agents service: its tools are the ``analyst`` tool set, which
    people's agents are not offered. Found by ``Agent.platform`` (which only the platform
    sets), never by name: a person's agent called "AgentOps analyst" stays theirs."""
    model = analyst_model(project.organization)
    fields = {
        "model": model,
        "system_prompt": SYSTEM_PROMPT.format(
            project=f"{project.organization.slug}/{project.slug}", subject=CHAT_SUBJECT
        ),
        "tools": [tool.__name__ for tool in TOOLS],
        "approval_tools": [],
        "parameters": {},
        "step_limit": STEP_LIMIT,
        "toolset": TOOLSET,
    }
    with transaction.atomic():
        agent, _created = Agent.objects.select_for_update().get_or_create(
            project=project,
            platform=TOOLSET,
            defaults={
                "name": ANALYST_NAME,
                "organization_id": project.organization_id,
                "description": "The platform's analyst: reads this project's data with the MCP read tools.",
                "created_by": actor,
            },
        )
        latest = AgentVersion.objects.filter(agent=agent, number=agent.latest_version).first()
        if latest is None or any(getattr(latest, name) != value for name, value in fields.items()):
            number = agent.latest_version + 1
            AgentVersion.objects.create(
                organization_id=project.organization_id,
                project=project,
                agent=agent,
                number=number,
                created_by=actor,
                **fields,
            )
            agent.latest_version = number
            agent.save(update_fields=["latest_version"])
    return agent


def start_chat(*, access) -> Session:
    """Open a chat session with the project's analyst for the asking member (members only)."""
    access.require("work:write", "chat with the analyst")
    user = access.membership.user if access.membership else None
    agent = analyst_agent(project=access.project, actor=user)
    return session_create(project=access.project, agent=agent, actor=user, title="Chat with the analyst")


def run_questions(*, run: Run) -> list[AnalystQuestion]:
    """The questions asked about ``run``, oldest first, with their answers' runs."""
    return list(
        AnalystQuestion.objects.filter(subject_run=run)
        .select_related("answer_run", "asked_by")
        .order_by("created_at", "id")
    )


def latest_insights(*, dataset) -> AnalystQuestion | None:
    """The dataset's latest leaderboard insights, or None."""
    return (
        AnalystQuestion.objects.filter(dataset=dataset, subject=AnalystQuestion.Subject.LEADERBOARD)
        .select_related("answer_run", "asked_by")
        .order_by("-created_at", "-id")
        .first()
    )


def cited_steps(text: str, run: Run) -> dict[int, Step]:
    """The steps of ``run`` an answer cites as ``[step:<id>]`` (ids of other runs are left out)."""
    ids = {int(match) for match in CITATION.findall(text or "")}
    return {step.pk: step for step in Step.objects.filter(run=run, pk__in=ids)} if ids else {}
