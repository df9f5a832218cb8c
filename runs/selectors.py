"""Reads of the trace store, shared by the REST API and the pages. Every function takes
the project and returns rows of that project only (the organization scope is applied
by the tenant manager underneath)."""

from __future__ import annotations

import json
from collections import Counter
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from decimal import Decimal
from typing import Any

from django.contrib.postgres.search import SearchQuery
from django.db import connection
from django.db.models import Aggregate, Avg, Count, FloatField, Max, Min, Q, QuerySet, Sum
from django.utils import timezone

from agentops.errors import NotFound
from agentops.scoping import check_scope
from runs.models import (
    Agent,
    LlmHourly,
    MemorySnapshot,
    Message,
    Run,
    Session,
    SessionMessage,
    Step,
    StreamEvent,
    ToolCall,
)

SORTABLE = {
    "started_at": ("started_at", "id"),
    "-started_at": ("-started_at", "-id"),
    "cost": ("total_cost", "id"),
    "-cost": ("-total_cost", "-id"),
    "latency": ("latency_ms", "id"),
    "-latency": ("-latency_ms", "-id"),
    "tokens": ("output_tokens", "id"),
    "-tokens": ("-output_tokens", "-id"),
}


@dataclass
class RunFilters:
    """Filters of the runs list (API query parameters and the page's form alike)."""

    status: list[str] | None = None
    agent: str | None = None
    model: str | None = None
    tag: str | None = None
    session: str | None = None
    environment: str | None = None
    trace_id: str | None = None
    end_user: str | None = None
    started_after: datetime | None = None
    started_before: datetime | None = None
    min_cost: Decimal | None = None
    max_cost: Decimal | None = None
    min_latency_ms: int | None = None
    max_latency_ms: int | None = None
    q: str | None = None


def run_list(*, project, filters: RunFilters | None = None) -> QuerySet[Run]:
    """The project's runs, filtered, newest first (callers may re-order)."""
    filters = filters or RunFilters()
    queryset = Run.objects.filter(project=project)
    if filters.status:
        queryset = queryset.filter(status__in=filters.status)
    if filters.agent:
        queryset = queryset.filter(agent_name=filters.agent)
    if filters.model:
        queryset = queryset.filter(models_used__contains=[filters.model])
    if filters.tag:
        queryset = queryset.filter(tags__contains=[filters.tag])
    if filters.session:
        queryset = queryset.filter(session_id=filters.session)
    if filters.environment:
        queryset = queryset.filter(environment=filters.environment)
    if filters.trace_id:
        queryset = queryset.filter(trace_id=filters.trace_id)
    if filters.end_user:
        queryset = queryset.filter(end_user_id=filters.end_user)
    if filters.started_after:
        queryset = queryset.filter(started_at__gte=filters.started_after)
    if filters.started_before:
        queryset = queryset.filter(started_at__lt=filters.started_before)
    if filters.min_cost is not None:
        queryset = queryset.filter(total_cost__gte=filters.min_cost)
    if filters.max_cost is not None:
        queryset = queryset.filter(total_cost__lte=filters.max_cost)
    if filters.min_latency_ms is not None:
        queryset = queryset.filter(latency_ms__gte=filters.min_latency_ms)
    if filters.max_latency_ms is not None:
        queryset = queryset.filter(latency_ms__lte=filters.max_latency_ms)
    if filters.q:
        queryset = queryset.filter(search=SearchQuery(filters.q, config="simple", search_type="websearch"))
    return queryset.order_by("-started_at", "-id").defer("search", "input", "output", "metadata")


def run_by_id(*, project, run_id: int) -> QuerySet[Run]:
    """The run of the project with this id, as a queryset (empty for another project's
    or tenant's run)."""
    return Run.objects.filter(project=project, pk=run_id)


def run_detail(*, project, run_id: int, only: tuple[str, ...] = ()) -> Run:
    """One run of the project (with ``only`` these columns), or NotFound (another
    tenant's run is not found either): the API and the pages answer it 404."""
    queryset = run_by_id(project=project, run_id=run_id)
    run = (queryset.only(*only) if only else queryset).first()
    if run is None:
        raise NotFound("run not found")
    return run


def step_list(*, run: Run) -> QuerySet[Step]:
    """A run's steps in start order (the waterfall and the API)."""
    return Step.objects.filter(run=run).order_by("started_at", "id")


@dataclass
class StepNode:
    step: Step
    depth: int
    children: list[StepNode]


