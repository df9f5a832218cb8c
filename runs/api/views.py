"""Read API of the trace store, under ``/api/v1/projects/{org}/{project}/``: runs with
filters, sorting and cursor pagination, one run with its steps, messages, tool calls
and memory, sessions, and an export of runs as JSON Lines.

Every read needs ``work:read`` (any member of the organization, or an API key of this
project with the ``read`` scope); starting an agent's run (``POST runs/``) needs
``work:write`` (a member, or a key with the ``execute`` scope). The views parse the query, call one selector of
``runs.selectors`` (which returns rows of ``self.project`` only, inside the
organization scope the base class entered) and render.
"""

from __future__ import annotations

import base64
import binascii
import json
from dataclasses import dataclass
from datetime import datetime
from decimal import Decimal, InvalidOperation
from typing import Any

from django.core.exceptions import ValidationError
from django.db.models import F, Q
from django.utils.dateparse import parse_datetime
from drf_spectacular.utils import OpenApiParameter, OpenApiResponse, PolymorphicProxySerializer, extend_schema
from rest_framework.exceptions import NotFound as CursorNotFound
from rest_framework.renderers import BaseRenderer, BrowsableAPIRenderer
from rest_framework.response import Response
from rest_framework.utils.encoders import JSONEncoder
from rest_framework.utils.urls import replace_query_param

from agentops.api.base import ProjectEndpoint
from agentops.api.idempotency import idempotent
from agentops.api.pagination import CreatedCursorPagination
from agentops.api.renderers import JSONRenderer
from agentops.downloads import streaming_download
from agentops.errors import InvalidRequest, NotFound
from runs import selectors
from runs.api import agents
from runs.api import serializers as s
from runs.models import Run

EXPORT_CHUNK_SIZE = 500
# A nested tree deeper than this would overflow the JSON renderer's recursion; the flat
# list (with depth and parent_id) has no such limit.
MAX_TREE_DEPTH = 200


# --- Pagination ---------------------------------------------------------------------


@dataclass
class _Position:
    value: Any
    tie: Any
    reverse: bool


