"""The conversation of an interactive session as the chat page draws it, folded from the
session's stored events up to one id (docs/sessions.md, The chat page).

The page renders everything stored up to event N and then follows the stream from N,
so what it shows first and what arrives live meet with no gap and no repeat: the text
of an answer is the ``assistant_chunk`` events up to N, and the live script appends the
chunks after N. A turn re-rendered for a live event (``turn_at``) is folded up to that
event's id for the same reason.

Nothing here knows the agent: a turn is a run, its items are the events' model calls,
tool calls, approvals, compactions and warnings, so any session renders, whoever its
agent is.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from runs import selectors
from runs.models import Run, Session, StreamEvent
from runs.views import display

# Events that end a turn, and the status the page shows for each.
ENDINGS = {"turn_complete": "succeeded", "error": "failed", "interrupted": "interrupted"}
STATE_LABELS = {
    "queued": "Waiting for a worker",
    "running": "Running",
    "waiting": "Waiting for approval",
    "succeeded": "Answered",
    "failed": "Failed",
    "interrupted": "Interrupted",
}


@dataclass
class ToolItem:
    call_id: str
    tool: str
    arguments: Any = None
    approval: dict[str, Any] | None = None  # id, status, reason, by, expires_at, arguments_text
    output: dict[str, Any] | None = None  # result, error
    kind: str = "tool"

    @property
    def pending(self) -> bool:
        return self.approval is not None and self.approval["status"] == "pending"

    @property
    def arguments_text(self) -> str:
        return json.dumps(self.arguments, indent=2, ensure_ascii=False)

    @property
    def result_text(self) -> str:
        if self.output is None:
            return ""
        result = self.output.get("result")
        return result if isinstance(result, str) else json.dumps(result, ensure_ascii=False)


@dataclass
class Turn:
    run: Run
    number: int
    input: str
    items: list[Any] = field(default_factory=list)
    state: str = "queued"
    error: str = ""
    undone: bool = False
    last_event: int = 0

    @property
    def state_label(self) -> str:
        return STATE_LABELS[self.state]

    @property
    def status_class(self) -> str:
        """The run status whose colours the badge takes."""
        return "cancelled" if self.state == "interrupted" else self.state

    @property
    def ended(self) -> bool:
        return self.state == "interrupted" or self.state in Run.ENDED


def _text(value: Any) -> str:
    return value if isinstance(value, str) else display.preview_text(value)


def fold_turn(run: Run, events: list[StreamEvent]) -> Turn:
    """One turn: the user's message (the run's input) and what its events say happened."""
    turn = Turn(run=run, number=run.turn or 0, input=_text(run.input))
    answers: dict[int, dict[str, Any]] = {}
    tools: dict[str, ToolItem] = {}
    for event in events:
        data = event.data
        turn.last_event = event.seq
        kind = event.type
        if kind == "processing" and turn.state == "queued":
            turn.state = "running"
        elif kind == "assistant_chunk":
            step = data.get("step")
            answer = answers.get(step)
            if answer is None or turn.items[-1] is not answer:  # a new model call's text
                answer = answers[step] = {"kind": "answer", "step": step, "text": ""}
                turn.items.append(answer)
            answer["text"] += data.get("text", "")
        elif kind in ("tool_call", "approval_required", "approval_decided", "tool_output"):
            call_id = data.get("call_id", "")
            item = tools.get(call_id)
            if item is None:
                item = tools[call_id] = ToolItem(call_id=call_id, tool=data.get("tool", ""))
                turn.items.append(item)
            if kind == "approval_required":
                item.arguments = data.get("arguments")
                item.approval = {"id": data.get("approval"), "status": "pending", "expires_at": data.get("expires_at")}
                turn.state = "waiting"
            elif kind == "approval_decided":
                item.approval = {
                    **(item.approval or {"id": data.get("approval")}),
                    "status": data.get("decision"),
                    "reason": data.get("reason", ""),
                    "by": data.get("by"),
                    "edited": data.get("decision") == "approved"
                    and item.arguments is not None
                    and data.get("arguments") not in (None, item.arguments),
                }
                if data.get("arguments") is not None:
                    item.arguments = data["arguments"]
                if turn.state == "waiting" and not any(t.pending for t in tools.values()):
                    turn.state = "running"
            elif kind == "tool_call":
                item.arguments = data.get("arguments")
            else:
                item.output = {"result": data.get("result"), "error": data.get("error", "")}
        elif kind == "compacted":
            turn.items.append({"kind": "compacted", **data})
        elif kind == "repeated_action":
            turn.items.append({"kind": "warning", "message": data.get("message", "")})
        elif kind in ENDINGS:
            turn.state = ENDINGS[kind]
            turn.error = data.get("error") or ""
            output = data.get("output")
            # A model call that did not stream left no chunks: its answer is the turn's output.
            last = turn.items[-1] if turn.items else None
            streamed = isinstance(last, dict) and last["kind"] == "answer"
            if kind == "turn_complete" and output not in (None, "") and not streamed:
                turn.items.append({"kind": "answer", "step": None, "text": _text(output)})
            for item in tools.values():  # an approval left pending by an interrupted turn is closed
                if item.pending:
                    item.approval = {**item.approval, "status": "closed"}
        elif kind == "undone":
            turn.undone = True
    return turn


def conversation(session: Session, upto: int) -> list[Turn]:
    """Every turn of the session with the events stored up to id ``upto`` (two queries)."""
    runs = list(selectors.agent_session_turns(session=session))
    by_run: dict[int, list[StreamEvent]] = {run.pk: [] for run in runs}
    for event in selectors.agent_session_events(session=session, upto=upto):
        run_id = event.run_id if event.run_id is not None else (event.data or {}).get("run")
        if event.type != "undone" and event.run_id is None:
            continue  # the session's own events (ready, queued, approve_all, closed)
        if run_id in by_run:
            by_run[run_id].append(event)
    return [fold_turn(run, by_run[run.pk]) for run in runs]


def turn_at(session: Session, run: Run, upto: int) -> Turn:
    """One turn with its events stored up to id ``upto`` (a live re-render)."""
    return fold_turn(run, list(selectors.agent_session_events(session=session, upto=upto, run_id=run.pk)))
