"""``POST /api/v1/ingest``: the JSON batch API for SDKs and scripts.

A batch is ``{"events": [...]}``; each event has a ``type`` (run, step, message,
tool_call, memory) and a client-chosen ``id``. Every event is checked on its own, so
one bad event never rejects its neighbours; the answer is 207 with one result per
event, in request order. All the valid events go to ``runs.ingest.ingest``
in one call, hence one transaction: when the answer is 207, they are in PostgreSQL.

Per event:
- 201 ``created``: no row had this id yet; 200 ``updated``: the id existed (re-sending
  updates, never duplicates).
- 200 ``superseded``: a later event of the same batch has the same type and id (and
  run); the last valid one is stored.
- 400 ``invalid``: not an object, unknown type, a missing or mistyped field, a bad
  timestamp, NaN or Infinity, a string with a NUL character or invalid Unicode, or
  nesting deeper than MAX_NESTING_DEPTH. The message names the field.
- 413 ``too_large``: the event is over MAX_EVENT_BYTES of JSON.

For the whole request: 400 when the body is not JSON, not UTF-8, not an object or has
no ``events`` list; 413 over MAX_BATCH_BYTES or MAX_BATCH_EVENTS; 503 with
``Retry-After`` when the database cannot be reached (nothing was stored).
"""

from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from typing import Any

from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, extend_schema
from rest_framework import exceptions, serializers, status
from rest_framework.request import Request
from rest_framework.response import Response

from agentops.access import Access
from agentops.api.base import OrganizationEndpoint
from agentops.api.errors import error_body
from agentops.api.idempotency import idempotent
from agentops.api.parsers import JSONParser, PayloadTooLarge
from agentops.api.serializers import refuse_unknown_fields
from agentops.errors import Forbidden, InvalidRequest
from agentops.jsonsafe import MAX_DEPTH, child_path, printable, value_problem
from agentops.outages import UNAVAILABLE_ERRORS, log_refusal
from runs.api import serializers as s
from runs.events import MemoryEvent, MessageEvent, RunEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest, runs_of_traces
from runs.models import MemorySnapshot, Message, Step, ToolCall

logger = logging.getLogger(__name__)

MAX_EVENT_BYTES = 256 * 1024  # one event, as compact UTF-8 JSON
MAX_BATCH_BYTES = 10 * 1024 * 1024  # the whole request body
MAX_BATCH_EVENTS = 5000
MAX_NESTING_DEPTH = MAX_DEPTH  # the event object itself is level 1
RETRY_AFTER_SECONDS = 5
MAX_ECHO_LENGTH = 200  # of an id echoed in a result, and of a value quoted in a message

EVENT_TYPES = tuple(s.EVENT_SERIALIZERS)


class BatchJSONParser(JSONParser):
    """JSON, read with the batch's size limit and leniently enough that a NaN, a bad
    string or a deep value in one event is that event's 400, not the whole batch's."""

    def max_bytes(self) -> int:
        return MAX_BATCH_BYTES

    def too_large(self, limit: int) -> PayloadTooLarge:
        return PayloadTooLarge(f"the body is over {limit} bytes: split the batch")

    def load(self, text: str):
        try:
            # NaN and Infinity are parsed here (Python's default) and refused per event below.
            return json.loads(text)
        except RecursionError:
            raise exceptions.ParseError(
                f"the body is nested deeper than {MAX_NESTING_DEPTH} levels, the most an event may hold"
            ) from None
        except ValueError as exc:
            raise exceptions.ParseError(f"the body is not valid JSON: {exc}") from None


class BatchRequest(Request):
    """DRF reads no body without a Content-Length. A chunked upload has none, and ASGI
    servers hand it over whole, so read the stream anyway (BatchJSONParser bounds it,
    and says "the body is empty" when it is)."""

    def _load_stream(self):
        super()._load_stream()
        if self._stream is None and not self._request._read_started:
            self._stream = self._request


# --- Per-event checks -------------------------------------------------------------


def unstorable_value(event: dict) -> str | None:
    """The first thing in ``event`` that PostgreSQL cannot store or that breaks our
    limits, as "field.path: problem", or None (agentops.jsonsafe's walk: no recursion)."""
    return value_problem(event, max_depth=MAX_NESTING_DEPTH, root="event") or None


