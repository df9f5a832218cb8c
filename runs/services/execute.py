"""The platform runs agents itself: start, execute (on a Celery worker), cancel.

Execution is the tool-calling loop: ask the model; store the call as an ``llm`` step;
run each tool it asked for and store a ``tool`` step, the tool call, the tool's message
and the scratch memory; repeat until the model answers without tools, the step limit is
reached, the run is cancelled or a call fails. Every step goes through
``runs.services.ingest.ingest`` — the same write path as ingested traces — so totals,
cost and live updates work the same way.
"""

from __future__ import annotations

import json
import logging
import os
import socket
import time
import uuid
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import connection, transaction
from django.db.models import Q
from django.db.models.expressions import RawSQL
from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest
from agentops.llm.base import CallAbandoned, ProviderError
from agentops.llm.context import context_window, estimate_tokens
from agentops.llm.providers import provider_for
from agentops.services.audit import audit_record
from billing.budgets import check_work_allowed
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.live import TextStream
from runs.models import Agent, AgentVersion, Approval, Run
from runs.services.agents import clean_parameters
from runs.services.approvals import approval_request, approvals_close
from runs.services.recorded_tools import recorded_tools
from runs.services.redaction import redactor_for
from runs.signals import run_ended
from runs.tools.base import ToolContext, ToolError
from runs.tools.registry import tools_for

logger = logging.getLogger(__name__)

ROOT_SPAN = "root"
# The same tool with the same arguments this many times in a row gets a corrective
# message; once more after it and the run stops.
REPEAT_LIMIT = 3
WAITING = "waiting"
ENDED = "ended"
# Tools that only read and write the run's own scratch memory: a replay with recorded
# tools still runs them, so its memory evolves as the original's did.
LOCAL_STATE_TOOLS = {"memory_set", "memory_get"}
# Compact the conversation when it passes this share of the model's context window,
# keeping this many of the latest messages.
COMPACT_AT = 0.8
KEEP_RECENT = 6


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
    with transaction.atomic():
        ingest(
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
        )
        run = Run.objects.get(project=project, trace_id=trace_id)
        run.executed = True
        run.executed_version = version
        run.replay_of = replay_of
        run.api_key = api_key
        run.execution = {**(state or {}), "parameters": parameters, "spec": spec}
        run.save(update_fields=["executed", "executed_version", "replay_of", "api_key", "execution"])
        if prefix:
            ingest(
                project=project, **{key: [_retraced(item, trace_id) for item in items] for key, items in prefix.items()}
            )
        if audit is not None:
            action, data = audit
            audit_record(organization=project.organization, actor=actor, action=action, target=run, data=data, ip=ip)
        transaction.on_commit(lambda: _enqueue(project.organization_id, run.pk))
    return run


def _retraced(event, trace_id: str):
    """``event`` (an ingest event built before the run existed) with the run's trace id."""
    event.trace_id = trace_id
    return event


def _enqueue(organization_id: int, run_id: int) -> None:
    from runs.tasks import execute_run

    execute_run.delay(organization_id, run_id)


def run_cancel(*, run: Run, actor, ip: str | None = None) -> Run:
    """Ask the run to stop. A queued or waiting run (no worker is on it) ends at once, its
    pending approvals closed; a running one when its worker next looks: after the step in
    progress, or within a second while a model streams its answer."""
    with transaction.atomic():
        run = Run.objects.select_for_update().get(pk=run.pk)
        if not run.executed:
            raise InvalidRequest("only runs the platform executes can be cancelled")
        if run.status in (Run.Status.SUCCEEDED, Run.Status.FAILED, Run.Status.CANCELLED):
            raise Conflict(f"the run already {run.status}")
        run.cancel_requested = True
        run.save(update_fields=["cancel_requested"])
        if run.status in (Run.Status.QUEUED, Run.Status.WAITING):
            _end_cancelled(run)
        audit_record(organization=run.project.organization, actor=actor, action="run.cancel", target=run, ip=ip)
    return run


