"""The step loop a worker runs (``run_execute``, the Celery entry point's service):
claim the run, begin it once, then ask the model, run the tools it asked for, and
repeat until the model answers without tools, the step limit is reached, the run is
cancelled or parked for an approval, or a call fails. A run whose worker died resumes
from its saved state, so a stored step is never made (or paid for) again."""

from __future__ import annotations

import json
import logging

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentops.errors import InvalidRequest
from agentops.llm.providers import provider_for
from runs.events import MessageEvent, RunEvent
from runs.execution.cancellation import end_cancelled, end_if_cancelled_while_parking
from runs.execution.claims import LostClaim, claim_run, save_state
from runs.execution.compaction import compact_if_needed
from runs.execution.model_calls import ask_model, store_answer
from runs.execution.starting import Spec, version_spec
from runs.execution.tool_calls import ENDED, WAITING, run_pending_tools
from runs.execution.writes import finish_run, root_step, write
from runs.models import Run
from runs.services.events import event_append
from runs.services.recorded_tools import recorded_tools
from runs.services.redaction import redactor_for
from runs.tools.registry import tools_for

logger = logging.getLogger(__name__)


def run_execute(*, run_id: int) -> None:
    """Execute a queued run to its end, or resume one whose worker died (Celery entry
    point: runs.tasks.execute_run)."""
    # The claimed run with its project and organization; the agent version is read only
    # for a run started before runs kept their spec in their state (``_execute``).
    run = claim_run(run_id)
    if run is None:
        return
    if run.cancel_requested:  # cancelled while it waited, or while no worker was on it
        end_cancelled(run)
        return
    lost = run.execution.get("workers_lost", 0)
    if lost >= settings.RUN_MAX_ATTEMPTS:
        finish_run(
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
    tools = tools_for(project=project, names=spec.tools, toolset=spec.toolset)
    definitions = [tool.definition() for tool in tools.values()]
    definitions += [d for d in spec.tool_definitions if d["function"]["name"] not in tools]
    replay = state.get("replay") or {}
    recorded = recorded_tools(run, replay, used=state.get("recorded_used", [])) if replay.get("tool_mode") else None
    try:
        provider = provider_for(organization=project.organization, model=spec.model)
    except InvalidRequest as exc:
        finish_run(run, status=Run.Status.FAILED, error=exc.message)
        return

    with transaction.atomic():  # the run's start and the state that says it started
        _start(run, state, spec)
        save_state(run, state)  # beats, checks the claim, and reads a cancellation

    while True:
        if run.cancel_requested:  # as the last state save read it
            finish_run(run, status=Run.Status.CANCELLED, error="cancelled")
            return
        if state["pending"]:
            # The model asked for tools: run them (this is also where a resumed run picks up).
            outcome = run_pending_tools(run, state, tools, spec, recorded)
            if outcome == WAITING:
                end_if_cancelled_while_parking(run)
                return  # A person decides; the decision queues the run again.
            if outcome == ENDED:
                return
            continue
        if state["step"] >= spec.step_limit:
            finish_run(run, status=Run.Status.FAILED, error=f"the step limit of {spec.step_limit} was reached")
            return
        state["step"] += 1
        step = state["step"]
        compact_if_needed(run, state, provider, spec, parameters, force=state.pop("compact_now", False))
        started = timezone.now()
        result = ask_model(
            run,
            state,
            step=step,
            spec=spec,
            provider=provider,
            definitions=definitions,
            parameters=parameters,
            started=started,
        )
        if result is None:  # the call failed, or the run was cancelled meanwhile: it ended
            return
        position = state["position"]
        # The model call and the state that says it was made are saved together (and a
        # final answer with the run's end): a worker that dies after this commit resumes
        # past the call, one that dies before it makes the call again with nothing of the
        # first stored. A stored final answer is never asked for again.
        with transaction.atomic():
            store_answer(run, state, step, spec, provider, started, parameters, result, position)
        if not result.tool_calls:
            return


def _start(run: Run, state: dict, spec: Spec) -> None:
    """Store the run's start (its root step and first messages) once, and the state it
    begins from."""
    batch: dict[str, list] = {}  # stored in one write
    starting = not state.get("started")
    if starting:
        batch["runs"] = [RunEvent(trace_id=run.trace_id, fields={"status": Run.Status.RUNNING})]
        batch["steps"] = [root_step(run)]
        state["started"] = True
    if "conversation" not in state:  # a forked replay starts with the conversation of its source
        conversation = state.pop("start_conversation", None)  # a replay of an ingested run brings its own
        if conversation is None:
            user_input = run.input if isinstance(run.input, str) else json.dumps(run.input)
            conversation = [{"role": "system", "content": spec.system_prompt}] if spec.system_prompt else []
            conversation.append({"role": "user", "content": user_input})
        batch.update(
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
            ]
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
    if batch:
        write(run, **batch)
    if starting:
        event_append(run=run, type="processing", data={"run": run.pk, "turn": run.turn})
