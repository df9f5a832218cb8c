"""The MCP server's read tools: what they take and the JSON they answer.

Each tool checks its arguments, then reads through the owning app's selectors for the
caller's project (``assistant.caller.run_for_caller``, permission ``work:read``, an API
key's ``read`` scope). Answers reuse the REST API's serializers, so a run or a job reads
the same over MCP as over REST. Lists are paged by an opaque ``cursor``.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Annotated, Any, Literal

from pydantic import Field

from assistant.caller import run_for_caller
from assistant.paging import clip, decode_cursor, encode_cursor, fill

READ = "work:read"
Id = Annotated[int, Field(ge=1, description="The object's id.")]
Cursor = Annotated[str | None, Field(description="The next_cursor of a previous answer, to read on.")]
Limit = Annotated[int, Field(ge=1, le=100, description="At most this many items (1 to 100).")]
NameOrId = Annotated[int | str, Field(description="The object's name or id.")]

# The share of an answer each list of get_run may fill, in characters of JSON.
RUN_LIST_BUDGET = 60_000
STEP_TEXT_CHARS = 20_000


def _offset_page(queryset, cursor: str | None, limit: int) -> tuple[list, str | None]:
    start = decode_cursor(cursor, "offset")["offset"]
    rows = list(queryset[start : start + limit + 1])
    more = len(rows) > limit
    return rows[:limit], (encode_cursor(offset=start + limit) if more else None)


# --- Runs --------------------------------------------------------------------------------


def _search_runs(access, *, arguments: dict, limit: int, cursor: str | None) -> dict:
    from runs import selectors
    from runs.api.serializers import RunFilterSerializer, RunSerializer

    serializer = RunFilterSerializer(data={name: value for name, value in arguments.items() if value is not None})
    serializer.is_valid(raise_exception=True)
    data = dict(serializer.validated_data)
    field, tie_breaker = selectors.SORTABLE[data.pop("sort")]
    queryset = selectors.run_list(project=access.project, filters=selectors.RunFilters(**data)).order_by(
        field, tie_breaker
    )
    rows, next_cursor = _offset_page(queryset, cursor, limit)
    return {"runs": RunSerializer(rows, many=True).data, "next_cursor": next_cursor}


async def search_runs(
    status: Annotated[
        list[Literal["queued", "running", "waiting", "succeeded", "failed", "cancelled"]] | None,
        Field(description="Only runs in one of these statuses."),
    ] = None,
    agent: Annotated[str | None, Field(description="Exact agent name.")] = None,
    model: Annotated[str | None, Field(description="Runs that used this model.")] = None,
    tag: Annotated[str | None, Field(description="Runs with this tag.")] = None,
    session: Annotated[str | None, Field(description="Exact session id.")] = None,
    environment: Annotated[str | None, Field(description="Exact environment.")] = None,
    end_user: Annotated[str | None, Field(description="Exact end-user id.")] = None,
    trace_id: Annotated[str | None, Field(description="Exact trace id.")] = None,
    started_after: Annotated[str | None, Field(description="ISO 8601; inclusive.")] = None,
    started_before: Annotated[str | None, Field(description="ISO 8601; exclusive.")] = None,
    min_cost: Annotated[str | None, Field(description="Dollars, as a decimal text.")] = None,
    max_cost: Annotated[str | None, Field(description="Dollars, as a decimal text.")] = None,
    min_latency_ms: Annotated[int | None, Field(ge=0)] = None,
    max_latency_ms: Annotated[int | None, Field(ge=0)] = None,
    q: Annotated[str | None, Field(description="Full-text search over the runs' input and output.")] = None,
    sort: Annotated[
        Literal["started_at", "-started_at", "cost", "-cost", "latency", "-latency", "tokens", "-tokens"],
        Field(description="Sort order; '-' for descending. Newest first by default."),
    ] = "-started_at",
    limit: Limit = 20,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Search the project's runs with the runs list's filters. Returns {"runs": [{id, trace_id, name,
    status, agent_name, models_used, total_cost, tokens, latency_ms, started_at, ...}], "next_cursor"}."""
    arguments = {
        "status": ",".join(status) if status else None,
        "agent": agent,
        "model": model,
        "tag": tag,
        "session": session,
        "environment": environment,
        "end_user": end_user,
        "trace_id": trace_id,
        "started_after": started_after,
        "started_before": started_before,
        "min_cost": min_cost,
        "max_cost": max_cost,
        "min_latency_ms": min_latency_ms,
        "max_latency_ms": max_latency_ms,
        "q": q,
        "sort": sort,
    }
    return await run_for_caller(READ, "read runs", _search_runs, arguments=arguments, limit=limit, cursor=cursor)