def _end_cancelled(run: Run) -> None:
    """End a cancelled run no worker is executing (queued, waiting, or just claimed),
    closing the approvals it waited for: nobody can decide them any more."""
    if approvals_close(run=run, reason="the run was cancelled"):
        error = "cancelled while waiting for approval"
    elif not (run.execution or {}).get("started"):
        error = "cancelled before it started"
    else:
        error = "cancelled"
    _finish(run, status=Run.Status.CANCELLED, error=error)


def _finish(run: Run, *, status: str, output: Any = None, error: str = "") -> None:
    fields: dict[str, Any] = {"status": status, "ended_at": timezone.now()}
    if output is not None:
        fields["output"] = output
    if error:
        fields["error"] = error
    _ingest(
        run,
        runs=[RunEvent(trace_id=run.trace_id, fields=fields)],
        steps=[_root_step(run, status=status, error=error, output=output, ended=True)],
    )
    run_ended.send(sender=Run, run=run, status=status)


def _ingest(run: Run, **batch) -> None:
    """Store a batch of the run through the one write path, with the project's redactor
    read once per execution (``_execute`` sets it)."""
    ingest(project=run.project, redactor=getattr(run, "redactor", None), **batch)


def _root_step(run: Run, *, status: str = "", error: str = "", output: Any = None, ended: bool = False) -> StepEvent:
    return StepEvent(
        trace_id=run.trace_id,
        span_id=ROOT_SPAN,
        kind="agent",
        name=run.agent_name or run.name,
        started_at=run.started_at,
        ended_at=timezone.now() if ended else None,
        status={"succeeded": "ok", "failed": "error", "cancelled": "error"}.get(status, "unset"),
        error=error,
        input=run.input,
        output=output,
    )


def _llm_step(
    run: Run,
    span_id: str,
    name: str,
    parent: str,
    provider,
    spec: Spec,
    started: datetime,
    *,
    input: Any,
    result=None,
    error: str = "",
    output: Any = None,
) -> StepEvent:
    """The ``llm`` step of one model call: its result (usage, response), or its error."""
    fields: dict[str, Any] = {}
    if result is not None:
        fields = {
            "model": result.model if spec.model != "offline" else "offline",
            "input_tokens": result.input_tokens,
            "cached_input_tokens": result.cached_input_tokens,
            "output_tokens": result.output_tokens,
            "output": output
            if output is not None
            else result.raw or {"content": result.content, "tool_calls": result.tool_calls},
            "attributes": {"finish_reason": result.finish_reason},
        }
    return StepEvent(
        trace_id=run.trace_id,
        span_id=span_id,
        parent_span_id=parent,
        kind="llm",
        name=name,
        started_at=started,
        ended_at=timezone.now(),
        status="error" if error else "ok",
        error=error,
        provider=getattr(provider, "name", ""),
        input=input,
        **{"model": spec.model, **fields},
    )


def _assistant_message(content: str, tool_calls: list[dict]) -> dict:
    message: dict[str, Any] = {"role": "assistant", "content": content or ""}
    if tool_calls:
        message["tool_calls"] = [
            {
                "id": call["id"],
                "type": "function",
                "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
            }
            for call in tool_calls
        ]
    return message


def _stall_after() -> timedelta:
    """A running run whose worker has been silent this long lost its worker (it beats
    after every step and while a model streams)."""
    return timedelta(seconds=settings.RUN_STALL_SECONDS)


# A claim of a running run (its worker stopped beating) counts a lost worker in the run's
# state, in the same statement: RUN_MAX_ATTEMPTS bounds how often a run that kills its
# worker (each attempt a paid model call) is tried.
_COUNT_LOST_WORKER = RawSQL(
    "CASE WHEN status = %s THEN jsonb_set(execution, '{workers_lost}', "
    "to_jsonb(COALESCE((execution->>'workers_lost')::int, 0) + 1)) ELSE execution END",
    [Run.Status.RUNNING],
)


class LostClaim(Exception):
    """Another worker took the run (this one was silent for longer than the stall time):
    this one stops without writing anything more."""


