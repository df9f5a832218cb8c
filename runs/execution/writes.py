"""What an executed run stores, and how: every batch through the one write path
(``runs.ingest.ingest``) with the project's redactor, the run's root step, a
model call's ``llm`` step, and the run's end (which tells the apps above that it ended)."""

from __future__ import annotations

from datetime import datetime
from typing import Any

from django.utils import timezone

from runs.events import RunEvent, StepEvent
from runs.execution.starting import Spec
from runs.ingest import ingest
from runs.models import Run
from runs.services.events import event_append
from runs.signals import run_ended

ROOT_SPAN = "root"


def write(run: Run, **batch) -> None:
    """Store a batch of the run through the one write path, with the project's redactor
    read once per execution (the loop sets it)."""
    ingest(project=run.project, redactor=getattr(run, "redactor", None), **batch)


def finish_run(
    run: Run, *, status: str, output: Any = None, error: str = "", steps: list = (), messages: list = ()
) -> None:
    """End the run with ``status`` (its root step too), and say so to the apps above.
    ``steps`` and ``messages``: the last ones of the run (its final answer, the call that
    failed), stored in the same batch as its end: one write, not two."""
    fields: dict[str, Any] = {"status": status, "ended_at": timezone.now()}
    if output is not None:
        fields["output"] = output
    if error:
        fields["error"] = error
    write(
        run,
        runs=[RunEvent(trace_id=run.trace_id, fields=fields)],
        steps=[*steps, root_step(run, status=status, error=error, output=output, ended=True)],
        messages=list(messages),
    )
    event = {Run.Status.SUCCEEDED: "turn_complete", Run.Status.CANCELLED: "interrupted"}.get(status, "error")
    data = {"run": run.pk, "turn": run.turn, "status": status}
    data.update({"output": output} if status == Run.Status.SUCCEEDED else {"error": error})
    event_append(run=run, type=event, data=data)
    run_ended.send(sender=Run, run=run, status=status)


def root_step(run: Run, *, status: str = "", error: str = "", output: Any = None, ended: bool = False) -> StepEvent:
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


def llm_step(
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
            "cache_write_input_tokens": result.cache_write_input_tokens,
            "reasoning_output_tokens": result.reasoning_output_tokens,
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
