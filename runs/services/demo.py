"""A few sample runs for the demo project, so a new install has something to read.

The sample runs are ingested as a real OpenTelemetry trace would be, and carry what a
replay needs (the messages and tool definitions of their first model call, its
temperature), so each can be replayed: on the offline model, which calls each tool
with the user's question, their tool calls are served from the recording."""

from __future__ import annotations

import time
from datetime import timedelta

from django.utils import timezone

from runs.events import MemoryEvent, MessageEvent, StepEvent, ToolCallEvent
from runs.execution import run_execute, run_start
from runs.ingest import ingest
from runs.models import Agent, Run, Session
from runs.services.agents import agent_create
from runs.services.replay import replay_start
from runs.services.sessions import session_create, session_send

SYSTEM_PROMPT = "You are the support agent of Acme. Use the tools; answer in two sentences."


def _tool(name: str, description: str) -> dict:
    return {
        "type": "function",
        "function": {
            "name": name,
            "description": description,
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "What to look up"}},
                "required": ["query"],
            },
        },
    }


SEARCH_TOOL = _tool("docs_search", "Search Acme's help center.")
PAYMENTS_TOOL = _tool("payments_lookup", "Look up the customer's recent payments.")
QUESTIONS = [
    ("How do I reset my password?", "Open Settings → Security → Reset password; a link is emailed to you."),
    ("Can I export my invoices as CSV?", "Yes: Billing → Invoices → Export CSV exports the selected period."),
    ("Why was my card declined?", None),  # this one fails: the payment tool times out
]


def demo_runs_seed(*, project) -> int:
    """Create the sample runs unless the project already has runs; return how many."""
    if Run.objects.filter(project=project).exists():
        return 0
    now = timezone.now()
    steps, messages, calls, snapshots = [], [], [], []
    for n, (question, answer) in enumerate(QUESTIONS):
        trace = f"demo-{n + 1:04d}"
        t0 = now - timedelta(minutes=30 - n * 7)

        def at(seconds: float, t0=t0):
            return t0 + timedelta(seconds=seconds)

        failed = answer is None
        system = SYSTEM_PROMPT
        tool = PAYMENTS_TOOL if failed else SEARCH_TOOL
        tool_name = tool["function"]["name"]
        steps += [
            StepEvent(
                trace_id=trace,
                span_id="root",
                kind="agent",
                name="support-agent",
                started_at=at(0),
                ended_at=at(6.4),
                status="error" if failed else "ok",
                error="ToolTimeout: payments_lookup did not answer in 5 s" if failed else "",
                input={"question": question},
                output={"answer": answer} if answer else None,
                run_hints={
                    "name": question,
                    "agent_name": "support-agent",
                    "agent_version": "1.4.0",
                    "session_id": "demo-session-1" if n < 2 else "demo-session-2",
                    "end_user_id": "customer-42",
                    "environment": "production",
                    "release": "2026.11.3",
                    "tags": ["demo", "support"],
                },
            ),
            StepEvent(
                trace_id=trace,
                span_id="llm-1",
                parent_span_id="root",
                kind="llm",
                name="chat mistral-large",
                started_at=at(0.1),
                ended_at=at(1.9),
                status="ok",
                model="mistral-large-2512",
                provider="mistral_ai",
                input_tokens=812,
                output_tokens=46,
                # What the model was sent: what a replay starts from.
                input={
                    "messages": [{"role": "system", "content": system}, {"role": "user", "content": question}],
                    "tools": [tool],
                },
                attributes={"gen_ai.request.temperature": 0.3},
            ),
            StepEvent(
                trace_id=trace,
                span_id="tool-1",
                parent_span_id="root",
                kind="tool",
                name=tool_name,
                started_at=at(2.0),
                ended_at=at(7.0) if failed else at(2.6),
                status="error" if failed else "ok",
                error="ToolTimeout: no answer in 5 s" if failed else "",
            ),
        ]
        messages += [
            MessageEvent(trace_id=trace, message_id="m1", position=1, role="system", content=system, span_id="llm-1"),
            MessageEvent(trace_id=trace, message_id="m2", position=2, role="user", content=question, span_id="llm-1"),
            MessageEvent(
                trace_id=trace,
                message_id="m3",
                position=3,
                role="assistant",
                content="",
                span_id="llm-1",
                tool_calls=[
                    {
                        "id": f"call-{n}",
                        "name": tool_name,
                        "arguments": {"query": question},
                    }
                ],
                finish_reason="tool_calls",
            ),
        ]
        calls.append(
            ToolCallEvent(
                trace_id=trace,
                call_id=f"call-{n}",
                span_id="tool-1",
                tool_name=tool_name,
                arguments={"query": question},
                result=None if failed else {"hits": 3, "top": answer},
                error="ToolTimeout: no answer in 5 s" if failed else "",
                latency_ms=5000 if failed else 600,
                started_at=at(2.0),
            )
        )
        snapshots.append(
            MemoryEvent(
                trace_id=trace,
                snapshot_id="mem-1",
                span_id="tool-1",
                sequence=1,
                state={"customer": "customer-42", "topic": question.split()[-1].strip("?"), "searched": not failed},
            )
        )
        if not failed:
            steps.append(
                StepEvent(
                    trace_id=trace,
                    span_id="llm-2",
                    parent_span_id="root",
                    kind="llm",
                    name="chat mistral-large",
                    started_at=at(2.7),
                    ended_at=at(6.3),
                    status="ok",
                    model="mistral-large-2512",
                    provider="mistral_ai",
                    input_tokens=1104,
                    output_tokens=71,
                )
            )
            messages += [
                MessageEvent(
                    trace_id=trace,
                    message_id="m4",
                    position=4,
                    role="tool",
                    content={"hits": 3},
                    tool_call_id=f"call-{n}",
                    name=tool_name,
                    span_id="llm-2",
                ),
                MessageEvent(
                    trace_id=trace,
                    message_id="m5",
                    position=5,
                    role="assistant",
                    content=answer,
                    span_id="llm-2",
                    finish_reason="stop",
                ),
            ]
    result = ingest(
        project=project, steps=steps, messages=messages, tool_calls=calls, snapshots=snapshots, announce=False
    )
    return len(result.runs_created)


