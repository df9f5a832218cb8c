"""Tool calls served from a recording: a replay with ``tool_mode: recorded`` answers each
tool call the model makes with the result the source run got for the same tool and the
same arguments, in the order the source made them, so only the model changes. A call the
source made after a person's approval is served as it was made (the approved arguments,
edited or not), without asking for approval again."""

from __future__ import annotations

import json
from collections import defaultdict, deque
from typing import Any

from runs.models import Approval, Run, ToolCall


def call_key(name: str, arguments: Any) -> str:
    """A tool call's identity for matching: its name and its arguments as canonical JSON."""
    return name + ":" + json.dumps(arguments, sort_keys=True, separators=(",", ":"), default=str)


class RecordedTools:
    """The source run's tool calls, queued by (name, arguments). ``take`` hands out the
    first one not used yet; ``used`` (their call ids) goes into the executor's state so a
    resumed replay does not serve a recorded call twice. A call a person approved with
    edited arguments matches both the arguments the model asked for and the approved ones
    it was made with (``proposed``: the model's arguments by call id)."""

    def __init__(self, calls: list[ToolCall], *, unmatched: str, used: list[str], proposed: dict | None = None):
        self.unmatched = unmatched
        self.used = list(used)
        self.taken = set(used)
        proposed = proposed or {}
        self.queues: dict[str, deque[ToolCall]] = defaultdict(deque)
        for call in calls:
            if call.call_id in self.taken:
                continue
            keys = [call_key(call.tool_name, call.arguments)]
            if call.call_id in proposed:
                keys.append(call_key(call.tool_name, proposed[call.call_id]))
            for key in dict.fromkeys(keys):
                self.queues[key].append(call)

    def take(self, name: str, arguments: Any) -> ToolCall | None:
        queue = self.queues.get(call_key(name, arguments))
        while queue:
            call = queue.popleft()
            if call.call_id not in self.taken:  # not already served under its other key
                self.taken.add(call.call_id)
                self.used.append(call.call_id)
                return call
        return None


def recorded_calls(source_id: int) -> list[ToolCall]:
    """The source run's tool calls in the order it made them."""
    return list(
        ToolCall.objects.filter(run_id=source_id)
        .order_by("started_at", "id")
        .only("call_id", "tool_name", "arguments", "result", "error")
    )


def recorded_tools(run: Run, replay: dict, *, used: list[str]) -> RecordedTools | None:
    """The recording a replay serves its tool calls from, or None when it calls them live."""
    if replay.get("tool_mode") != "recorded" or not replay.get("source"):
        return None
    proposed = dict(Approval.objects.filter(run_id=replay["source"]).values_list("call_id", "arguments"))
    return RecordedTools(
        recorded_calls(replay["source"]), unmatched=replay.get("unmatched", "fail"), used=used, proposed=proposed
    )