def step_tree(*, run: Run, steps: list[Step] | None = None) -> list[StepNode]:
    """The run's steps as a forest by parent span id, children in start order. A step
    whose parent never arrived is shown as a root rather than lost."""
    steps = list(steps if steps is not None else step_list(run=run))
    by_span = {step.span_id: StepNode(step, 0, []) for step in steps}
    roots: list[StepNode] = []
    for step in steps:
        node = by_span[step.span_id]
        parent = by_span.get(step.parent_span_id) if step.parent_span_id else None
        if parent is None or parent is node:
            roots.append(node)
        else:
            parent.children.append(node)

    def set_depth(nodes: list[StepNode], depth: int) -> None:
        stack = [(node, depth) for node in reversed(nodes)]
        while stack:
            node, level = stack.pop()
            node.depth = level
            stack.extend((child, level + 1) for child in reversed(node.children))

    # Steps whose parent ids form a cycle hang from no root: break each cycle at its
    # earliest step, which becomes a root, so no step is lost.
    reached = {id(node) for node in flatten_tree(roots)}
    for step in steps:
        node = by_span[step.span_id]
        if id(node) not in reached:
            by_span[step.parent_span_id].children.remove(node)
            roots.append(node)
            reached.update(id(descendant) for descendant in flatten_tree([node]))

    set_depth(roots, 0)
    return roots


def flatten_tree(roots: list[StepNode]) -> list[StepNode]:
    """The tree in display order (depth first)."""
    out: list[StepNode] = []
    stack = list(reversed(roots))
    while stack:
        node = stack.pop()
        out.append(node)
        stack.extend(reversed(node.children))
    return out


def message_list(*, run: Run) -> QuerySet[Message]:
    """Every stored message of the run, in position order (``step_id`` and ``span_id``
    tie a message to its step; the step's payloads are not joined, they can be megabytes)."""
    return Message.objects.filter(run=run).order_by("position", "id")


def transcript(*, run: Run) -> list[Message]:
    """The conversation as a person reads it: messages in order, where an LLM call's
    input messages that repeat the history already shown are left out."""
    shown: Counter[tuple] = Counter()
    # Per LLM call, how often each message has come up among its inputs so far: its
    # n-th "yes" repeats history only if n "yes" were shown already (a user may say
    # the same thing twice).
    in_call: Counter[tuple] = Counter()
    out: list[Message] = []
    for message in message_list(run=run):
        key = (message.role, _content_key(message.content), message.tool_call_id)
        call, marker, _index = message.message_id.rpartition(":in:")
        if marker:
            in_call[(call, key)] += 1
            if in_call[(call, key)] <= shown[key]:
                continue
        shown[key] += 1
        out.append(message)
    return out


def _content_key(content) -> str:
    """A message's content as one text, equal for equal JSON: a tool's answer taken from
    its span is an object, while a later model call's input may hold it as JSON text."""
    if isinstance(content, str):
        stripped = content.strip()
        if stripped[:1] not in ("{", "["):
            return content
        try:
            content = json.loads(stripped)
        except ValueError:
            return content
    try:
        return json.dumps(content, sort_keys=True, separators=(",", ":"), default=str)
    except (ValueError, RecursionError):
        return repr(content)


def tool_call_list(*, run: Run) -> QuerySet[ToolCall]:
    return ToolCall.objects.filter(run=run).order_by("started_at", "id")


def memory_list(*, run: Run) -> QuerySet[MemorySnapshot]:
    # The step's name labels each snapshot; its payloads are left behind.
    return (
        MemorySnapshot.objects.filter(run=run)
        .select_related("step")
        .defer("step__input", "step__output", "step__attributes", "step__events")
        .order_by("sequence", "id")
    )


def session_list(*, project, started_after: datetime | None = None) -> QuerySet:
    """Sessions (conversations) of the project with their run counts and totals, newest first."""
    queryset = Run.objects.filter(project=project).exclude(session_id="")
    if started_after:
        queryset = queryset.filter(started_at__gte=started_after)
    return (
        queryset.values("session_id")
        .annotate(
            run_count=Count("id"),
            first_started_at=Min("started_at"),
            last_started_at=Max("started_at"),
            total_cost=Sum("total_cost"),
            input_tokens=Sum("input_tokens"),
            output_tokens=Sum("output_tokens"),
            failed=Count("id", filter=Q(status=Run.Status.FAILED)),
        )
        .order_by("-last_started_at")
    )


