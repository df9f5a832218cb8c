"""Trajectories: runs and sessions as JSON Lines in one documented, versioned format,
``agentops.trajectory/1`` (docs/sessions.md#trajectories). The API, the pages, the
terminal client (through the API) and the Hugging Face export all write these lines.

The line unit is **one run**. A run gives one line; a session gives one line per turn,
in turn order (undone turns included, flagged ``undone``); an ingested conversation
(runs sharing a ``session_id``) one line per run in start order, numbered as turns.
Each line stands alone: the messages the run's model calls saw and wrote (a session's
turn starts from the conversation carried from the turns before it), its tool calls
with arguments, results, status and timings, its model calls, token counts with their
parts, cost (computed and reported), timings, model and agent version.

Lines are produced one at a time: the runs of a session are read ``RUNS_PER_BATCH`` at
a time by id (their rows, without the executor's state), and a line's messages, tool
calls and model calls are read for that run only, so a long session never sits in
memory: at most a batch of run rows and one run's transcript are held at once. Call the
generators with the organization in scope (``agentops.downloads`` does, per chunk).
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Iterator
from datetime import timedelta
from typing import Any

from django.db.models import QuerySet

from agentops.csvexport import to_json
from agentops.downloads import streaming_download
from runs import selectors
from runs.models import Approval, Message, Run, Session, Step

FORMAT = "agentops.trajectory/1"
CONTENT_TYPE = "application/x-ndjson"
CURRENCY = "USD"
RUNS_PER_BATCH = 50
# Each line is one whole run: a download sends each as soon as it is written.
LINES_PER_CHUNK = 1
MAX_SESSION_ID = 200

# Step columns a model call's entry reads (its payloads can be megabytes: never loaded).
_MODEL_CALL_FIELDS = (
    "span_id",
    "name",
    "model",
    "provider",
    "status",
    "error",
    "started_at",
    "ended_at",
    "duration_ms",
    *Step.USAGE_FIELDS,
)


def download(request, lines: Iterable[str], *, organization, filename: str):
    """``lines`` as a streamed download (``agentops.downloads``), one line per chunk:
    what the pages' and the API's trajectory downloads answer."""
    return streaming_download(
        request,
        lines,
        organization=organization,
        content_type=CONTENT_TYPE,
        filename=filename,
        lines_per_chunk=LINES_PER_CHUNK,
    )


def has_conversation(*, project, session_id: str) -> bool:
    """Whether ``session_id`` names an ingested conversation of ``project`` (runs were
    sent with it); an id no conversation can have (too long, a NUL) names none."""
    if len(session_id) > MAX_SESSION_ID or "\x00" in session_id:
        return False
    return selectors.session_runs(project=project, session_id=session_id).exists()


# -- what the lines cover ------------------------------------------------------------------------


def run_records(*, run: Run) -> Iterator[dict[str, Any]]:
    """One record: the run (with its session and turn when it is a session's turn)."""
    session = None
    if run.agent_session_id is not None:
        session = Session.objects.filter(pk=run.agent_session_id).first()
    yield trajectory_record(run, session=_agent_session_ref(session) if session else None, turn=run.turn)


def session_records(*, session: Session) -> Iterator[dict[str, Any]]:
    """One record per turn of an interactive session, in turn order (undone ones too)."""
    reference = _agent_session_ref(session)
    run_ids = Run.objects.filter(agent_session=session).order_by("turn", "id").values_list("pk", flat=True)
    for run in _runs_in_batches(list(run_ids)):
        yield trajectory_record(run, session=reference, turn=run.turn)


def conversation_records(*, project, session_id: str) -> Iterator[dict[str, Any]]:
    """One record per run of an ingested conversation (runs sent with this ``session_id``),
    in start order, numbered as turns 1, 2, ..."""
    reference = {"kind": "conversation", "id": session_id, "title": ""}
    run_ids = selectors.session_runs(project=project, session_id=session_id).values_list("pk", flat=True)
    for number, run in enumerate(_runs_in_batches(list(run_ids)), start=1):
        yield trajectory_record(run, session=reference, turn=number)


def lines(records: Iterable[dict[str, Any]]) -> Iterator[str]:
    """Records as JSON Lines (decimals as strings, times in ISO 8601)."""
    for record in records:
        yield to_json(record) + "\n"


def run_trajectory(*, run: Run) -> Iterator[str]:
    """The lines of one run."""
    return lines(run_records(run=run))


def session_trajectory(*, session: Session) -> Iterator[str]:
    """The lines of an interactive session, one per turn."""
    return lines(session_records(session=session))


def conversation_trajectory(*, project, session_id: str) -> Iterator[str]:
    """The lines of an ingested conversation, one per run."""
    return lines(conversation_records(project=project, session_id=session_id))


def _runs_in_batches(run_ids: list[int]) -> Iterator[Run]:
    """The runs of ``run_ids`` in that order, read a batch at a time (ids are all a long
    session keeps in memory; no database cursor outlives a batch)."""
    for start in range(0, len(run_ids), RUNS_PER_BATCH):
        batch = run_ids[start : start + RUNS_PER_BATCH]
        runs = {run.pk: run for run in _run_rows(Run.objects.filter(pk__in=batch))}
        for run_id in batch:
            if run_id in runs:  # deleted meanwhile: left out
                yield runs[run_id]


def _run_rows(queryset: QuerySet[Run]) -> QuerySet[Run]:
    return queryset.select_related("executed_version").defer("search", "execution", "metadata")


def _agent_session_ref(session: Session) -> dict[str, Any]:
    return {"kind": "agent_session", "id": session.pk, "title": session.title}


# -- one line ------------------------------------------------------------------------------------


def trajectory_record(run: Run, *, session: dict | None = None, turn: int | None = None) -> dict[str, Any]:
    """The format's object for one run (docs/sessions.md#trajectories)."""
    version = run.executed_version
    model_calls = [_model_call(step) for step in _llm_steps(run)]
    return {
        "format": FORMAT,
        "session": session,
        "turn": turn,
        "undone": run.undone,
        "run": {
            "id": run.pk,
            "trace_id": run.trace_id,
            "name": run.name,
            "status": run.status,
            "error": run.error,
            "executed": run.executed,
            "replay_of": run.replay_of_id,
        },
        "agent": {"name": run.agent_name, "version": run.agent_version or (str(version.number) if version else "")},
        "model": _main_model(run, version, model_calls),
        "models": list(run.models_used),
        "input": run.input,
        "output": run.output,
        "messages": [openai_message(message) for message in selectors.transcript(run=run)],
        "tool_calls": _tool_calls(run),
        "model_calls": model_calls,
        "usage": _usage(run, llm_calls=run.llm_call_count),
        "cost": {
            "currency": CURRENCY,
            "computed": run.total_cost,
            "reported": run.reported_cost,
            "reported_steps_computed": run.reported_steps_computed_cost,
            "unpriced_steps": run.unpriced_step_count,
        },
        "timing": {"started_at": run.started_at, "ended_at": run.ended_at, "latency_ms": run.latency_ms},
    }


def _main_model(run: Run, version, model_calls: list[dict]) -> str:
    """The model the run ran on: the agent version's for an executed run, else the model
    of its first model call, else the first it used."""
    if version is not None:
        return version.model
    for call in model_calls:
        if call["model"]:
            return call["model"]
    return run.models_used[0] if run.models_used else ""


def _usage(row, *, llm_calls: int | None = None) -> dict[str, int]:
    usage = {
        "input_tokens": row.input_tokens,
        "cached_input_tokens": row.cached_input_tokens,
        "cache_write_input_tokens": row.cache_write_input_tokens,
        "output_tokens": row.output_tokens,
        "reasoning_output_tokens": row.reasoning_output_tokens,
        "total_tokens": row.input_tokens + row.output_tokens,
    }
    if llm_calls is not None:
        usage["model_calls"] = llm_calls
    return usage


# -- messages ------------------------------------------------------------------------------------


def openai_message(message: Message) -> dict[str, Any]:
    """A stored message in the OpenAI chat form: ``role``, ``content`` (text, null, or
    the list of content parts as sent; any other JSON value as its JSON text), and
    ``tool_calls`` / ``tool_call_id`` / ``name`` when it has them."""
    content = message.content
    if content is not None and not isinstance(content, str | list):
        content = json.dumps(content, ensure_ascii=False, default=str)
    out: dict[str, Any] = {"role": message.role, "content": content}
    if message.tool_calls:
        out["tool_calls"] = [_openai_tool_call(call) for call in _as_list(message.tool_calls)]
    if message.tool_call_id:
        out["tool_call_id"] = message.tool_call_id
    if message.name:
        out["name"] = message.name
    return out


def _as_list(value) -> list:
    return value if isinstance(value, list) else [value]


def _openai_tool_call(call) -> Any:
    """A tool call as OpenAI writes it: ``{"id", "type": "function", "function": {"name",
    "arguments": JSON text}}``, from that form, or the platform's and OpenTelemetry's
    ``{"id", "name", "arguments"}``. Anything else is passed on as sent."""
    if not isinstance(call, dict):
        return call
    function = call.get("function")
    if isinstance(function, dict):
        name, arguments = function.get("name", ""), function.get("arguments")
    elif "name" in call:
        name, arguments = call.get("name", ""), call.get("arguments")
    else:
        return call
    if not isinstance(arguments, str):
        arguments = json.dumps(arguments if arguments is not None else {}, ensure_ascii=False, default=str)
    function = {"name": str(name), "arguments": arguments}
    return {"id": str(call.get("id") or ""), "type": "function", "function": function}


# -- tool calls and model calls ------------------------------------------------------------------


def _tool_calls(run: Run) -> list[dict[str, Any]]:
    approvals = {approval.call_id: approval for approval in Approval.objects.filter(run=run)}
    out = []
    for call in selectors.tool_call_list(run=run):
        ended_at = None
        if call.started_at is not None and call.latency_ms is not None:
            ended_at = call.started_at + timedelta(milliseconds=call.latency_ms)
        entry = {
            "id": call.call_id,
            "name": call.tool_name,
            "arguments": call.arguments,
            "result": call.result,
            "error": call.error,
            "status": "error" if call.error else "ok",
            "started_at": call.started_at,
            "ended_at": ended_at,
            "latency_ms": call.latency_ms,
            "approval": None,
        }
        approval = approvals.get(call.call_id)
        if approval is not None:
            entry["approval"] = {
                "status": approval.status,
                "reason": approval.reason,
                "requested_arguments": approval.arguments,
                "edited": approval.approved_arguments is not None and approval.approved_arguments != approval.arguments,
            }
        out.append(entry)
    return out


def _llm_steps(run: Run) -> Iterable[Step]:
    return Step.objects.filter(run=run, kind=Step.Kind.LLM).order_by("started_at", "id").only(*_MODEL_CALL_FIELDS)


def _model_call(step: Step) -> dict[str, Any]:
    return {
        "span_id": step.span_id,
        "model": step.model,
        "provider": step.provider,
        "status": step.status,
        "error": step.error,
        "started_at": step.started_at,
        "ended_at": step.ended_at,
        "latency_ms": step.duration_ms,
        "usage": _usage(step),
        "cost": step.cost,
        "reported_cost": step.reported_cost,
        "reported_cost_currency": step.reported_cost_currency,
        "unpriced": step.unpriced,
    }


def trajectory_filename(kind: str, identifier: Any) -> str:
    """The download's file name: ``trajectory-run-42.jsonl``, ``trajectory-session-7.jsonl``."""
    safe = "".join(ch if ch.isalnum() or ch in "-_." else "_" for ch in str(identifier))[:80] or "_"
    return f"trajectory-{kind}-{safe}.jsonl"