def _claim(run_id: int) -> str:
    """Take the run for this worker: a queued one, a running one whose worker stopped
    beating (it died mid-run: the run resumes from its saved state), or a queued or
    waiting one with a cancellation pending (the worker ends it). Returns the claim (this
    worker's mark on the run, which every later state save checks), or "" when another
    worker has it, or it ended."""
    now = timezone.now()
    claim = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"
    claimed = (
        # A stalled run is taken even when cancelled meanwhile: its new worker ends it.
        Run.objects.filter(pk=run_id)
        .filter(
            Q(status=Run.Status.QUEUED)
            | Q(status=Run.Status.WAITING, cancel_requested=True)
            | Q(status=Run.Status.RUNNING, heartbeat_at__lt=now - _stall_after())
        )
        .update(status=Run.Status.RUNNING, worker=claim, heartbeat_at=now, execution=_COUNT_LOST_WORKER)
    )
    # Nothing got updated: another worker got there first, or the run is not ours to take.
    return claim if claimed == 1 else ""


def stalled_run_ids() -> list[tuple[int, int]]:
    """(organization id, run id) of executed runs no worker is on: running ones whose
    worker stopped beating, queued ones whose task never reached a worker (lost with a
    worker that had taken it, or never sent), and queued or waiting ones with a
    cancellation pending. A periodic task hands them to a worker again: they resume from
    their saved state (or, cancelled meanwhile, end cancelled)."""
    from agentops.scoping import dangerously_unscoped

    silent_since = timezone.now() - _stall_after()
    with dangerously_unscoped("the recovery task looks for stalled runs in every organization"):
        return list(
            Run.objects.filter(executed=True)
            .filter(
                Q(status=Run.Status.RUNNING, heartbeat_at__lt=silent_since)
                | Q(status=Run.Status.QUEUED, cancel_requested=False, created_at__lt=silent_since)
                | Q(status__in=[Run.Status.QUEUED, Run.Status.WAITING], cancel_requested=True)
            )
            .values_list("organization_id", "id")
        )


def _save_state(run: Run, state: dict) -> bool:
    """Save the executor's state after a step (and beat), so a run whose worker dies
    resumes there and no model call that already succeeded is made (and paid for) again.
    Returns whether the run was cancelled meanwhile; raises LostClaim when another worker
    has taken the run. One statement."""
    run.execution = state
    field = Run._meta.get_field("execution")
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runs_run SET execution = %s, heartbeat_at = %s WHERE id = %s AND worker = %s "
            "RETURNING cancel_requested",
            [field.get_db_prep_save(state, connection), timezone.now(), run.pk, run.worker],
        )
        row = cursor.fetchone()
    if row is None:
        raise LostClaim(f"run {run.pk} was taken by another worker")
    run.cancel_requested = row[0]
    return row[0]


# While a model streams a long answer, the worker beats at most this often, and reads a
# cancellation at most this often.
BEAT_EVERY_SECONDS = 15
CANCEL_CHECK_SECONDS = 1


def _beating(run: Run, write):
    """``write`` (a piece of the streamed answer), also beating the run's heartbeat now
    and then (a model writing for minutes must not make its worker look dead) and reading
    a cancellation: a cancelled run stops reading the answer (CallAbandoned)."""
    last_beat = last_check = time.monotonic()

    def on_text(piece: str) -> None:
        nonlocal last_beat, last_check
        write(piece)
        now = time.monotonic()
        if now - last_beat >= BEAT_EVERY_SECONDS:
            last_beat = now
            Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now())
        if now - last_check >= CANCEL_CHECK_SECONDS:
            last_check = now
            if Run.objects.filter(pk=run.pk, cancel_requested=True).exists():
                raise CallAbandoned(f"run {run.pk} was cancelled")

    return on_text


def _action_signature(call: dict) -> str:
    return call["name"] + ":" + json.dumps(call["arguments"], sort_keys=True, default=str)


def run_execute(*, run_id: int) -> None:
    """Execute a queued run to its end, or resume one whose worker died (Celery entry
    point: runs.tasks.execute_run)."""
    if not _claim(run_id):
        return
    run = Run.objects.select_related("project", "executed_version", "project__organization").get(pk=run_id)
    if run.cancel_requested:  # cancelled while it waited, or while no worker was on it
        _end_cancelled(run)
        return
    lost = run.execution.get("workers_lost", 0)
    if lost >= settings.RUN_MAX_ATTEMPTS:
        _finish(
            run,
            status=Run.Status.FAILED,
            error=f"given up after {lost} attempts: the worker executing the run stopped (killed or crashed) "
            f"during each of them, so it is not tried again (RUN_MAX_ATTEMPTS is {settings.RUN_MAX_ATTEMPTS})",
        )
        return
    try:
        _execute(run)
    except LostClaim:
        logger.warning("run %s: another worker took it over; this one stops", run.pk)