def session_runs(*, project, session_id: str) -> QuerySet[Run]:
    """The runs of one conversation, in order."""
    return Run.objects.filter(project=project, session_id=session_id).order_by("started_at", "id").defer("search")


def agent_session_list(*, project) -> QuerySet[Session]:
    """The project's interactive sessions, most recently active first (any event moves
    a session up)."""
    return (
        Session.objects.filter(project=project)
        .select_related("agent", "agent_version", "started_by")
        .order_by("-updated_at", "-id")
    )


def agent_session_turns(*, session: Session) -> QuerySet[Run]:
    """The turns of an interactive session (its executed runs), in order."""
    return Run.objects.filter(agent_session=session).order_by("turn").defer("search", "execution")


def agent_session_queue(*, session: Session) -> QuerySet[SessionMessage]:
    """The messages waiting for the session's running turn, oldest first."""
    return SessionMessage.objects.filter(session=session, status=SessionMessage.Status.QUEUED).order_by("id")


def agent_session_events(*, session: Session, upto: int, run_id: int | None = None) -> QuerySet[StreamEvent]:
    """The events of the session's stream up to id ``upto``, in order; with ``run_id``,
    only those about that turn (its own, and its ``undone``)."""
    events = StreamEvent.objects.filter(session=session, seq__lte=upto)
    if run_id is not None:
        events = events.filter(Q(run_id=run_id) | Q(type="undone", data__run=run_id))
    return events.order_by("seq")


class PercentileCont(Aggregate):
    """``percentile_cont(fraction) WITHIN GROUP (ORDER BY expression)``: a percentile
    computed in PostgreSQL (NULLs left out), beside the other aggregates of one scan."""

    function = "percentile_cont"
    template = "%(function)s(%(fraction)s) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = FloatField()

    def __init__(self, expression, fraction: float, **extra):
        super().__init__(expression, fraction=float(fraction), **extra)


def dashboard(*, project, start: datetime, end: datetime) -> dict[str, Any]:
    """The project's aggregates between ``start`` and ``end``, and series over time
    (hourly up to two days, daily beyond).

    The runs' figures are read from one index (``run_project_started_totals``, an
    index-only scan, hence counts of ``started_at``, never NULL in a range: the id is
    not in it): the totals with their exact latency percentiles in one scan, the series
    bucket by bucket (``_series``); LLM cost by model from the hourly rollup
    (``llm_cost_by_model``)."""
    runs = Run.objects.filter(project=project, started_at__gte=start, started_at__lt=end)
    totals = runs.aggregate(
        runs=Count("started_at"),
        succeeded=Count("started_at", filter=Q(status=Run.Status.SUCCEEDED)),
        failed=Count("started_at", filter=Q(status=Run.Status.FAILED)),
        input_tokens=Sum("input_tokens"),
        output_tokens=Sum("output_tokens"),
        cost=Sum("total_cost"),
        unpriced_steps=Sum("unpriced_step_count"),
        avg_latency_ms=Avg("latency_ms"),
        p50_latency_ms=PercentileCont("latency_ms", 0.5),
        p95_latency_ms=PercentileCont("latency_ms", 0.95),
    )
    finished = (totals["succeeded"] or 0) + (totals["failed"] or 0)
    totals["success_rate"] = (totals["succeeded"] / finished) if finished else None
    hourly = (end - start).total_seconds() <= 2 * 86400
    return {
        "totals": totals,
        "series": _series(project=project, start=start, end=end, step=timedelta(hours=1 if hourly else 24)),
        "cost_by_model": llm_cost_by_model(project=project, start=start, end=end),
    }


# Per bucket, the aggregates of its runs: one index range each (``runs.started_at``
# ordered), so no sort or hash of the range's rows by a computed bucket, which cost
# more than the scan itself. Buckets without runs are left out, as a GROUP BY would.
_SERIES = f"""
    SELECT buckets.position, figures.*
      FROM unnest(%s::int[], %s::timestamptz[], %s::timestamptz[]) AS buckets (position, since, until)
     CROSS JOIN LATERAL (
        SELECT count(started_at) AS runs,
               count(started_at) FILTER (WHERE status = '{Run.Status.FAILED.value}') AS failed,
               sum(total_cost) AS cost,
               sum(output_tokens) + sum(input_tokens) AS tokens,
               avg(latency_ms) AS avg_latency_ms
          FROM runs_run
         WHERE organization_id = %s AND project_id = %s AND started_at >= buckets.since AND started_at < buckets.until
     ) AS figures
     WHERE figures.runs > 0
     ORDER BY buckets.position
"""  # noqa: S608 - a constant status