def run_page(access, run_id: int, cursor: str | None = None) -> dict:
    """A run: its summary, its steps in tree order (with depth and parent) and its
    transcript, each list filled up to a budget with long texts cut; ``next_cursor``
    reads on where either list stopped."""
    from runs import selectors
    from runs.api.serializers import MessageSerializer, RunDetailSerializer, StepListItemSerializer

    positions = decode_cursor(cursor, "steps", "messages")
    run = selectors.run_detail(project=access.project, run_id=run_id)
    nodes = selectors.flatten_tree(selectors.step_tree(run=run))
    for node in nodes:
        node.step.depth = node.depth
    steps = clip(StepListItemSerializer([node.step for node in nodes], many=True).data)
    messages = clip(MessageSerializer(selectors.transcript(run=run), many=True).data)
    step_page, next_step = fill(steps, positions["steps"], RUN_LIST_BUDGET)
    message_page, next_message = fill(messages, positions["messages"], RUN_LIST_BUDGET)
    truncated = next_step is not None or next_message is not None
    return {
        "run": clip(RunDetailSerializer(run).data),
        "steps": step_page,
        "steps_total": len(steps),
        "transcript": message_page,
        "transcript_total": len(messages),
        "truncated": truncated,
        "next_cursor": encode_cursor(
            steps=next_step if next_step is not None else len(steps),
            messages=next_message if next_message is not None else len(messages),
        )
        if truncated
        else None,
    }


async def get_run(run_id: Id, cursor: Cursor = None) -> dict[str, Any]:
    """One run: {"run": summary with totals, input and output; "steps": the step tree flattened
    (depth, parent_id); "transcript": the conversation; "truncated", "next_cursor"}. Texts over
    2,000 characters are cut (get_step shows a step in full); a long run pages with the cursor."""
    return await run_for_caller(READ, "read runs", run_page, run_id=run_id, cursor=cursor)


def _get_step(access, *, run_id: int, step_id: int) -> dict:
    from runs import selectors
    from runs.api.serializers import StepSerializer

    run = selectors.run_detail(project=access.project, run_id=run_id)
    return {
        "run_id": run.pk,
        "step": clip(StepSerializer(selectors.step_detail(run=run, step_id=step_id)).data, STEP_TEXT_CHARS),
    }


async def get_step(run_id: Id, step_id: Annotated[int, Field(ge=1, description="The step's id.")]) -> dict[str, Any]:
    """One step of a run with its input, output, attributes, tokens, cost and timing (texts up to
    20,000 characters): {"run_id", "step": {...}}."""
    return await run_for_caller(READ, "read runs", _get_step, run_id=run_id, step_id=step_id)


def _compare_runs(access, *, a: int, b: int) -> dict:
    from runs.compare import compare_runs as compare
    from runs.compare import run_pair

    run_a, run_b = run_pair(project=access.project, a_id=a, b_id=b)
    return clip(compare(run_a, run_b))


async def compare_runs(
    a: Annotated[int, Field(ge=1, description="The baseline run's id.")],
    b: Annotated[int, Field(ge=1, description="The other run's id.")],
) -> dict[str, Any]:
    """What differs from run a to run b: the settings each ran with, the aligned steps, the output
    diff, memory and the metrics (cost, tokens, latency) with their change, as the compare page shows."""
    return await run_for_caller(READ, "read runs", _compare_runs, a=a, b=b)


# --- Sessions ----------------------------------------------------------------------------