class KeysetCursorPagination(CreatedCursorPagination):
    """Cursor pagination on (sort field, tie-breaker) in the order the view asks for
    (``view.keyset = (field, descending, tie_breaker)``). A view with ``read_page(queryset,
    limit)`` reads the page's rows itself (they need the keyset's fields as attributes).

    DRF's CursorPagination keeps only the first ordering field in its cursor and skips
    equal values by an offset capped at 1000, so it would repeat rows when many runs
    share a cost; here the cursor holds both values, and a page is one index range
    scan whatever its depth. NULLs sort as PostgreSQL sorts them by default (after
    every value ascending, before every value descending), so the indexes on
    ``-started_at`` serve the default order. An unreadable cursor is a 404, as in DRF.
    """

    def paginate_queryset(self, queryset, request, view=None):
        self.request = request
        self.base_url = request.build_absolute_uri()
        self.page_size = self.get_page_size(request)
        self.field, self.descending, self.tie_breaker = view.keyset
        position = self._decode(request.query_params.get(self.cursor_query_param))
        backwards = position is not None and position.reverse
        # Walking back to the previous page is walking forward in the opposite order.
        down = self.descending != backwards
        if position is not None:
            try:
                queryset = queryset.filter(self._beyond(position, down))
            except (ValueError, TypeError, ValidationError):
                # A well-formed cursor whose values do not fit the columns (forged or
                # edited): as unreadable as any other, not a server error.
                raise CursorNotFound(self.invalid_cursor_message) from None
        order = (F(self.field).desc(), F(self.tie_breaker).desc()) if down else (F(self.field), F(self.tie_breaker))
        read = getattr(view, "read_page", None)
        if read is None:
            rows = list(queryset.order_by(*order)[: self.page_size + 1])
        else:
            rows = read(queryset.order_by(*order), self.page_size + 1)
        more = len(rows) > self.page_size
        rows = rows[: self.page_size]
        if backwards:
            rows.reverse()
            self._next_row = rows[-1] if rows else None
            self._previous_row = rows[0] if rows and more else None
        else:
            self._next_row = rows[-1] if rows and more else None
            self._previous_row = rows[0] if rows and position is not None else None
        return rows

    def _beyond(self, position: _Position, down: bool) -> Q:
        field, tie, value = self.field, self.tie_breaker, position.value
        if down:  # descending: NULLs first, then values downwards
            if value is None:
                return Q(**{f"{field}__isnull": False}) | Q(**{f"{field}__isnull": True, f"{tie}__lt": position.tie})
            return Q(**{f"{field}__lt": value}) | Q(**{field: value, f"{tie}__lt": position.tie})
        if value is None:  # ascending: values upwards, then NULLs
            return Q(**{f"{field}__isnull": True, f"{tie}__gt": position.tie})
        return (
            Q(**{f"{field}__gt": value})
            | Q(**{field: value, f"{tie}__gt": position.tie})
            | Q(**{f"{field}__isnull": True})
        )

    # Cursor: base64 of {"f": field and direction, "v": [kind, value], "t": tie, "r": reverse}.

    def _order_name(self) -> str:
        return ("-" if self.descending else "") + self.field

    def _encode(self, row, reverse: bool) -> str:
        def read(name):
            return row[name] if isinstance(row, dict) else getattr(row, name)

        value = read(self.field)
        if isinstance(value, datetime):
            encoded = ["dt", value.isoformat()]
        elif isinstance(value, Decimal):
            encoded = ["dec", str(value)]
        else:
            encoded = ["raw", value]
        payload = {"f": self._order_name(), "v": encoded, "t": read(self.tie_breaker), "r": reverse}
        return base64.urlsafe_b64encode(json.dumps(payload, separators=(",", ":")).encode()).decode()

    def _decode(self, cursor: str | None) -> _Position | None:
        if not cursor:
            return None
        try:
            payload = json.loads(base64.urlsafe_b64decode(cursor.encode()))
            if payload["f"] != self._order_name():
                raise ValueError("the cursor belongs to another order")
            kind, value = payload["v"]
            if kind == "dt":
                value = parse_datetime(value)
                if value is None:
                    raise ValueError("bad timestamp")
            elif kind == "dec":
                value = Decimal(value)
            elif kind != "raw" or not isinstance(value, int | str | None):
                raise ValueError("bad value")
            tie = payload["t"]
            if not isinstance(tie, int | str) or isinstance(tie, bool):
                raise ValueError("bad tie-breaker")
            return _Position(value=value, tie=tie, reverse=bool(payload["r"]))
        except (ValueError, TypeError, KeyError, InvalidOperation, binascii.Error, UnicodeError):
            raise CursorNotFound(self.invalid_cursor_message) from None

    def get_next_link(self):
        if self._next_row is None:
            return None
        return replace_query_param(self.base_url, self.cursor_query_param, self._encode(self._next_row, False))

    def get_previous_link(self):
        if self._previous_row is None:
            return None
        return replace_query_param(self.base_url, self.cursor_query_param, self._encode(self._previous_row, True))


class RunCursorPagination(KeysetCursorPagination):
    """The runs list: ordered by the ``sort`` parameter, then by id."""


def keyset_for_sort(sort: str) -> tuple[str, bool, str]:
    field, tie_breaker = selectors.SORTABLE[sort]
    return field.lstrip("-"), field.startswith("-"), tie_breaker.lstrip("-")


# --- Query parameters ---------------------------------------------------------------


def parse_run_filters(request) -> tuple[selectors.RunFilters, str]:
    """The runs list's filters and sort from the query string; a 400 names a bad one."""
    serializer = s.RunFilterSerializer(data=request.query_params)
    serializer.is_valid(raise_exception=True)
    data = dict(serializer.validated_data)
    sort = data.pop("sort")
    return selectors.RunFilters(**data), sort


def flag(request, name: str) -> bool:
    """A yes/no query parameter: 1/true/yes or 0/false/no (absent is no)."""
    value = request.query_params.get(name, "").strip().lower()
    if value in ("1", "true", "yes"):
        return True
    if value in ("", "0", "false", "no"):
        return False
    raise InvalidRequest(f"{name}: use 1 or 0")