def _execute(run: Run) -> None:
    project = run.project
    run.redactor = redactor_for(project)
    state = dict(run.execution)
    if "spec" in state:
        spec, parameters = Spec(**state["spec"]), state.get("parameters", {})
    else:  # started before runs kept their spec in their state
        version = run.executed_version
        spec, parameters = Spec(**version_spec(version)), {**version.parameters, **state.get("parameters", {})}
    tools = tools_for(project=project, names=spec.tools)
    definitions = [tool.definition() for tool in tools.values()]
    definitions += [d for d in spec.tool_definitions if d["function"]["name"] not in tools]
    replay = state.get("replay") or {}
    recorded = recorded_tools(run, replay, used=state.get("recorded_used", [])) if replay.get("tool_mode") else None
    try:
        provider = provider_for(organization=project.organization, model=spec.model)
    except InvalidRequest as exc:
        _finish(run, status=Run.Status.FAILED, error=exc.message)
        return

    with transaction.atomic():  # the run's start and the state that says it started
        _start(run, state, spec)
        _save_state(run, state)  # beats, checks the claim, and reads a cancellation

    while True:
        if run.cancel_requested:  # as the last state save read it
            _finish(run, status=Run.Status.CANCELLED, error="cancelled")
            return
        if state["pending"]:
            # The model asked for tools: run them (this is also where a resumed run picks up).
            outcome = _run_pending_tools(run, state, tools, spec, recorded)
            if outcome == WAITING:
                _end_if_cancelled_while_parking(run)
                return  # A person decides; the decision queues the run again.
            if outcome == ENDED:
                return
            continue
        if state["step"] >= spec.step_limit:
            _finish(run, status=Run.Status.FAILED, error=f"the step limit of {spec.step_limit} was reached")
            return
        state["step"] += 1
        step = state["step"]
        if estimate_tokens(state["conversation"]) > COMPACT_AT * context_window(spec.model):
            _compact(run, state, provider, spec, parameters)
        started = timezone.now()
        stream = TextStream(run=run, step=step, model=spec.model)
        try:
            result = provider.chat(
                model=spec.model,
                messages=state["conversation"],
                tools=definitions,
                parameters=parameters,
                timeout_ms=settings.LLM_CALL_TIMEOUT_SECONDS * 1000,
                on_text=_beating(run, stream.write),
            )
        except CallAbandoned:  # cancelled while the model was writing its answer
            stream.close()
            with transaction.atomic():
                _ingest(
                    run,
                    steps=[
                        _llm_step(
                            run,
                            f"llm-{step}",
                            f"chat {spec.model}",
                            ROOT_SPAN,
                            provider,
                            spec,
                            started,
                            input={"messages": state["conversation"]},
                            error="cancelled while the model was answering",
                        )
                    ],
                )
                _finish(run, status=Run.Status.CANCELLED, error="cancelled")
            return
        except ProviderError as exc:
            stream.close()
            with transaction.atomic():  # the failed call and the run's end, together
                _ingest(
                    run,
                    steps=[
                        _llm_step(
                            run,
                            f"llm-{step}",
                            f"chat {spec.model}",
                            ROOT_SPAN,
                            provider,
                            spec,
                            started,
                            input={"messages": state["conversation"]},
                            error=str(exc),
                        )
                    ],
                )
                _finish(run, status=Run.Status.FAILED, error=f"step {step}: {exc}")
            return
        stream.close()
        position = state["position"]
        # The model call and the state that says it was made are saved together (and a
        # final answer with the run's end): a worker that dies after this commit resumes
        # past the call, one that dies before it makes the call again with nothing of the
        # first stored. A stored final answer is never asked for again.
        with transaction.atomic():
            _store_answer(run, state, step, spec, provider, started, parameters, result, position)
            if not result.tool_calls:
                _finish(run, status=Run.Status.SUCCEEDED, output=result.content)
        if not result.tool_calls:
            return


