"""The events of the trace store, and what makes a value storable in it.

Everything that writes trace data builds these dataclasses and hands them to
``runs.ingest.ingest()``: the OTLP mapping (``runs.otlp``), the JSON batch API
(``runs.api.batch``), the executor and the demo data. This module is the bottom of that
path: it imports no writer and no reader of them (nothing of ``runs.ingest``,
``runs.otlp``, ``runs.api`` or the executor), so each builds on it without a cycle.

An event names its run by the client's trace id and itself by a client-visible id (span
id, message id, call id, snapshot id): re-sending one updates it instead of adding one.

The cleaners below make any value storable as PostgreSQL ``jsonb`` and ``text``: no NaN
or Infinity (kept as the strings ``"NaN"``, ``"Infinity"``), no NUL characters, no
unpaired surrogates (``?``), at most ``MAX_DEPTH`` levels of nesting. Inside ``noting()``
they say what they changed (the OTLP receivers name such items in ``partial_success``);
outside, they clean silently (the write path's last line of defence).
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, field
from datetime import datetime
from decimal import Decimal
from typing import Any

from django.conf import settings

from agentops.jsonsafe import storable_lossless, storable_text
from runs.models import Step

# Run fields a client may state explicitly (JSON batch "run" events).
RUN_FIELDS = (
    "name",
    "agent_name",
    "agent_version",
    "status",
    "error",
    "input",
    "output",
    "started_at",
    "ended_at",
    "session_id",
    "parent_trace_id",
    "end_user_id",
    "environment",
    "release",
    "tags",
    "metadata",
)
# Run fields a step may fill in when the run does not have them yet (span attributes
# such as session.id or the root span's input): all but the run's state and times,
# which only the run itself states.
RUN_HINT_FIELDS = tuple(name for name in RUN_FIELDS if name not in ("status", "error", "started_at", "ended_at"))


@dataclass
class RunEvent:
    """What a client states about a run. Only the keys present in ``fields`` change
    (those of ``RUN_FIELDS``; others are ignored)."""

    trace_id: str
    fields: dict[str, Any] = field(default_factory=dict)


@dataclass
class StepEvent:
    trace_id: str
    span_id: str
    parent_span_id: str = ""
    kind: str = Step.Kind.CUSTOM
    name: str = ""
    started_at: datetime | None = None
    ended_at: datetime | None = None
    status: str = Step.Status.UNSET
    error: str = ""
    model: str = ""
    provider: str = ""
    input_tokens: int = 0
    cached_input_tokens: int = 0
    output_tokens: int = 0
    cache_write_input_tokens: int = 0
    reasoning_output_tokens: int = 0
    modality_tokens: dict = field(default_factory=dict)
    reported_cost: Decimal | None = None
    reported_cost_currency: str = ""
    reported_cost_source: str = ""
    input: Any = None
    output: Any = None
    attributes: dict = field(default_factory=dict)
    events: list = field(default_factory=list)
    # Filled into the run when it lacks them: session_id, end_user_id, agent_name, ...
    run_hints: dict[str, Any] = field(default_factory=dict)


@dataclass
class MessageEvent:
    trace_id: str
    message_id: str
    position: int
    role: str
    content: Any = None
    span_id: str = ""
    tool_calls: list = field(default_factory=list)
    tool_call_id: str = ""
    name: str = ""
    tokens: int | None = None
    finish_reason: str = ""


@dataclass
class ToolCallEvent:
    trace_id: str
    call_id: str
    tool_name: str
    span_id: str = ""
    arguments: Any = None
    result: Any = None
    error: str = ""
    latency_ms: float | None = None
    started_at: datetime | None = None


@dataclass
class MemoryEvent:
    trace_id: str
    snapshot_id: str
    sequence: int
    state: Any
    span_id: str = ""
    taken_at: datetime | None = None


# --- Storable values ---------------------------------------------------------------

# What the values of the item being cleaned needed to become storable (see ``noting``).
_notes: ContextVar[set[str] | None] = ContextVar("storable_notes", default=None)
TEXT_CUT = "text longer than its field cut"


class noting:  # noqa: N801 - used as a function: ``with noting() as notes``
    """Collect, while one item (a span, a log record) is cleaned, how its values were
    changed. (A class, not a ``contextmanager`` generator: it is entered once per span.)"""

    __slots__ = ("notes", "token")

    def __enter__(self) -> set[str]:
        self.notes: set[str] = set()
        self.token = _notes.set(self.notes)
        return self.notes

    def __exit__(self, *exc_info) -> None:
        _notes.reset(self.token)


def note(what: str) -> None:
    """Record, inside ``noting()``, that a value was changed to be storable."""
    notes = _notes.get()
    if notes is not None:
        notes.add(what)


def clean_text(text: str) -> str:
    """``text`` as PostgreSQL stores it (``agentops.jsonsafe.storable_text``), noted."""
    return storable_text(text, note=note)


def clean_float(number: float) -> float | str:
    return storable_lossless(number, note=note)


def json_safe(value: Any) -> Any:
    """``value`` (parsed JSON or converted attributes) made storable as ``jsonb``, the
    lossless way (``agentops.jsonsafe.storable_lossless``), noted."""
    return storable_lossless(value, note=note)


# --- Reported cost -----------------------------------------------------------------

# A step's cost column is numeric(18, 9): a reported cost must fit it.
MAX_REPORTED_COST = Decimal(10**9)
REPORTED_COST_SOURCE_LENGTH = 16


def clean_reported_cost(amount: Any, currency: Any = None, source: Any = None) -> tuple[Decimal | None, str, str]:
    """A cost a client reported (``gen_ai.usage.cost``, the batch API's ``reported_cost``)
    as stored: (amount, currency, source). None when no amount was sent. ValueError, with
    the reason, for an amount that is not a number from 0 (a boolean, a negative, NaN, a
    billion or more) or a currency the platform cannot compare with its own costs (those
    of the ``BILLING_REPORTED_COST_CURRENCIES`` setting; USD when none is sent)."""
    if amount is None or amount == "":
        return None, "", ""
    value = None
    if not isinstance(amount, bool) and isinstance(amount, int | float | str | Decimal):
        try:
            value = Decimal(str(amount).strip())
        except ArithmeticError:
            value = None
    if value is None or not value.is_finite() or not 0 <= value < MAX_REPORTED_COST:
        shown = amount if isinstance(amount, int | float) else repr(amount)[:60]
        raise ValueError(f"cost {shown} is not an amount (a number from 0, below {MAX_REPORTED_COST:,})")
    accepted = tuple(settings.BILLING_REPORTED_COST_CURRENCIES)
    code = "USD" if currency in (None, "") else currency
    if not isinstance(code, str) or code.strip().upper() not in accepted:
        raise ValueError(f"unknown currency {str(code)[:20]!r}: a reported cost must be in {', '.join(accepted)}")
    source_text = "" if source is None else clean_text(str(source)).strip().lower()
    return value.quantize(Decimal("0.000000001")), code.strip().upper(), source_text[:REPORTED_COST_SOURCE_LENGTH]