def _list_sessions(access, *, status: str, limit: int, cursor: str | None) -> dict:
    from runs.api.sessions import AgentSessionSerializer
    from runs.models import Session

    queryset = Session.objects.filter(project=access.project).select_related("agent", "agent_version", "started_by")
    if status:
        queryset = queryset.filter(status=status)
    rows, next_cursor = _offset_page(queryset.order_by("-updated_at", "-id"), cursor, limit)
    return {"sessions": AgentSessionSerializer(rows, many=True).data, "next_cursor": next_cursor}


async def list_sessions(
    status: Annotated[
        Literal["", "open", "closed"], Field(description="Only open or only closed sessions; all by default.")
    ] = "",
    limit: Limit = 20,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """The project's interactive sessions (conversations with an agent), most recently active
    first: {"sessions": [{id, title, status, agent, version, started_by, last_event_id,
    created_at, updated_at}], "next_cursor"}."""
    return await run_for_caller(READ, "read sessions", _list_sessions, status=status, limit=limit, cursor=cursor)


def session_data(access, *, session_id: int) -> dict:
    """A session with its turns (each a run: input, output, status, cost), the messages waiting
    and the approvals pending; texts over 2,000 characters cut."""
    from runs.api.sessions import AgentSessionDetailSerializer
    from runs.services.sessions import session_get

    return clip(AgentSessionDetailSerializer(session_get(project=access.project, session_id=session_id)).data)


async def get_session(session_id: Id) -> dict[str, Any]:
    """One interactive session: its summary, "turns" in order (run, turn, status, undone, input,
    output, error, total_cost, started_at, ended_at; get_run reads a turn's steps), "queued"
    messages and "pending_approvals". Texts over 2,000 characters are cut."""
    return await run_for_caller(READ, "read sessions", session_data, session_id=session_id)


# --- Evaluations -------------------------------------------------------------------------


def leaderboard_data(
    access,
    *,
    dataset,
    sort: str = "",
    branch: str = "",
    agent: str = "",
    model: str = "",
    limit: int = 50,
    cursor: str | None = None,
) -> dict:
    from evals import exports, selectors

    start = decode_cursor(cursor, "offset")["offset"]
    found = selectors.dataset_lookup(project=access.project, value=dataset)
    names, rows = selectors.leaderboard(dataset=found, sort=sort, branch=branch, agent=agent, model=model)
    return {
        "dataset": {"id": found.pk, "name": found.name},
        "metrics": names,
        "rows": list(exports.leaderboard_rows(found, names, rows[start : start + limit])),
        "rows_total": len(rows),
        "next_cursor": encode_cursor(offset=start + limit) if start + limit < len(rows) else None,
    }


async def get_leaderboard(
    dataset: NameOrId,
    sort: Annotated[str, Field(description="created, cost, latency, pass_rate, name, or a metric's name.")] = "",
    branch: str = "",
    agent: str = "",
    model: str = "",
    limit: Limit = 50,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """A dataset's leaderboard: its ended experiments with each metric's mean and 95% interval,
    pass rate, cost, latency and date, best first: {"dataset", "metrics": [...], "rows": [...],
    "rows_total", "next_cursor"}."""
    return await run_for_caller(
        READ,
        "read evaluations",
        leaderboard_data,
        dataset=dataset,
        sort=sort,
        branch=branch,
        agent=agent,
        model=model,
        limit=limit,
        cursor=cursor,
    )


def _compare_experiments(access, *, a: int, b: int, limit: int, cursor: str | None) -> dict:
    from evals import selectors

    experiment_a = selectors.experiment_detail(project=access.project, experiment_id=a)
    experiment_b = selectors.experiment_detail(project=access.project, experiment_id=b)
    metrics, items = selectors.compare_experiments(a=experiment_a, b=experiment_b)
    start = decode_cursor(cursor, "offset")["offset"]
    page = items[start : start + limit]
    return {
        "a": {"id": experiment_a.pk, "name": experiment_a.name},
        "b": {"id": experiment_b.pk, "name": experiment_b.name},
        "metrics": [{**asdict(metric), "difference": metric.difference.as_dict()} for metric in metrics],
        "items": [
            {
                "key": item.key,
                "change": item.change,
                "deltas": item.deltas,
                "a_run_id": item.a.run_id if item.a else None,
                "b_run_id": item.b.run_id if item.b else None,
                "input": clip(item.input, 500),
            }
            for item in page
        ],
        "items_total": len(items),
        "next_cursor": encode_cursor(offset=start + limit) if start + limit < len(items) else None,
    }


async def compare_experiments(
    a: Annotated[int, Field(ge=1, description="The baseline experiment's id.")],
    b: Annotated[int, Field(ge=1, description="The other experiment's id.")],
    limit: Limit = 50,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """Two experiments of one dataset compared: each metric's means, the difference with its 95%
    interval and whether it is significant (improved/regressed/unchanged), then item by item
    (improved, regressed, mixed, same, only_a, only_b) with the runs behind them, paged."""
    return await run_for_caller(READ, "read evaluations", _compare_experiments, a=a, b=b, limit=limit, cursor=cursor)


def experiment_data(access, *, experiment_id: int) -> dict:
    from evals import selectors
    from evals.api.experiments import ExperimentSerializer

    experiment = selectors.experiment_detail(project=access.project, experiment_id=experiment_id)
    return ExperimentSerializer(experiment).data


def dataset_data(access, *, dataset) -> dict:
    from evals import selectors

    found = selectors.dataset_lookup(project=access.project, value=dataset)
    return {
        "id": found.pk,
        "name": found.name,
        "description": found.description,
        "latest_version": found.latest_version,
        "item_count": selectors.dataset_item_count(dataset=found),
        "created_at": found.created_at,
        "updated_at": found.updated_at,
    }


# --- Spend and budgets -------------------------------------------------------------------


def _get_spend(access, *, period: str, by: str) -> dict:
    from billing.spend import period_window, project_spend, totals_of

    window = period_window(period)
    rows = project_spend(project=access.project, window=window, by=by)
    return {"period": {"start": window.start, "end": window.end}, "by": by, "rows": rows, "totals": totals_of(rows)}


async def get_spend(
    by: Annotated[
        Literal["day", "model", "project", "agent", "key"],
        Field(description="Group the spend by day, model, project, agent or API key (its prefix)."),
    ] = "day",
    period: Annotated[
        Literal["30d", "90d", "month"], Field(description="The last 30 or 90 days, or this month so far (UTC).")
    ] = "30d",
) -> dict[str, Any]:
    """The project's spend from the usage ledger: {"period": {start, end}, "by", "rows": [{name, cost,
    input_tokens, cached_input_tokens, output_tokens, steps, unpriced_steps}], "totals"}. Costs are
    dollars as decimal texts."""
    return await run_for_caller(READ, "read spend", _get_spend, period=period, by=by)


def _get_budget_status(access) -> dict:
    from billing.budgets import budget_status

    return {"budgets": budget_status(project=access.project, api_key=access.api_key)}


async def get_budget_status() -> dict[str, Any]:
    """The budgets that cover this project (the organization's, the project's, this API key's),
    each with its amount, this period's spend and percent, and "blocked" when a hard limit is
    reached (new runs, replays, experiments and jobs are then refused)."""
    return await run_for_caller(READ, "read budgets", _get_budget_status)


# --- Jobs --------------------------------------------------------------------------------


def _list_jobs(access, *, status: str, limit: int, cursor: str | None) -> dict:
    from jobs import selectors
    from jobs.api.views import JobSerializer

    rows, next_cursor = _offset_page(selectors.job_list(project=access.project, status=status), cursor, limit)
    return {"jobs": JobSerializer(rows, many=True).data, "next_cursor": next_cursor}


async def list_jobs(
    status: Annotated[
        Literal["", "queued", "submitted", "running", "succeeded", "failed", "cancelled", "lost"],
        Field(description="Only jobs in this status; all by default."),
    ] = "",
    limit: Limit = 20,
    cursor: Cursor = None,
) -> dict[str, Any]:
    """The project's GPU jobs, newest first: {"jobs": [{id, name, status, backend, hardware,
    estimate, cost, exit_code, experiment, events, ...}], "next_cursor"}."""
    return await run_for_caller(READ, "read jobs", _list_jobs, status=status, limit=limit, cursor=cursor)


def _get_job_logs(access, *, job_id: int, after: int, limit: int) -> dict:
    from jobs import selectors

    job = selectors.job_detail(project=access.project, job_id=job_id)
    page = selectors.job_log_page(job=job, after=after, limit=limit)
    page["lines"] = clip(page["lines"])
    return {"job_id": job.pk, "status": job.status, **page}


async def get_job_logs(
    job_id: Id,
    after: Annotated[int, Field(ge=0, description="Lines after this line number (0: from the start).")] = 0,
    limit: Annotated[int, Field(ge=1, le=1000, description="At most this many lines.")] = 200,
) -> dict[str, Any]:
    """A job's log lines after line `after`: {"job_id", "status", "lines": [{number, text, at}],
    "next_after" (pass it as `after` to read on), "ended" (no more lines will come)}."""
    return await run_for_caller(READ, "read jobs", _get_job_logs, job_id=job_id, after=after, limit=limit)


def job_submission(access, arguments: dict) -> dict:
    """A job's submission checked as the REST API checks it, its names resolved in the project."""
    from evals import selectors as evals_selectors
    from jobs import selectors
    from jobs.api.views import JobSubmitSerializer

    serializer = JobSubmitSerializer(data={name: value for name, value in arguments.items() if value is not None})
    serializer.is_valid(raise_exception=True)
    data = dict(serializer.validated_data)
    data["backend"] = selectors.backend_lookup(organization=access.organization, value=data["backend"])
    evaluation = data["evaluation"]
    if evaluation:
        data["evaluation"] = {
            **evaluation,
            "dataset": evals_selectors.dataset_lookup(project=access.project, value=evaluation["dataset"]),
            "evaluators": [
                evals_selectors.evaluator_lookup(project=access.project, value=name)
                for name in evaluation["evaluators"]
            ],
        }
    return data


def _estimate_job_cost(access, *, arguments: dict) -> dict:
    from evals import selectors as evals_selectors
    from jobs.services import estimate

    data = job_submission(access, arguments)
    evaluation = data["evaluation"] or {}
    items = (
        evals_selectors.dataset_item_count(dataset=evaluation["dataset"], version_number=evaluation["dataset_version"])
        if evaluation
        else None
    )
    return estimate(
        project=access.project,
        backend=data["backend"],
        hardware=data["hardware"],
        time_limit_seconds=data["time_limit_seconds"],
        items=items,
        seconds_per_item=evaluation.get("seconds_per_item"),
    )


Backend = Annotated[int | str, Field(description="The compute backend's name or id.")]
Hardware = Annotated[str, Field(description="A hardware type the backend offers, e.g. a10g-small.")]
TimeLimit = Annotated[int, Field(ge=1, description="Seconds before the job is stopped.")]
Evaluation = Annotated[
    dict[str, Any] | None,
    Field(
        description="An evaluation job: {dataset (name or id), dataset_version?, evaluators: [names], "
        "model, seconds_per_item?}."
    ),
]


async def estimate_job_cost(
    backend: Backend,
    hardware: Hardware,
    time_limit_seconds: TimeLimit = 3600,
    evaluation: Evaluation = None,
) -> dict[str, Any]:
    """What a GPU job would cost before submitting it: {"amount" (dollars, null when the hardware
    has no price on that backend), "hourly", "basis", "note", ...}."""
    arguments = {
        "backend": backend,
        "hardware": hardware,
        "time_limit_seconds": time_limit_seconds,
        "evaluation": evaluation,
    }
    return await run_for_caller(READ, "read jobs", _estimate_job_cost, arguments=arguments)


TOOLS = [
    search_runs,
    get_run,
    get_step,
    compare_runs,
    list_sessions,
    get_session,
    get_leaderboard,
    compare_experiments,
    get_spend,
    get_budget_status,
    list_jobs,
    get_job_logs,
    estimate_job_cost,
]