def _end_if_cancelled_while_parking(run: Run) -> None:
    """A cancellation that came while the run was going to ``waiting`` found it running
    and only asked it to stop: end it now (a later one finds it waiting and ends it)."""
    with transaction.atomic():
        parked = Run.objects.select_for_update().filter(pk=run.pk, status=Run.Status.WAITING).first()
        if parked is not None and parked.cancel_requested:
            _end_cancelled(parked)


def _start(run: Run, state: dict, spec: Spec) -> None:
    """Store the run's start (its root step and first messages) once, and the state it
    begins from."""
    if not state.get("started"):
        _ingest(
            run,
            runs=[RunEvent(trace_id=run.trace_id, fields={"status": Run.Status.RUNNING})],
            steps=[_root_step(run)],
        )
        state["started"] = True
    if "conversation" not in state:  # a forked replay starts with the conversation of its source
        conversation = state.pop("start_conversation", None)  # a replay of an ingested run brings its own
        if conversation is None:
            user_input = run.input if isinstance(run.input, str) else json.dumps(run.input)
            conversation = [{"role": "system", "content": spec.system_prompt}] if spec.system_prompt else []
            conversation.append({"role": "user", "content": user_input})
        _ingest(
            run,
            messages=[
                MessageEvent(
                    trace_id=run.trace_id,
                    message_id=f"m{index}",
                    position=index,
                    role=message["role"],
                    content=message.get("content"),
                    tool_calls=message.get("tool_calls") or [],
                    tool_call_id=message.get("tool_call_id", ""),
                    name=message.get("name", ""),
                )
                for index, message in enumerate(conversation)
            ],
        )
        state.update(
            conversation=conversation,
            memory={},
            step=0,
            position=len(conversation),
            pending=[],
            recent_actions=[],
            warned="",
        )


def _store_answer(run, state, step, spec, provider, started, parameters, result, position) -> None:
    """Store a model call (its llm step and the assistant's message) and the state after it."""
    _ingest(
        run,
        steps=[
            _llm_step(
                run,
                f"llm-{step}",
                f"chat {spec.model}",
                ROOT_SPAN,
                provider,
                spec,
                started,
                input={"messages": state["conversation"], "parameters": parameters},
                result=result,
            )
        ],
        messages=[
            MessageEvent(
                trace_id=run.trace_id,
                message_id=f"m{position}",
                position=position,
                role="assistant",
                content=result.content,
                tool_calls=result.tool_calls,
                finish_reason=result.finish_reason,
                span_id=f"llm-{step}",
                tokens=result.output_tokens,
            )
        ],
    )
    state["conversation"].append(_assistant_message(result.content, result.tool_calls))
    state["position"] = position + 1
    state["pending"] = [{**call, "index": index} for index, call in enumerate(result.tool_calls)]
    _save_state(run, state)