def _series(*, project, start: datetime, end: datetime, step: timedelta) -> list[dict[str, Any]]:
    """The runs started between ``start`` and ``end`` per hour or day (``step``) of the
    current time zone, as ``Trunc{Hour,Day}`` would group them: ``{"bucket", "runs",
    "failed", "cost", "tokens", "avg_latency_ms"}`` with the ORM's types, the buckets
    with runs only, in order."""
    check_scope(project.organization_id)
    zone = timezone.get_current_timezone()
    local = timezone.localtime(start, zone).replace(tzinfo=None, minute=0, second=0, microsecond=0)
    if step >= timedelta(days=1):
        local = local.replace(hour=0)
    buckets, since = [], start
    while since < end:
        local += step
        until = min(timezone.make_aware(local, zone), end)
        buckets.append((timezone.make_aware(local - step, zone), since, until))
        since = until
    with connection.cursor() as cursor:
        cursor.execute(
            _SERIES,
            [
                list(range(len(buckets))),
                [since for _bucket, since, _until in buckets],
                [until for _bucket, _since, until in buckets],
                project.organization_id,
                project.pk,
            ],
        )
        rows = cursor.fetchall()
    return [
        {
            "bucket": buckets[position][0],
            "runs": runs,
            "failed": failed,
            "cost": None if cost is None else Decimal(cost),
            "tokens": None if tokens is None else int(tokens),
            "avg_latency_ms": None if latency is None else float(latency),
        }
        for position, runs, failed, cost, tokens, latency in rows
    ]


def _next_hour(moment: datetime) -> datetime:
    hour = moment.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    return hour if hour == moment else hour + timedelta(hours=1)


def llm_cost_by_model(*, project, start: datetime, end: datetime, limit: int = 20) -> list[dict[str, Any]]:
    """LLM calls started between ``start`` and ``end`` per model: ``{"model", "cost",
    "calls"}``, the most expensive first, models with no price (cost None) after the
    priced ones. Whole UTC hours come from the rollup (``LlmHourly``), the parts of an
    hour at either end from the steps themselves."""
    first_hour = _next_hour(start)
    last_hour = end.astimezone(UTC).replace(minute=0, second=0, microsecond=0)
    steps = Step.objects.filter(project=project, kind=Step.Kind.LLM).exclude(model="")
    totals: dict[str, list] = {}  # model -> [calls, priced calls, cost]

    def add(rows) -> None:
        for row in rows:
            total = totals.setdefault(row["model"], [0, 0, Decimal(0)])
            total[0] += row["calls"]
            total[1] += row["priced_calls"]
            total[2] += row["cost"] or 0

    sums = {"calls": Count("*"), "priced_calls": Count("cost"), "cost": Sum("cost")}
    if first_hour < last_hour:
        add(
            LlmHourly.objects.filter(project=project, hour__gte=first_hour, hour__lt=last_hour)
            .values("model")
            .annotate(**sums | {"calls": Sum("calls"), "priced_calls": Sum("priced_calls")})
            .order_by()
        )
        edges = Q(started_at__gte=start, started_at__lt=first_hour) | Q(started_at__gte=last_hour, started_at__lt=end)
    else:
        edges = Q(started_at__gte=start, started_at__lt=end)
    add(steps.filter(edges).values("model").annotate(**sums).order_by())
    rows = [
        {"model": model, "cost": cost if priced else None, "calls": calls}
        for model, (calls, priced, cost) in totals.items()
        if calls
    ]
    # Models with no price have no cost: list them after the priced ones.
    rows.sort(key=lambda row: (row["cost"] is None, -(row["cost"] or 0), row["model"]))
    return rows[:limit]


def agent_lookup(*, project, value):
    """The project's agent named ``value`` (a text) or with id ``value`` (a number);
    NotFound otherwise (another tenant's agent included)."""
    from agentops.api.lookup import by_name_or_id

    return by_name_or_id(Agent.objects.filter(project=project, platform=""), value, "agent")


def step_detail(*, run: Run, step_id: int) -> Step:
    """One step of ``run``, or NotFound (a step of another run or tenant is not found)."""
    step = Step.objects.filter(run=run, pk=step_id).first()
    if step is None:
        raise NotFound("step not found")
    return step
