"""The tool calls a model asked for, made one by one with the state saved after each:
a call that needs a person's approval parks the run (``waiting``) until someone decides;
a replay serves calls from its source's recording; the same call repeated gets a
corrective message, then stops the run. What each call stores: its ``tool`` step, the
tool call, the tool's message and, when the scratch memory changed, a memory snapshot."""

from __future__ import annotations

import json
import time
from datetime import datetime

from django.db import transaction
from django.utils import timezone

from runs.events import MemoryEvent, MessageEvent, StepEvent, ToolCallEvent
from runs.execution.claims import save_state
from runs.execution.starting import Spec
from runs.execution.writes import ROOT_SPAN, finish_run, write
from runs.models import Approval, Run
from runs.services.approvals import approval_request
from runs.services.events import event_append
from runs.tools.base import ToolContext, ToolError

# The same tool with the same arguments this many times in a row gets a corrective
# message; once more after it and the run stops.
REPEAT_LIMIT = 3
WAITING = "waiting"
ENDED = "ended"
# Tools that only read and write the run's own scratch memory: a replay with recorded
# tools still runs them, so its memory evolves as the original's did.
LOCAL_STATE_TOOLS = {"memory_set", "memory_get"}


def run_pending_tools(run: Run, state: dict, tools: dict, spec: Spec, recorded=None) -> str:
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
            if approval is None:
                approval = approval_request(run=run, call=call)  # or approved by the session's approve-all
            if approval.status == Approval.Status.PENDING:
                return WAITING
            if approval.status == Approval.Status.APPROVED:
                call = {**call, "arguments": approval.approved_arguments}
            elif approval.status == Approval.Status.REJECTED:
                refusal = "a person rejected this call" + (f": {approval.reason}" if approval.reason else "")
            else:
                refusal = "nobody approved this call in time"
        if not refusal:
            event_append(
                run=run,
                type="tool_call",
                data={"run": run.pk, "call_id": call["id"], "tool": call["name"], "arguments": call["arguments"]},
            )
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
        warning = None
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
            warning = {"run": run.pk, "tool": call["name"], "repeats": repeats, "message": note}
        # The tool call and the state that says it was made are saved together, with the
        # run's end when the call stops it (a tool call in flight when a worker dies is
        # made again: nothing of it was stored).
        with transaction.atomic():
            write(run, **events)
            save_state(run, state)
            stored = events["tool_calls"][0]
            event_append(
                run=run,
                type="tool_output",
                data={
                    "run": run.pk,
                    "call_id": stored.call_id,
                    "tool": stored.tool_name,
                    "result": stored.result,
                    "error": stored.error,
                },
            )
            if warning is not None:
                event_append(run=run, type="repeated_action", data=warning)
            if stop:
                finish_run(run, status=Run.Status.FAILED, error=stop)
        if stop:
            return ENDED
    return ""


def _action_signature(call: dict) -> str:
    return call["name"] + ":" + json.dumps(call["arguments"], sort_keys=True, default=str)


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