def _compact(run: Run, state: dict, provider, spec: Spec, parameters: dict) -> None:
    """Shrink a conversation that nears the model's context window: keep the system
    prompt, the first user message and the most recent messages, replace the middle by
    a summary the model writes, and record both the summarising call and the compaction
    as steps of the run, with the state after it."""
    conversation = state["conversation"]
    head = [m for m in conversation[:2] if m["role"] in ("system", "user")]
    if len(head) == 2 and head[1]["role"] != "user":
        head = head[:1]
    tail_start = max(len(head), len(conversation) - KEEP_RECENT)
    # Never start the kept tail on a tool result whose call would be cut away.
    while tail_start < len(conversation) and conversation[tail_start]["role"] == "tool":
        tail_start -= 1
    middle = conversation[len(head) : tail_start]
    if len(middle) < 2:
        return  # Nothing worth summarising: the kept messages alone are this long.
    step = state["step"]
    started = timezone.now()
    request = [
        {
            "role": "system",
            "content": "Summarise this part of an agent's conversation in at most 200 words. "
            "Keep facts, decisions, tool results and open questions.",
        },
        {"role": "user", "content": json.dumps(middle, default=str)[:200_000]},
    ]
    try:
        result = provider.chat(
            model=spec.model,
            messages=request,
            tools=[],
            parameters=parameters,
            timeout_ms=settings.LLM_CALL_TIMEOUT_SECONDS * 1000,
        )
        summary = result.content.strip() or "(empty summary)"
    except ProviderError as exc:
        result, summary = None, f"(the earlier part of the conversation was removed; summarising failed: {exc})"
    before = estimate_tokens(conversation)
    compacted = [
        *head,
        {"role": "user", "content": f"Summary of the earlier conversation: {summary}"},
        *conversation[tail_start:],
    ]
    steps = [
        StepEvent(
            trace_id=run.trace_id,
            span_id=f"compaction-{step}",
            parent_span_id=ROOT_SPAN,
            kind="custom",
            name="context compaction",
            started_at=started,
            ended_at=timezone.now(),
            status="ok",
            output={"summary": summary},
            attributes={
                "messages_before": len(conversation),
                "messages_after": len(compacted),
                "estimated_tokens_before": before,
                "estimated_tokens_after": estimate_tokens(compacted),
                "context_window": context_window(spec.model),
            },
        )
    ]
    if result is not None:
        steps.append(
            _llm_step(
                run,
                f"compaction-{step}-llm",
                f"summarise {spec.model}",
                f"compaction-{step}",
                provider,
                spec,
                started,
                input={"messages": request},
                result=result,
                output={"content": result.content},
            )
        )
    state["conversation"] = compacted
    state["compactions"] = state.get("compactions", 0) + 1
    with transaction.atomic():  # the summarising call and the state that holds its summary
        _ingest(run, steps=steps)
        _save_state(run, state)


def _run_pending_tools(run: Run, state: dict, tools: dict, spec: Spec, recorded=None) -> str:
    """Run the tool calls the model asked for, one by one, saving after each. Returns
    WAITING when a call needs a person's approval first, ENDED when a call stopped the
    run (it ended failed, with the reason), or "" to go on."""
    while state["pending"]:
        call = state["pending"][0]
        refusal = ""
        # A replay serves a recorded call as the source made it (approved arguments
        # included) without asking a person again; one the source never made fails the
        # replay, or (unmatched: live) goes through approval like any call.
        replayed = recorded is not None and call["name"] not in LOCAL_STATE_TOOLS
        served = recorded.take(call["name"], call["arguments"]) if replayed else None
        unmatched = replayed and served is None and recorded.unmatched == "fail"
        if served is None and not unmatched and call["name"] in spec.approval_tools:
            approval = Approval.objects.filter(run=run, call_id=call["id"]).first()
            if approval is None or approval.status == Approval.Status.PENDING:
                if approval is None:
                    approval_request(run=run, call=call)
                return WAITING
            if approval.status == Approval.Status.APPROVED:
                call = {**call, "arguments": approval.approved_arguments}
            elif approval.status == Approval.Status.REJECTED:
                refusal = "a person rejected this call" + (f": {approval.reason}" if approval.reason else "")
            else:
                refusal = "nobody approved this call in time"
        events, state["position"], stop = _run_tool(
            run,
            state["step"],
            call["index"],
            call,
            tools,
            state["memory"],
            state["conversation"],
            state["position"],
            refusal=refusal,
            replayed=replayed,
            served=served,
            unmatched=unmatched,
        )
        state["pending"] = state["pending"][1:]
        if recorded is not None:
            state["recorded_used"] = recorded.used
        signature = _action_signature(call)
        recent = [*state["recent_actions"], signature][-REPEAT_LIMIT - 1 :]
        state["recent_actions"] = recent
        # How many of the latest actions, counting back, are this same one.
        repeats = next((i for i, action in enumerate(reversed(recent)) if action != signature), len(recent))
        if repeats > REPEAT_LIMIT and state["warned"] == signature:
            stop = stop or (
                f"repeated action: {call['name']} was called with the same arguments {repeats} times in a row"
            )
        elif repeats >= REPEAT_LIMIT and state["warned"] != signature:
            state["warned"] = signature
            note = (
                f"You have called {call['name']} with the same arguments {repeats} times in a row. "
                "Do not call it again with these arguments: use the results you have, try something else, "
                "or give your answer."
            )
            state["conversation"].append({"role": "user", "content": note})
            events["messages"].append(
                MessageEvent(
                    trace_id=run.trace_id,
                    message_id=f"m{state['position']}",
                    position=state["position"],
                    role="user",
                    content=note,
                    name="agentops",
                )
            )
            state["position"] += 1
        # The tool call and the state that says it was made are saved together, with the
        # run's end when the call stops it (a tool call in flight when a worker dies is
        # made again: nothing of it was stored).
        with transaction.atomic():
            _ingest(run, **events)
            _save_state(run, state)
            if stop:
                _finish(run, status=Run.Status.FAILED, error=stop)
        if stop:
            return ENDED
    return ""