DEMO_AGENT = "Demo calculator (offline)"


def demo_agent_seed(*, project, actor=None) -> int:
    """An agent on the offline model (no key needed), one executed run of it and a replay
    of that run, so a new user can read an executed run, compare it with its replay, and
    start more from the agent's page."""
    if Agent.objects.filter(project=project, name=DEMO_AGENT).exists():
        return 0
    agent = agent_create(
        project=project,
        actor=actor,
        name=DEMO_AGENT,
        model="offline",
        description="Runs on the scripted offline model: no Mistral key needed.",
        system_prompt="You are a careful calculator. Use the tools, then answer.",
        tools=["calculator", "memory_set"],
        step_limit=10,
    )
    run = run_start(project=project, agent=agent, actor=actor, input="What is (19 + 23) * 2?")
    # Executed here rather than on a worker: the demo is seeded before the workers start.
    # Where a worker is already up (seeding a running platform), it may have claimed the
    # run first: then wait for its end, as the replay needs an ended run.
    run_execute(run_id=run.pk)
    _wait_until_ended(run)
    # And a replay of it, its tool calls served from the recording, to compare with it.
    (replay,) = replay_start(source=run, actor=actor, overrides={"temperature": 0.5}, tool_mode="recorded")
    run_execute(run_id=replay.pk)
    return 1


def _wait_until_ended(run, timeout: float = 120.0) -> None:
    """Wait for ``run`` (refreshed) to end; a hang guard, not a pace."""
    deadline = time.monotonic() + timeout
    run.refresh_from_db()
    while run.status not in Run.ENDED and time.monotonic() < deadline:
        time.sleep(0.1)
        run.refresh_from_db()


DEMO_SESSION = "Demo session: a calculation, then follow-ups"
DEMO_SESSION_MESSAGES = ["What is (19 + 23) * 2?", "And half of that?", "Thanks! Say it in one sentence."]


def demo_session_seed(*, project, actor=None) -> int:
    """A session with the offline demo agent and a few turns, each executed here, so a
    new user can read a conversation and go on with it."""
    agent = Agent.objects.filter(project=project, name=DEMO_AGENT).first()
    if agent is None or Session.objects.filter(project=project, title=DEMO_SESSION).exists():
        return 0
    session = session_create(project=project, agent=agent, actor=actor, title=DEMO_SESSION)
    for text in DEMO_SESSION_MESSAGES:
        message = session_send(session=session, actor=actor, content=text)
        run_execute(run_id=message.run_id)  # idle after each turn: every message starts its turn at once
    return 1