def _json_type(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "a boolean"
    if isinstance(value, int | float):
        return "a number"
    return {str: "a string", list: "an array", dict: "an object"}.get(type(value), type(value).__name__)


def _error_message(detail: Any, path: str = "") -> str:
    """One line from DRF's nested error detail, naming the field: "tags[2]: Not a valid string."."""
    if isinstance(detail, dict):
        key, inner = next(iter(detail.items()))
        return _error_message(inner, child_path(path, key) if key != "non_field_errors" else path)
    if isinstance(detail, list):
        return _error_message(detail[0], path) if detail else f"{path}: invalid"
    message = printable(str(detail), 500)
    return f"{path}: {message}" if path else message


@dataclass
class AcceptedEvent:
    index: int
    type: str
    key: tuple  # (type, run client id, id): the row it writes
    event: RunEvent | StepEvent | MessageEvent | ToolCallEvent | MemoryEvent


def _result(index: int, raw: Any, status_code: int, code: str, message: str | None = None) -> dict:
    raw_id = raw.get("id") if isinstance(raw, dict) else None
    raw_type = raw.get("type") if isinstance(raw, dict) else None
    return {
        "index": index,
        "id": printable(raw_id) if isinstance(raw_id, str) else None,
        "type": printable(raw_type) if isinstance(raw_type, str) else None,
        "status": status_code,
        "code": code,
        "error": {"code": code, "message": message} if message is not None else None,
    }


def check_event(index: int, raw: Any, validators: dict[str, serializers.Serializer]) -> AcceptedEvent | dict:
    """The event ready for ingest(), or its 400/413 result. ``validators`` holds one
    serializer per type, reused for every event of a batch (binding a serializer's
    fields deep-copies them, which would cost more than the validation itself)."""
    if not isinstance(raw, dict):
        return _result(index, raw, 400, "invalid", f"event: must be a JSON object, not {_json_type(raw)}")
    event_type = raw.get("type")
    if event_type not in EVENT_TYPES:
        if "type" not in raw:
            got = "none"
        elif isinstance(event_type, str):
            got = f"'{printable(event_type, 50)}'"
        else:
            got = _json_type(event_type)
        return _result(index, raw, 400, "invalid", f"type: must be one of {', '.join(EVENT_TYPES)}; got {got}")
    problem = unstorable_value(raw)
    if problem:
        return _result(index, raw, 400, "invalid", problem)
    size = len(json.dumps(raw, ensure_ascii=False, separators=(",", ":")).encode("utf-8"))
    if size > MAX_EVENT_BYTES:
        return _result(
            index, raw, 413, "too_large", f"event: {size} bytes of JSON, over the limit of {MAX_EVENT_BYTES}"
        )
    validator = validators[event_type]
    try:
        data = validator.run_validation(raw)
    except serializers.ValidationError as exc:
        return _result(index, raw, 400, "invalid", _error_message(exc.detail))
    key = (event_type, data.get("run_id", ""), data["id"])
    return AcceptedEvent(index=index, type=event_type, key=key, event=validator.to_event(data))


def _existing_keys(project, accepted: list[AcceptedEvent]) -> set[tuple]:
    """Which of the events' rows exist already (to tell created from updated)."""
    # Every run the events name, found as ingest() finds them (by trace id, whatever the
    # table's statistics), then the items among those runs' rows.
    run_of_trace = runs_of_traces(project, {a.key[2] if a.type == "run" else a.key[1] for a in accepted})
    existing = {("run", "", trace_id) for trace_id in run_of_trace}
    trace_of_run = {run_id: trace_id for trace_id, run_id in run_of_trace.items()}
    for event_type, model, id_field in (
        ("step", Step, "span_id"),
        ("message", Message, "message_id"),
        ("tool_call", ToolCall, "call_id"),
        ("memory", MemorySnapshot, "snapshot_id"),
    ):
        keys = {a.key for a in accepted if a.type == event_type}
        run_ids = {run_of_trace[key[1]] for key in keys if key[1] in run_of_trace}
        if not run_ids:
            continue
        # A superset (every id in every run named), narrowed to the exact pairs below.
        rows = model.objects.filter(
            project=project, run_id__in=run_ids, **{f"{id_field}__in": {key[2] for key in keys}}
        ).values_list("run_id", id_field)
        existing |= {(event_type, trace_of_run[run_id], item_id) for run_id, item_id in rows} & keys
    return existing


def ingest_batch(*, project, events: list, api_key=None) -> list[dict]:
    """Check every event, store the valid ones in one ingest() call, and say what
    happened to each, in request order."""
    results: dict[int, dict] = {}
    accepted: list[AcceptedEvent] = []
    validators = {event_type: serializer() for event_type, serializer in s.EVENT_SERIALIZERS.items()}
    for index, raw in enumerate(events):
        outcome = check_event(index, raw, validators)
        if isinstance(outcome, AcceptedEvent):
            accepted.append(outcome)
        else:
            results[index] = outcome

    last_index = {item.key: item.index for item in accepted}
    stored = [item for item in accepted if last_index[item.key] == item.index]
    for item in accepted:
        if last_index[item.key] != item.index:
            results[item.index] = _result(item.index, events[item.index], 200, "superseded")

    if stored:
        existing = _existing_keys(project, stored)
        by_type: dict[str, list] = {event_type: [] for event_type in EVENT_TYPES}
        for item in stored:
            by_type[item.type].append(item.event)
        ingest(
            project=project,
            runs=by_type["run"],
            steps=by_type["step"],
            messages=by_type["message"],
            tool_calls=by_type["tool_call"],
            snapshots=by_type["memory"],
            api_key=api_key,
        )
        for item in stored:
            updated = item.key in existing
            results[item.index] = _result(
                item.index, events[item.index], 200 if updated else 201, "updated" if updated else "created"
            )
    return [results[index] for index in range(len(events))]


# --- The endpoint -----------------------------------------------------------------


class IngestView(OrganizationEndpoint):
    """Send a batch of runs, steps, messages, tool calls and memory snapshots.

    Authentication: a project API key with the `ingest` scope (`Authorization: Bearer
    <key>`); the data goes to that key's project, and any `project` or `organization`
    inside the body is ignored. Signed-in users are refused (403): SDKs and scripts
    always have a key.

    Each event is `{"type": ..., "id": ..., ...fields}`; events may arrive in any order
    (a step before its run). The answer is 207 with one result per event, in request
    order: 201 `created`, 200 `updated` (the id existed; re-sending never duplicates),
    200 `superseded` (a later event of this batch has the same type, id and run: the last
    one is stored), 400 `invalid` (the message names the field) or 413 `too_large` (over
    256 KiB of JSON). The valid events are stored together, in one transaction, before
    the answer is sent.

    Request limits: 10 MiB and 5000 events (413), JSON in UTF-8 (400). Strings may not
    contain NUL characters, numbers may not be NaN or Infinity, and an event may not
    nest deeper than 64 levels. When the database is unavailable: 503 with `Retry-After`,
    and nothing is stored. Send an `Idempotency-Key` header to make a retry return the
    first answer.
    """

    permissions = {"POST": "run:ingest"}
    allow_api_keys = True
    parser_classes = [BatchJSONParser]
    serializer_class = s.IngestBatchSerializer

    def initialize_request(self, request, *args, **kwargs):
        # As APIView.initialize_request, with the Request class that reads chunked bodies.
        return BatchRequest(
            request,
            parsers=self.get_parsers(),
            authenticators=self.get_authenticators(),
            negotiator=self.get_content_negotiator(),
            parser_context=self.get_parser_context(request),
        )

    def resolve_access(self, request, api_key, **kwargs) -> Access:
        if api_key is None:
            raise Forbidden("this endpoint takes a project API key with the ingest scope, not a signed-in session")
        project = api_key.project
        project.organization = api_key.organization
        return Access(organization=api_key.organization, api_key=api_key, project=project)

    @property
    def project(self):
        return self.access.project

    def describe(self, method: str) -> str:
        return "send runs (it needs the ingest scope)"

    def handle_exception(self, exc):
        if isinstance(exc, UNAVAILABLE_ERRORS):
            # Never a 2xx for data that is not durable: the client keeps the batch and retries.
            log_refusal(logger, "ingest refused", exc)
            response = Response(
                error_body(
                    "unavailable",
                    "the database or Redis is unavailable; nothing was stored, retry later",
                    {"retry_after": RETRY_AFTER_SECONDS},
                ),
                status=status.HTTP_503_SERVICE_UNAVAILABLE,
                headers={"Retry-After": str(RETRY_AFTER_SECONDS)},
            )
            response._has_been_logged = True  # one line per refusal: Django's would repeat it
            return response
        return super().handle_exception(exc)

    @extend_schema(
        auth=[{"ApiKey": []}],
        request=s.IngestBatchSerializer,
        responses={
            207: s.IngestResponseSerializer,
            400: OpenApiResponse(description="The body is not a JSON object with an `events` list."),
            413: OpenApiResponse(description=f"Over {MAX_BATCH_BYTES} bytes or {MAX_BATCH_EVENTS} events."),
            503: OpenApiResponse(description="The database is unavailable; retry after `Retry-After` seconds."),
        },
        parameters=[
            OpenApiParameter(
                "Idempotency-Key",
                str,
                OpenApiParameter.HEADER,
                required=False,
                description="A retry with the same key and body gets the first answer.",
            )
        ],
    )
    @idempotent
    def post(self, request):
        body = request.data
        if not isinstance(body, dict):
            raise InvalidRequest('the body must be a JSON object: {"events": [...]}')
        refuse_unknown_fields(body, ["events"])
        events = body.get("events")
        if not isinstance(events, list):
            raise InvalidRequest("events: required, a list of events")
        if not events:
            raise InvalidRequest("events: the list is empty")
        if len(events) > MAX_BATCH_EVENTS:
            raise PayloadTooLarge(
                f"events: {len(events)} events, over the limit of {MAX_BATCH_EVENTS}: split the batch"
            )
        results = ingest_batch(project=self.project, events=events, api_key=self.access.api_key)
        return Response({"results": results}, status=status.HTTP_207_MULTI_STATUS)