def _run_tool(
    run,
    step,
    index,
    call,
    tools,
    memory,
    conversation,
    position,
    refusal: str = "",
    replayed: bool = False,
    served=None,
    unmatched: bool = False,
) -> tuple[dict, int, str]:
    """Run one tool call, or serve it from the recording of a replay's source run
    (``replayed``: the call was looked up there; ``served``: the recorded call found;
    ``unmatched``: none was, and that fails the replay).
    Returns what to store of it (ingest's keyword arguments), the next message position,
    and a reason to stop the run or ""."""
    span_id = f"tool-{step}-{index}"
    started: datetime = timezone.now()
    tick = time.perf_counter()
    tool = tools.get(call["name"])
    error, result, stop, attributes = "", None, "", {}
    before = json.dumps(memory, sort_keys=True, default=str)
    if replayed:
        attributes = {"served": "recorded" if served else "live", "recorded_call_id": served.call_id if served else ""}
        if served is not None and served.arguments != call["arguments"]:
            # Made with the arguments a person approved (edited) in the source run.
            attributes["requested_arguments"] = call["arguments"]
            call = {**call, "arguments": served.arguments}
        elif unmatched:
            refusal = stop = (
                f"replay: the model called {call['name']} with arguments the original run never used "
                f"({json.dumps(call['arguments'], default=str)[:200]}), and unmatched calls fail the replay"
            )
    if refusal:
        error = refusal
    elif served is not None:
        result, error = served.result, served.error
    elif tool is None:
        error = f"unknown tool {call['name']!r}"
    else:
        try:
            result = tool.call(call["arguments"], ToolContext(memory=memory, run_id=run.pk, call_id=call["id"]))
        except ToolError as exc:
            error = str(exc)
    latency_ms = (time.perf_counter() - tick) * 1000
    # Keys sorted: a result served from a recording comes back from jsonb in its own key
    # order, and must read to the model exactly as the live result did.
    content = json.dumps({"error": error} if error else result, default=str, sort_keys=True)
    conversation.append({"role": "tool", "tool_call_id": call["id"], "name": call["name"], "content": content})
    snapshots = []
    if json.dumps(memory, sort_keys=True, default=str) != before:
        snapshots.append(
            MemoryEvent(
                trace_id=run.trace_id,
                snapshot_id=span_id,
                span_id=span_id,
                sequence=step * 1000 + index,
                state=dict(memory),
                taken_at=timezone.now(),
            )
        )
    events = dict(
        steps=[
            StepEvent(
                trace_id=run.trace_id,
                span_id=span_id,
                parent_span_id=ROOT_SPAN,
                kind="tool",
                name=call["name"],
                started_at=started,
                ended_at=timezone.now(),
                status="error" if error else "ok",
                error=error,
                input=call["arguments"],
                output=result,
                attributes=attributes,
            )
        ],
        tool_calls=[
            ToolCallEvent(
                trace_id=run.trace_id,
                call_id=call["id"],
                tool_name=call["name"],
                span_id=span_id,
                arguments=call["arguments"],
                result=result,
                error=error,
                latency_ms=latency_ms,
                started_at=started,
            )
        ],
        messages=[
            MessageEvent(
                trace_id=run.trace_id,
                message_id=f"m{position}",
                position=position,
                role="tool",
                content=content,
                tool_call_id=call["id"],
                name=call["name"],
                span_id=span_id,
            )
        ],
        snapshots=snapshots,
    )
    return events, position + 1, stop
