"""Starting an executed run: what it runs (``Spec``, from an agent version and a replay's
changes), its queued record, stored through the one write path, and its hand-off to a
worker once the transaction commits."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from functools import cache
from typing import Any

from django.db import connection, transaction
from django.utils import timezone

from agentops import rows
from agentops.errors import InvalidRequest
from agentops.queueing import send_or_leave_to_sweeper
from agentops.services.audit import audit_record
from billing.budgets import check_work_allowed
from runs.events import RunEvent
from runs.ingest import ingest
from runs.models import Agent, AgentVersion, Run
from runs.services.agents import clean_parameters
from runs.tasks import execute_run


@dataclass
class Spec:
    """What an executed run runs: an agent version's settings, as the run's state holds
    them (``version_spec``), with a replay's changes."""

    model: str
    system_prompt: str = ""
    tools: list[str] = field(default_factory=list)
    approval_tools: list[str] = field(default_factory=list)
    step_limit: int = 20
    tool_definitions: list[dict] = field(default_factory=list)
    # A platform tool set (runs.tools.registry.TOOLSETS) the tools are taken from, for the
    # platform's own agents; "" for an agent's run: the project's built-in and webhook tools.
    toolset: str = ""


def version_spec(version: AgentVersion) -> dict:
    """What the executor takes from an agent version; a replay may change any of it.
    ``tool_definitions`` holds tools outside the registry (a replay of an ingested run
    offers the model the tools it had; their calls are served from the recording)."""
    return {
        "model": version.model,
        "system_prompt": version.system_prompt,
        "tools": list(version.tools),
        "approval_tools": list(version.approval_tools),
        "step_limit": version.step_limit,
        "tool_definitions": [],
        "toolset": version.toolset,
    }


def run_start(
    *,
    project,
    agent: Agent,
    actor,
    input: Any,
    version_number: int | None = None,
    parameters: dict | None = None,
    api_key=None,
    ip: str | None = None,
) -> Run:
    """Create a queued run of ``agent`` (its latest version unless one is named) and hand
    it to a worker once the transaction commits. ``api_key``: the key that asked for it.
    Refused with 402 when a hard budget covering the project (or key) is spent."""
    number = version_number or agent.latest_version
    version = AgentVersion.objects.filter(agent=agent, number=number).first()
    if version is None:
        raise InvalidRequest(f"agent {agent.name!r} has no version {number}")
    if input in (None, ""):
        raise InvalidRequest("give the run an input (the user's message)")
    overrides = clean_parameters(parameters)
    check_work_allowed(project=project, api_key=api_key, work="run")
    return create_executed_run(
        project=project,
        actor=actor,
        api_key=api_key,
        name=agent.name,
        agent_name=agent.name,
        version=version,
        input=input,
        spec=version_spec(version),
        parameters={**version.parameters, **overrides},
        audit=("run.start", {"agent": agent.name, "version": version.number}),
        ip=ip,
    )


def create_executed_run(
    *,
    project,
    actor,
    name: str,
    agent_name: str,
    input: Any,
    spec: dict,
    parameters: dict,
    audit: tuple[str, dict] | None,
    version: AgentVersion | None = None,
    state: dict | None = None,
    replay_of: Run | None = None,
    prefix: dict | None = None,
    fields: dict | None = None,
    api_key=None,
    ip: str | None = None,
) -> Run:
    """Store a queued executed run (an agent run, a replay, an experiment's item) and
    hand it to a worker once the transaction commits. ``state`` seeds the executor's
    state (a forked replay starts mid-conversation); ``prefix`` holds steps, messages,
    tool calls and snapshots (ingest's keyword arguments) stored with it, as the fork's
    copied beginning; ``fields``: more run fields (environment, tags, metadata keys).
    ``audit``: the audit record to write, or None when the caller audits the whole
    (an experiment audits itself once, not each of its runs)."""
    now = timezone.now()
    trace_id = f"exec-{uuid.uuid4().hex}"
    fields = dict(fields or {})
    metadata: dict[str, Any] = {**fields.pop("metadata", {}), "executed": True, "parameters": parameters}
    if replay_of is not None:
        metadata["replay_of"] = replay_of.pk
    # No savepoint when nested (an experiment's advance, a replay's request): no caller
    # carries on after a failure here, and a savepoint costs two round trips a run.
    with transaction.atomic(savepoint=False):
        created = ingest(
            project=project,
            runs=[
                RunEvent(
                    trace_id=trace_id,
                    fields={
                        "name": name,
                        "agent_name": agent_name,
                        "agent_version": str(version.number) if version else "",
                        "status": Run.Status.QUEUED,
                        "input": input,
                        "started_at": now,
                        **fields,
                        "metadata": metadata,
                    },
                )
            ],
        ).runs_created
        run = _mark_executed(
            created[0],
            version=version,
            replay_of=replay_of,
            api_key=api_key,
            execution={**(state or {}), "parameters": parameters, "spec": spec},
        )
        if prefix:
            ingest(
                project=project, **{key: [_retraced(item, trace_id) for item in items] for key, items in prefix.items()}
            )
        if audit is not None:
            action, data = audit
            audit_record(organization=project.organization, actor=actor, action=action, target=run, data=data, ip=ip)
        transaction.on_commit(lambda: _enqueue(project.organization_id, run.pk))
    return run


_RUN_SKIPPED = ("search",)  # the search text: large, never read by the executor


@cache
def _mark_executed_sql() -> str:
    """UPDATE of a new run's executor fields, returning the run: one statement instead of
    a read and a write, built once (``agentops.rows``)."""
    return (
        "UPDATE runs_run AS run SET executed = true, executed_version_id = %s, replay_of_id = %s, "  # noqa: S608
        f"api_key_id = %s, execution = %s WHERE id = %s RETURNING {rows.columns(Run, 'run', _RUN_SKIPPED)}"
    )


def _mark_executed(run_id: int, *, version, replay_of, api_key, execution: dict) -> Run:
    """Mark the run ``run_id`` (just created by ingest) executed, with its version, the run it
    replays, the key that asked for it and the executor's state; returns it."""
    with connection.cursor() as cursor:
        cursor.execute(
            _mark_executed_sql(),
            [
                getattr(version, "pk", None),
                getattr(replay_of, "pk", None),
                getattr(api_key, "pk", None),
                Run._meta.get_field("execution").get_db_prep_save(execution, connection),
                run_id,
            ],
        )
        (run,) = rows.instances(cursor.fetchone(), (Run, _RUN_SKIPPED))
    # The related objects the caller gave, as the instance had them before (no query to read them).
    run.executed_version, run.replay_of, run.api_key = version, replay_of, api_key
    return run


def _retraced(event, trace_id: str):
    """``event`` (an ingest event built before the run existed) with the run's trace id."""
    event.trace_id = trace_id
    return event


def _enqueue(organization_id: int, run_id: int) -> None:
    send_or_leave_to_sweeper(execute_run, organization_id, run_id)  # recover_stalled_runs re-sends
