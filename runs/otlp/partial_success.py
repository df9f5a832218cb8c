"""What an OTLP export request's ``partial_success`` reports: how many items (spans,
log records) were rejected and why, and which were stored with values changed to be
storable (a warning, with nothing rejected).

A span or log record that cannot be stored (``InvalidItem``, or an error nobody
anticipated among ``UNREADABLE``) is rejected alone, never the request. ``MappedBatch``
holds the events of the items kept, for ``runs.ingest.ingest()``, and the count of the
others; the first ``MAX_PROBLEMS_REPORTED`` reasons of each are named.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from runs.events import MemoryEvent, MessageEvent, StepEvent, ToolCallEvent

MAX_PROBLEMS_REPORTED = 5


class InvalidItem(ValueError):
    """A span or log record that cannot be stored; the message says why."""


# Errors the mapping of one span could still raise on input nobody anticipated: that
# span is rejected (partial success) instead of the whole request failing with a 500.
UNREADABLE = (ValueError, TypeError, KeyError, IndexError, AttributeError, OverflowError, RecursionError)


@dataclass
class MappedBatch:
    """The events of one export request, and what was rejected."""

    steps: list[StepEvent] = field(default_factory=list)
    messages: list[MessageEvent] = field(default_factory=list)
    tool_calls: list[ToolCallEvent] = field(default_factory=list)
    snapshots: list[MemoryEvent] = field(default_factory=list)
    received: int = 0
    rejected: int = 0
    problems: list[str] = field(default_factory=list)
    changed: int = 0
    changes: list[str] = field(default_factory=list)

    def reject(self, reason: str) -> None:
        self.rejected += 1
        if len(self.problems) < MAX_PROBLEMS_REPORTED:
            self.problems.append(reason)

    def reject_item(self, item: str, exc: BaseException) -> None:
        """Reject ``item`` (its label: "span 0a1b…", "gen_ai.user.message log record")
        for ``exc``: an ``InvalidItem`` says why; any other error is named by its kind only."""
        if isinstance(exc, InvalidItem):
            self.reject(f"{item}: {exc}")
        else:
            self.reject(f"{item} could not be read ({type(exc).__name__})")

    def change(self, item: str, notes: set[str]) -> None:
        """``item`` was stored with ``notes`` (how its values were made storable)."""
        if not notes:
            return
        self.changed += 1
        if len(self.changes) < MAX_PROBLEMS_REPORTED:
            self.changes.append(f"{item}: {', '.join(sorted(notes))}")

    def error_message(self, what: str) -> str:
        """One line for ``partial_success.error_message``: what was rejected, then what
        was stored changed (empty when neither)."""
        parts = []
        if self.rejected:
            more = "; ..." if self.rejected > len(self.problems) else ""
            parts.append(f"{self.rejected} of {self.received} {what} rejected: " + "; ".join(self.problems) + more)
        if self.changed:
            more = "; ..." if self.changed > len(self.changes) else ""
            parts.append(
                f"{self.changed} of {self.received} {what} stored with changes: " + "; ".join(self.changes) + more
            )
        return ". ".join(parts)

    @property
    def empty(self) -> bool:
        return not (self.steps or self.messages or self.tool_calls or self.snapshots)