RUN_FILTER_PARAMETERS = [s.RunFilterSerializer]


# --- Endpoints ----------------------------------------------------------------------


class RunsEndpoint(ProjectEndpoint):
    permissions = {"GET": "work:read"}
    # DRF's JSON written by orjson, and payloads read as text written as they are.
    renderer_classes = [JSONRenderer, BrowsableAPIRenderer]
    # Rows come from runs.selectors, which take the project; `queryset` only tells the
    # schema generator the model.
    queryset = Run.objects.none()

    def get_run(self, *only: str) -> Run:
        """The run of the URL, in this project (another project's or organization's: 404),
        with ``only`` these columns if given."""
        return selectors.run_detail(project=self.project, run_id=self.kwargs["run_id"], only=only)


class RunListView(RunsEndpoint):
    """Runs of the project, filtered, sorted (`sort`, default newest first) and
    cursor-paginated. `total_cost` is a decimal string. POST starts a run of an agent
    (202; members, or API keys with the `execute` scope)."""

    permissions = {"GET": "work:read", "POST": "work:write"}
    serializer_class = s.RunSerializer
    pagination_class = RunCursorPagination

    @extend_schema(request=agents.RunStartSerializer, responses={202: s.RunDetailSerializer})
    @idempotent
    def post(self, request, org_slug, project_slug):
        return agents.start_run(self, request)

    @extend_schema(parameters=RUN_FILTER_PARAMETERS)
    def get(self, request, org_slug, project_slug):
        filters, sort = parse_run_filters(request)
        self.keyset = keyset_for_sort(sort)
        page = self.paginate_queryset(selectors.run_list(project=self.project, filters=filters))
        return self.get_paginated_response(s.RunSerializer.represent(page))

    def read_page(self, queryset, limit: int):
        return s.RunSerializer.read(queryset, limit)


class NdjsonRenderer(BaseRenderer):
    """JSON Lines. An error body (a dict) is one line of JSON."""

    media_type = "application/x-ndjson"
    format = "jsonl"
    charset = None

    def render(self, data, accepted_media_type=None, renderer_context=None):
        return (json.dumps(data, cls=JSONEncoder) + "\n").encode()


class RunExportView(RunsEndpoint):
    """Every run matching the filters (the runs list's parameters, including `sort`), as
    JSON Lines: one run per line with the fields of the list, streamed."""

    serializer_class = s.RunSerializer
    pagination_class = None
    renderer_classes = [JSONRenderer, NdjsonRenderer]

    @extend_schema(
        parameters=RUN_FILTER_PARAMETERS,
        responses={(200, "application/x-ndjson"): OpenApiResponse(s.RunSerializer, description="One run per line.")},
    )
    def get(self, request, org_slug, project_slug):
        filters, sort = parse_run_filters(request)
        queryset = selectors.run_list(project=self.project, filters=filters).order_by(*selectors.SORTABLE[sort])
        # The list's rows and representation (payloads written as stored), a chunk at a
        # time, each line written as the list's answers are.
        render = JSONRenderer().render
        lines = (render(run).decode() + "\n" for run in s.RunSerializer.stream(queryset, EXPORT_CHUNK_SIZE))
        return streaming_download(
            request,
            lines,
            organization=self.organization,
            content_type="application/x-ndjson",
            filename=f"runs-{org_slug}-{project_slug}.jsonl",
        )


class RunDetailView(RunsEndpoint):
    """One run with its totals, input, output and metadata."""

    serializer_class = s.RunDetailSerializer

    def get(self, request, org_slug, project_slug, run_id):
        # Read as a row (payloads as their JSON text), not a model instance.
        rows = s.RunDetailSerializer.read(selectors.run_by_id(project=self.project, run_id=run_id))
        if not rows:
            raise NotFound("run not found")
        return Response(s.RunDetailSerializer(rows[0]).data)


