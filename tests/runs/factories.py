"""Runs as agents send them, for the runs tests: written through the one write path
(``runs.ingest.ingest``) inside the organization's scope, never row by row."""

from __future__ import annotations

import json
from datetime import timedelta

from django.utils import timezone

from agentops.scoping import organization_scope
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.models import Run

T0 = timezone.now().replace(microsecond=0) - timedelta(hours=1)

XSS = '"><img src=x onerror=alert(1)><script>alert(2)</script>'


def store(project, *, runs=(), steps=(), snapshots=()) -> None:
    with organization_scope(project.organization):
        ingest(project=project, runs=list(runs), steps=list(steps), snapshots=list(snapshots), announce=False)


def run_of(project, trace_id: str) -> Run:
    with organization_scope(project.organization):
        return Run.objects.get(project=project, trace_id=trace_id)


def agent_run(project, trace_id: str, *, model: str = "mistral-large-2512", **fields) -> Run:
    """A finished run with one LLM step, as an agent would send it."""
    store(
        project,
        runs=[RunEvent(trace_id, {"name": trace_id, "started_at": T0, **fields})],
        steps=[
            StepEvent(
                trace_id=trace_id,
                span_id="root",
                kind="llm",
                name="chat",
                model=model,
                started_at=T0,
                ended_at=T0 + timedelta(seconds=1),
                status="ok",
                input_tokens=10,
                output_tokens=5,
            )
        ],
    )
    return run_of(project, trace_id)


def hostile_run(project) -> Run:
    """A run whose every agent-chosen string is markup."""
    with organization_scope(project.organization):
        ingest(
            project=project,
            runs=[
                RunEvent(
                    "hostile",
                    {
                        "name": XSS,
                        "agent_name": XSS,
                        "agent_version": XSS[:100],
                        "environment": XSS[:100],
                        "release": XSS[:100],
                        "end_user_id": XSS,
                        "session_id": XSS,
                        "tags": [XSS[:100]],
                        "metadata": {XSS: XSS},
                        "input": {XSS: [XSS]},
                        "output": XSS,
                        "error": XSS,
                        "status": "failed",
                        "started_at": T0,
                    },
                )
            ],
            steps=[
                StepEvent(
                    trace_id="hostile",
                    span_id="s1",
                    kind="llm",
                    name=XSS,
                    model=XSS,
                    provider=XSS[:100],
                    started_at=T0,
                    ended_at=T0 + timedelta(seconds=1),
                    status="error",
                    error=XSS,
                    input={"messages": [{"role": XSS, "content": XSS}]},
                    output={XSS: XSS},
                    attributes={XSS: XSS},
                    events=[{XSS: XSS}],
                    input_tokens=1,
                )
            ],
            messages=[
                MessageEvent(
                    trace_id="hostile",
                    message_id="m1",
                    position=1,
                    role=XSS[:32],
                    content=XSS,
                    span_id="s1",
                    tool_calls=[{"id": XSS, "function": {"name": XSS, "arguments": json.dumps({XSS: XSS})}}],
                    tool_call_id=XSS,
                    name=XSS,
                    finish_reason=XSS[:64],
                ),
                MessageEvent(trace_id="hostile", message_id="m2", position=2, role="user", content=[{"text": XSS}]),
            ],
            tool_calls=[
                ToolCallEvent(
                    trace_id="hostile", call_id=XSS, tool_name=XSS, span_id="s1", arguments={XSS: XSS}, result=XSS
                )
            ],
            snapshots=[
                MemoryEvent(trace_id="hostile", snapshot_id="a", sequence=1, state={XSS: XSS}, span_id="s1"),
                MemoryEvent(trace_id="hostile", snapshot_id="b", sequence=2, state={XSS: [XSS], "x": XSS}),
            ],
            announce=False,
        )
        return Run.objects.get(project=project, trace_id="hostile")
