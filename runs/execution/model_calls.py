"""One model call of an executed run: asked for streamed, its text sent to the run's page
as it is written (``runs.live.TextStream``), the worker beating its heartbeat and reading
a cancellation meanwhile; then what is stored of it: the ``llm`` step and the assistant's
message with the state after it, or, when the call failed or the run was cancelled while
the model wrote, the failed step with the run's end."""

from __future__ import annotations

import json
import time
from datetime import datetime
from typing import Any

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentops.llm.base import CallAbandoned, ProviderError
from runs.events import MessageEvent
from runs.execution.claims import save_state
from runs.execution.starting import Spec
from runs.execution.writes import ROOT_SPAN, finish_run, llm_step, write
from runs.live import TextStream
from runs.models import Run
from runs.services.events import ChunkBuffer

# While a model streams a long answer, the worker beats at most this often, and reads a
# cancellation at most this often.
BEAT_EVERY_SECONDS = 15
CANCEL_CHECK_SECONDS = 1


def ask_model(
    run: Run,
    state: dict,
    *,
    step: int,
    spec: Spec,
    provider,
    definitions: list[dict],
    parameters: dict,
    started: datetime,
):
    """Ask the model for step ``step`` of the conversation, streaming its text to the
    run's page. Returns its answer, or None when the run ended instead: the call failed
    (the run failed) or the run was cancelled while the model wrote (the run was
    cancelled), the failed ``llm`` step and the run's end stored together."""
    stream = TextStream(run=run, step=step, model=spec.model)
    chunks = ChunkBuffer(run, step)
    try:
        result = provider.chat(
            model=spec.model,
            messages=state["conversation"],
            tools=definitions,
            parameters=parameters,
            timeout_ms=settings.LLM_CALL_TIMEOUT_SECONDS * 1000,
            on_text=_beating(run, stream.write, chunks),
        )
    except (CallAbandoned, ProviderError) as exc:
        if isinstance(exc, CallAbandoned):  # cancelled while the model was writing its answer
            error, status, run_error = "cancelled while the model was answering", Run.Status.CANCELLED, "cancelled"
        else:
            error, status, run_error = str(exc), Run.Status.FAILED, f"step {step}: {exc}"
        _end_with_failed_call(
            run,
            state,
            step=step,
            spec=spec,
            provider=provider,
            started=started,
            stream=stream,
            chunks=chunks,
            error=error,
            status=status,
            run_error=run_error,
        )
        return None
    stream.close()
    chunks.flush()
    return result


def _end_with_failed_call(
    run: Run, state: dict, *, step, spec, provider, started, stream, chunks, error: str, status, run_error: str
) -> None:
    """Store the call that did not answer as a failed ``llm`` step and end the run, in one
    transaction (a worker killed in between must not leave a run that asks again)."""
    stream.close()
    chunks.flush()
    failed = _chat_step(run, step, spec, provider, started, input={"messages": state["conversation"]}, error=error)
    with transaction.atomic():
        finish_run(run, status=status, error=run_error, steps=[failed])


def _chat_step(run: Run, step: int, spec, provider, started, **fields):
    """The ``llm`` step of the run's ``step``-th model call (span ``llm-<step>``, under the
    run's root), answered or failed as ``fields`` say."""
    return llm_step(run, f"llm-{step}", f"chat {spec.model}", ROOT_SPAN, provider, spec, started, **fields)


def _beating(run: Run, write_piece, chunks: ChunkBuffer):
    """``write_piece`` (a piece of the streamed answer), also beating the run's heartbeat now
    and then (a model writing for minutes must not make its worker look dead) and reading
    a cancellation: a cancelled run stops reading the answer (CallAbandoned)."""
    last_beat = last_check = time.monotonic()

    def on_text(piece: str) -> None:
        nonlocal last_beat, last_check
        write_piece(piece)
        now = time.monotonic()
        chunks.write(piece, now)
        if now - last_beat >= BEAT_EVERY_SECONDS:
            last_beat = now
            Run.objects.filter(pk=run.pk).update(heartbeat_at=timezone.now())
        if now - last_check >= CANCEL_CHECK_SECONDS:
            last_check = now
            if Run.objects.filter(pk=run.pk, cancel_requested=True).exists():
                raise CallAbandoned(f"run {run.pk} was cancelled")

    return on_text


def store_answer(run, state, step, spec, provider, started, parameters, result, position) -> None:
    """Store a model call (its llm step and the assistant's message) and the state after it;
    a final answer (no tool calls) ends the run (succeeded) in the same write. Call inside
    a transaction."""
    # A copy of the conversation: it grows by the answer below, before this is written.
    asked = {"messages": list(state["conversation"]), "parameters": parameters}
    steps = [_chat_step(run, step, spec, provider, started, input=asked, result=result)]
    messages = [
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
    ]
    state["conversation"].append(_assistant_message(result.content, result.tool_calls))
    state["position"] = position + 1
    state["pending"] = [{**call, "index": index} for index, call in enumerate(result.tool_calls)]
    save_state(run, state)  # checks the claim first: a run another worker took gets nothing written
    if result.tool_calls:
        write(run, steps=steps, messages=messages)
    else:
        finish_run(run, status=Run.Status.SUCCEEDED, output=result.content, steps=steps, messages=messages)


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