class RunStepListView(RunsEndpoint):
    """The run's steps as a flat list in tree order (depth first, siblings by start
    time) with `depth` and `parent_id`; `?tree=1` nests them under `children`. A step
    whose parent never arrived is a root. (`?format=` is taken by DRF's renderer
    override, hence `tree`.)"""

    serializer_class = s.StepListItemSerializer
    pagination_class = None

    @extend_schema(
        parameters=[OpenApiParameter("tree", bool, description="1: nest steps under their parent's `children`.")],
        responses=PolymorphicProxySerializer(
            component_name="StepList",
            serializers=[s.StepListItemSerializer, s.StepTreeNodeSerializer],
            resource_type_field_name=None,
            many=True,
        ),
    )
    def get(self, request, org_slug, project_slug, run_id):
        nested = flag(request, "tree")
        run = self.get_run("id")
        # Only the columns of the answer, payloads as their stored JSON text (not parsed).
        roots = selectors.step_tree(run=run, steps=s.StepListItemSerializer.read(selectors.step_list(run=run)))
        nodes = selectors.flatten_tree(roots)
        for node in nodes:
            node.step.depth = node.depth
        items = s.StepListItemSerializer.represent([node.step for node in nodes])
        if not nested:
            return Response(items)
        deepest = max((node.depth for node in nodes), default=0)
        if deepest >= MAX_TREE_DEPTH:
            raise InvalidRequest(
                f"tree: this run's steps nest {deepest + 1} levels deep, too deep to nest in JSON; "
                "use the flat list (it has depth and parent_id)"
            )
        item_of = {id(node): {**item, "children": []} for node, item in zip(nodes, items, strict=True)}
        for node in nodes:
            item_of[id(node)]["children"] = [item_of[id(child)] for child in node.children]
        return Response([item_of[id(root)] for root in roots])


class RunMessageListView(RunsEndpoint):
    """The run's transcript in order, where an LLM call's input messages that repeat the
    history already shown are left out; `?all=1` returns every stored message."""

    serializer_class = s.MessageSerializer
    pagination_class = None

    @extend_schema(parameters=[OpenApiParameter("all", bool, description="1: every stored message.")])
    def get(self, request, org_slug, project_slug, run_id):
        run = self.get_run()
        messages = selectors.message_list(run=run) if flag(request, "all") else selectors.transcript(run=run)
        return Response(s.MessageSerializer(messages, many=True).data)


class RunToolCallListView(RunsEndpoint):
    """The run's tool calls in start order."""

    serializer_class = s.ToolCallSerializer
    pagination_class = None

    def get(self, request, org_slug, project_slug, run_id):
        return Response(s.ToolCallSerializer(selectors.tool_call_list(run=self.get_run()), many=True).data)


class RunMemoryListView(RunsEndpoint):
    """The run's memory snapshots in sequence order."""

    serializer_class = s.MemorySnapshotSerializer
    pagination_class = None

    def get(self, request, org_slug, project_slug, run_id):
        return Response(s.MemorySnapshotSerializer(selectors.memory_list(run=self.get_run()), many=True).data)


class SessionListView(RunsEndpoint):
    """Sessions (conversations) of the project with run counts and totals, most recently
    active first; cursor-paginated."""

    serializer_class = s.SessionSerializer
    pagination_class = KeysetCursorPagination
    keyset = ("last_started_at", True, "session_id")

    @extend_schema(parameters=[s.SessionListFilterSerializer])
    def get(self, request, org_slug, project_slug):
        params = s.SessionListFilterSerializer(data=request.query_params)
        params.is_valid(raise_exception=True)
        sessions = selectors.session_list(
            project=self.project, started_after=params.validated_data.get("started_after")
        )
        page = self.paginate_queryset(sessions)
        return self.get_paginated_response(s.SessionSerializer(page, many=True).data)


class SessionDetailView(RunsEndpoint):
    """One session: its totals and its runs, oldest first."""

    serializer_class = s.SessionDetailSerializer

    def get(self, request, org_slug, project_slug, session_id):
        summary = selectors.session_list(project=self.project).filter(session_id=session_id).first()
        if summary is None:
            raise NotFound("session not found")
        runs = selectors.session_runs(project=self.project, session_id=session_id).defer("input", "output", "metadata")
        return Response(s.SessionDetailSerializer({**summary, "runs": runs}).data)
