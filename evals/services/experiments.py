"""Experiments: an agent version over a dataset version, scored by evaluators.

How an executed experiment moves (every step idempotent, state in PostgreSQL):

1. ``experiment_start`` stores the experiment and one pending result per item of the
   dataset version, then hands it to ``advance``.
2. ``experiment_advance`` (Celery: evals.tasks.advance_experiment) starts up to
   ``concurrency`` items at once: each becomes an executed run on the runs executor.
3. When a run ends, the executor's ``run_ended`` signal marks its result ``scoring``
   and queues ``score_result`` (evals.tasks.score_result), which runs the evaluators,
   stores the scores and the run's cost and latency, and advances the experiment (the
   freed slot starts the next item).
4. With no item left, ``finalize`` aggregates each metric with a 95% bootstrap
   interval (evals.stats) and ends the experiment.

A periodic task (evals.tasks.recover_experiments) picks up any step a dead worker
dropped. Experiments reported from outside (``kind = external``) skip 2: a harness
posts each item's output (and scores) with ``results_report``; the platform's
evaluators score the outputs the same way.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from datetime import timedelta
from decimal import Decimal, InvalidOperation
from typing import Any

from django.db import transaction
from django.db.models import F
from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest
from agentops.jsonsafe import MAX_BIGINT, MAX_MONEY, storage_problem, unknown_fields
from agentops.services.audit import audit_record
from billing.budgets import check_work_allowed
from evals import stats
from evals.models import Dataset, DatasetItem, DatasetVersion, Evaluator, Experiment, ExperimentResult, Score
from evals.scoring import Subject, evaluate, passed, spec_of
from evals.services.evaluators import RESERVED_NAMES
from runs.execution import create_executed_run, run_cancel, version_spec
from runs.models import Agent, AgentVersion, Run
from runs.services.agents import clean_parameters

logger = logging.getLogger(__name__)

MAX_CONCURRENCY = 32
MAX_ITEMS = 50_000
MAX_REPORTED_RESULTS = 1000
# A result being scored for longer than this was dropped by a dead worker: score again.
SCORING_STALL = timedelta(minutes=10)
ACTIVE = (ExperimentResult.Status.RUNNING, ExperimentResult.Status.SCORING)


def experiment_start(
    *,
    project,
    actor,
    dataset: Dataset,
    evaluators: list[Evaluator],
    kind: str = Experiment.Kind.EXECUTED,
    agent: Agent | None = None,
    agent_version_number: int | None = None,
    dataset_version_number: int | None = None,
    name: str = "",
    concurrency: int = 4,
    parameters: dict | None = None,
    branch: str = "",
    commit: str = "",
    metadata: dict | None = None,
    api_key=None,
    job_id: int | None = None,
    ip: str | None = None,
) -> Experiment:
    """Store an experiment with a pending result per item and hand it to a worker.

    Refused with 402 when a hard budget covering the project (or key) is spent, and
    with 400 when it could not run: no items, an unknown version, a human evaluator
    (people score through annotation queues), an agent that pauses for approvals."""
    if kind not in Experiment.Kind.values:
        raise InvalidRequest(f"kind must be one of {', '.join(Experiment.Kind.values)}")
    for field, value in (("metadata", metadata), ("parameters", parameters), ("name", name), ("branch", branch)):
        if problem := storage_problem(value):
            raise InvalidRequest(f"{field} cannot be stored: {problem}")
    if not 1 <= concurrency <= MAX_CONCURRENCY:
        raise InvalidRequest(f"concurrency must be 1 to {MAX_CONCURRENCY}")
    version = _dataset_version(dataset, dataset_version_number)
    specs = _evaluator_specs(evaluators)
    agent_version = None
    overrides = clean_parameters(parameters)
    if kind == Experiment.Kind.EXECUTED:
        if agent is None:
            raise InvalidRequest("an executed experiment needs an agent")
        agent_version = _agent_version(agent, agent_version_number)
        check_work_allowed(project=project, api_key=api_key, work="experiment")
    elif agent is not None:
        agent_version = _agent_version(agent, agent_version_number)
    elif overrides:
        raise InvalidRequest("parameters apply to the agent the platform runs; an external experiment has none")
    items = list(DatasetItem.objects.filter(dataset=dataset).in_version(version.number).order_by("id"))
    if not items:
        raise InvalidRequest(f"version {version.number} of dataset {dataset.name!r} has no items")
    if len(items) > MAX_ITEMS:
        raise InvalidRequest(f"an experiment runs at most {MAX_ITEMS} items; this version has {len(items)}")

    now = timezone.now()
    model = (agent_version.model if agent_version else "") or (metadata or {}).get("model", "")
    with transaction.atomic():
        experiment = Experiment.objects.create(
            organization_id=project.organization_id,
            project=project,
            dataset=dataset,
            dataset_version=version,
            name=name.strip() or _default_name(dataset, agent_version, now),
            kind=kind,
            agent_version=agent_version,
            agent_name=agent.name if agent else str((metadata or {}).get("agent", "")),
            agent_version_label=str(agent_version.number) if agent_version else "",
            model=str(model)[:200],
            parameters={**(agent_version.parameters if agent_version else {}), **overrides},
            evaluators=specs,
            concurrency=concurrency,
            branch=branch[:200],
            commit=commit[:100],
            metadata=metadata or {},
            item_count=len(items),
            job=job_id,
            api_key=api_key,
            created_by=actor if getattr(actor, "pk", None) else None,
            created_at=now,
        )
        ExperimentResult.objects.bulk_create(
            [
                ExperimentResult(
                    organization_id=project.organization_id,
                    project=project,
                    experiment=experiment,
                    item=item,
                    item_key=item.key,
                )
                for item in items
            ],
            batch_size=2000,
        )
        audit_record(
            organization=project.organization,
            actor=actor,
            action="experiment.start",
            target=experiment,
            data={
                "dataset": dataset.name,
                "dataset_version": version.number,
                "kind": kind,
                "agent": experiment.agent_name,
                "agent_version": experiment.agent_version_label,
                "evaluators": [spec["name"] for spec in specs],
            },
            ip=ip,
        )
        transaction.on_commit(lambda: _enqueue_advance(experiment))
    return experiment


def _default_name(dataset: Dataset, agent_version: AgentVersion | None, now) -> str:
    who = f"{agent_version.agent.name} v{agent_version.number}" if agent_version else "external"
    return f"{who} on {dataset.name} · {now:%Y-%m-%d %H:%M}"


def _dataset_version(dataset: Dataset, number: int | None) -> DatasetVersion:
    number = number or dataset.latest_version
    version = DatasetVersion.objects.filter(dataset=dataset, number=number).first()
    if version is None:
        raise InvalidRequest(f"dataset {dataset.name!r} has no version {number}")
    return version


def _agent_version(agent: Agent, number: int | None) -> AgentVersion:
    number = number or agent.latest_version
    version = AgentVersion.objects.select_related("agent").filter(agent=agent, number=number).first()
    if version is None:
        raise InvalidRequest(f"agent {agent.name!r} has no version {number}")
    if version.approval_tools:
        raise InvalidRequest(
            f"version {number} of {agent.name!r} pauses for a person's approval before "
            f"{', '.join(version.approval_tools)}; experiments need an agent that runs unattended"
        )
    return version


def _evaluator_specs(evaluators: list[Evaluator]) -> list[dict]:
    if not evaluators:
        raise InvalidRequest("name at least one evaluator")
    specs = []
    for evaluator in evaluators:
        if evaluator.archived:
            raise InvalidRequest(f"evaluator {evaluator.name!r} is archived")
        if evaluator.kind == Evaluator.Kind.HUMAN:
            raise InvalidRequest(
                f"evaluator {evaluator.name!r} is scored by people: use an annotation queue for it, not an experiment"
            )
        specs.append(spec_of(evaluator))
    names = [spec["name"] for spec in specs]
    if len(set(names)) != len(names):
        raise InvalidRequest("each evaluator may be named once")
    return specs


def _enqueue_advance(experiment: Experiment) -> None:
    from evals.tasks import advance_experiment

    advance_experiment.delay(experiment.organization_id, experiment.pk)


def _enqueue_scoring(organization_id: int, result_ids: list[int]) -> None:
    from evals.tasks import score_result

    for result_id in result_ids:
        score_result.delay(organization_id, result_id)


# -- moving an experiment forward -------------------------------------------------------


def experiment_advance(*, experiment_id: int) -> None:
    """Start as many pending items as the concurrency allows, finish a cancelled
    experiment, or finalize one with nothing left. Safe to call any number of times."""
    cancel_runs: list[int] = []
    with transaction.atomic():
        experiment = (
            Experiment.objects.select_for_update(of=("self",))
            .select_related("project__organization", "agent_version__agent", "dataset")
            .filter(pk=experiment_id)
            .first()
        )
        if experiment is None or experiment.ended:
            return
        if experiment.status == Experiment.Status.QUEUED:
            experiment.status = Experiment.Status.RUNNING
            experiment.started_at = timezone.now()
            experiment.save(update_fields=["status", "started_at", "updated_at"])
        results = ExperimentResult.objects.filter(experiment=experiment)
        if experiment.cancel_requested:
            cancel_runs = list(
                results.filter(status=ExperimentResult.Status.RUNNING, run__isnull=False).values_list(
                    "run_id", flat=True
                )
            )
            if not results.filter(status__in=ACTIVE).exists():
                _finalize(experiment, status=experiment.metadata.get("stop_status", Experiment.Status.CANCELLED))
        elif experiment.kind == Experiment.Kind.EXECUTED:
            active = results.filter(status__in=ACTIVE).count()
            free = experiment.concurrency - active
            if free > 0:
                pending = list(
                    results.filter(status=ExperimentResult.Status.PENDING).select_related("item").order_by("id")[:free]
                )
                for result in pending:
                    _start_item(experiment, result)
                if pending:
                    started = [result.pk for result in pending]
                    transaction.on_commit(lambda: _announce_started(experiment.pk, started))
                if not pending and active == 0:
                    _finalize(experiment)
        else:  # external: ends when every item is reported and scored, or when its harness says so
            waiting_for = (
                ACTIVE if experiment.metadata.get("complete_requested") else (ExperimentResult.Status.PENDING, *ACTIVE)
            )
            if not results.filter(status__in=waiting_for).exists():
                _finalize(experiment)
    for run_id in cancel_runs:
        run = Run.objects.filter(pk=run_id).first()
        if run is not None and run.status not in Run.ENDED:
            try:
                run_cancel(run=run, actor=None)
            except Conflict:  # it ended meanwhile; its result is scored as usual
                pass


def _start_item(experiment: Experiment, result: ExperimentResult) -> None:
    version = experiment.agent_version
    if version is None:  # the agent was deleted after the experiment started
        result.status = ExperimentResult.Status.ERROR
        result.error = "the experiment's agent version no longer exists"
        result.ended_at = result.updated_at = timezone.now()
        result.save(update_fields=["status", "error", "ended_at", "updated_at"])
        _count(experiment, result)
        return
    run = create_executed_run(
        project=experiment.project,
        actor=None,
        api_key=experiment.api_key,
        name=f"{experiment.name} · {result.item_key}"[:500],
        agent_name=version.agent.name,
        version=version,
        input=result.item.input,
        spec=version_spec(version),
        parameters=dict(experiment.parameters),
        fields={
            "environment": "experiment",
            "tags": [f"experiment:{experiment.pk}"],
            "metadata": {"experiment": experiment.pk, "dataset_item": result.item_key},
        },
        audit=None,
    )
    result.run = run
    result.status = ExperimentResult.Status.RUNNING
    result.started_at = result.updated_at = timezone.now()
    result.save(update_fields=["run", "status", "started_at", "updated_at"])


def on_run_ended(sender, run: Run, status: str, **kwargs) -> None:
    """``runs.signals.run_ended`` receiver: the item whose run this is gets scored."""
    ids = list(
        ExperimentResult.objects.filter(run_id=run.pk, status=ExperimentResult.Status.RUNNING).values_list(
            "id", flat=True
        )
    )
    if not ids:
        return
    ExperimentResult.objects.filter(id__in=ids, status=ExperimentResult.Status.RUNNING).update(
        status=ExperimentResult.Status.SCORING, updated_at=timezone.now()
    )
    organization_id = run.organization_id
    transaction.on_commit(lambda: _score_soon(organization_id, ids))


def _score_soon(organization_id: int, result_ids: list[int]) -> None:
    """Score on this worker right away when the run ended on one (the executor's task:
    no hop through the broker); from anywhere else (a request that cancelled a queued
    run), on a worker. Any failure here leaves the result to the task and to recovery."""
    from celery import current_task

    request = getattr(current_task, "request", None)  # a proxy: no task, no request
    if request is None or not request.id:
        _enqueue_scoring(organization_id, result_ids)
        return
    for result_id in result_ids:
        try:
            score_result(result_id=result_id)
        except Exception:  # noqa: BLE001 - the run is stored; scoring is retried on a worker
            logger.exception("result %s: scoring after its run failed; queued again", result_id)
            _enqueue_scoring(organization_id, [result_id])


# -- scoring one item -------------------------------------------------------------------


def score_result(*, result_id: int) -> None:
    """Run the experiment's evaluators on one item's output and store the scores, the
    cost and the latency; then advance the experiment. Idempotent: a result already
    done is left alone, and scores are upserted."""
    result = (
        ExperimentResult.objects.select_related("experiment__project__organization", "item", "run")
        .filter(pk=result_id)
        .first()
    )
    if result is None or result.status not in ACTIVE:
        return
    seen = result.updated_at  # a newer report while this one is scored starts over
    experiment = result.experiment
    run = result.run
    if experiment.kind == Experiment.Kind.EXECUTED:
        if run is None or run.status not in Run.ENDED:
            return  # not ended yet: its end will bring it back
        subject = Subject.from_run(run, item=result.item)
        error = "" if run.status == Run.Status.SUCCEEDED else (run.error or f"the run {run.status}")
        cost, tokens, latency = run.total_cost, run.input_tokens + run.output_tokens, run.latency_ms
        output = run.output
    else:
        reported = result.reported or {}
        subject = Subject.reported(
            item=result.item,
            output=result.output,
            cost=result.cost,
            latency_ms=result.latency_ms,
            tokens=result.tokens,
            steps=reported.get("steps"),
            tool_calls=reported.get("tool_calls"),
        )
        error = result.error
        cost, tokens, latency, output = result.cost, result.tokens, result.latency_ms, result.output
    reported_scores = {name: value for name, value in (result.reported or {}).get("scores", {}).items()}
    outcomes = [
        (spec, evaluate(spec, subject, organization=experiment.project.organization)) for spec in experiment.evaluators
    ]

    with transaction.atomic():
        result = ExperimentResult.objects.select_for_update().filter(pk=result_id).first()
        if result is None or result.status not in ACTIVE:
            return
        if result.updated_at != seen:  # reported again meanwhile: that report's scoring task stores it
            return
        scores: dict[str, float | None] = {}
        rows = []
        for spec, outcome in outcomes:
            scores[spec["name"]] = outcome.value
            rows.append(
                Score(
                    organization_id=result.organization_id,
                    project_id=result.project_id,
                    run=run,
                    result=result,
                    evaluator_id=spec.get("id"),
                    name=spec["name"],
                    value=outcome.value,
                    passed=passed(spec, outcome.value),
                    reasoning=outcome.reasoning,
                    details=outcome.details,
                    error=outcome.error,
                    source=Score.Source.EXPERIMENT,
                )
            )
        for name, value in reported_scores.items():
            if name in scores:
                continue  # the platform's evaluator of that name wins
            scores[name] = value
            rows.append(
                Score(
                    organization_id=result.organization_id,
                    project_id=result.project_id,
                    run=run,
                    result=result,
                    name=name,
                    value=value,
                    passed=None,
                    source=Score.Source.EXTERNAL,
                )
            )
        Score.objects.filter(result=result).delete()
        Score.objects.bulk_create(rows)
        result.scores = scores
        result.output = output
        result.cost = cost or Decimal(0)
        result.tokens = tokens or 0
        result.latency_ms = latency
        result.error = error
        result.status = ExperimentResult.Status.ERROR if error else ExperimentResult.Status.DONE
        result.ended_at = result.updated_at = timezone.now()
        result.save(
            update_fields=[
                "scores",
                "output",
                "cost",
                "tokens",
                "latency_ms",
                "error",
                "status",
                "ended_at",
                "updated_at",
            ]
        )
        _count(experiment, result)
        transaction.on_commit(lambda: _announce_result(experiment.pk, result.pk))
    experiment_advance(experiment_id=experiment.pk)


def _count(experiment: Experiment, result: ExperimentResult) -> None:
    """Add one finished item to the experiment's running totals."""
    Experiment.objects.filter(pk=experiment.pk).update(
        completed_count=F("completed_count") + 1,
        error_count=F("error_count") + (1 if result.status == ExperimentResult.Status.ERROR else 0),
        total_cost=F("total_cost") + (result.cost or 0),
        total_tokens=F("total_tokens") + (result.tokens or 0),
        total_latency_ms=F("total_latency_ms") + (result.latency_ms or 0),
        updated_at=timezone.now(),
    )


def _announce_started(experiment_id: int, result_ids: list[int]) -> None:
    from evals.live import announce_started

    announce_started(experiment_id=experiment_id, result_ids=result_ids)


def _announce_result(experiment_id: int, result_id: int) -> None:
    from evals.live import announce_result

    announce_result(experiment_id=experiment_id, result_id=result_id)


# -- the end ------------------------------------------------------------------------------


def _finalize(experiment: Experiment, *, status: str | None = None) -> None:
    """Aggregate the results and end the experiment (inside advance's transaction)."""
    results = list(
        ExperimentResult.objects.filter(experiment=experiment).values("status", "scores", "latency_ms", "cost", "error")
    )
    summary = summarize(experiment.evaluators, results, seed=experiment.pk)
    finished = [
        row for row in results if row["status"] in (ExperimentResult.Status.DONE, ExperimentResult.Status.ERROR)
    ]
    errored = [row for row in finished if row["status"] == ExperimentResult.Status.ERROR]
    if status is None:
        status = Experiment.Status.FAILED if finished and len(errored) == len(finished) else Experiment.Status.SUCCEEDED
    if status == Experiment.Status.FAILED and not experiment.error:
        experiment.error = f"every item failed; the first: {errored[0]['error']}"[:2000]
    experiment.summary = summary
    experiment.status = status
    experiment.ended_at = timezone.now()
    experiment.save(update_fields=["summary", "status", "ended_at", "error", "updated_at"])
    transaction.on_commit(lambda: _after_end(experiment.pk))


def _after_end(experiment_id: int) -> None:
    from evals.live import announce_ended

    announce_ended(experiment_id=experiment_id)
    from evals.tasks import experiment_ended

    experiment_ended.delay(Experiment.objects.get(pk=experiment_id).organization_id, experiment_id)


def summarize(specs: list[dict], results: list[dict], *, seed: int = 0) -> dict:
    """Each metric's mean with its 95% interval and pass rate, the share of items that
    passed every evaluator, latency percentiles, cost and error rate, from result rows
    (``status``, ``scores``, ``latency_ms``, ``cost``).

    An item whose evaluator could not score (value None) is left out of that metric's
    mean and counted in ``unscored``; an item whose run failed is scored like any other
    (rules give it 0), so failures pull the numbers down rather than vanish."""
    finished = [
        row for row in results if row["status"] in (ExperimentResult.Status.DONE, ExperimentResult.Status.ERROR)
    ]
    metrics: dict[str, dict] = {}
    thresholds = {spec["name"]: spec.get("threshold", 0.5) for spec in specs}
    names = list(thresholds)
    for row in finished:  # reported scores with no evaluator of that name
        for name in row["scores"] or {}:
            if name not in thresholds:
                thresholds[name] = None
                names.append(name)
    for index, name in enumerate(names):
        values = [row["scores"][name] for row in finished if (row["scores"] or {}).get(name) is not None]
        estimate = stats.bootstrap_mean([float(v) for v in values], seed=seed * 1000 + index)
        threshold = thresholds[name]
        metrics[name] = {
            **estimate.as_dict(),
            "pass_rate": (sum(1 for v in values if v >= threshold) / len(values))
            if values and threshold is not None
            else None,
            "threshold": threshold,
            "unscored": len(finished) - len(values),
        }
    gated = [name for name in names if thresholds[name] is not None]
    # An item counts toward the pass rate only when every gated metric scored it: a rate
    # over items nobody could score would be a number made of no data.
    every = [
        all(row["scores"][name] >= thresholds[name] for name in gated)
        for row in finished
        if all((row["scores"] or {}).get(name) is not None for name in gated)
    ]
    latencies = sorted(row["latency_ms"] for row in finished if row["latency_ms"] is not None)
    cost = sum((Decimal(row["cost"] or 0) for row in finished), Decimal(0))
    return {
        "metrics": metrics,
        "items": len(finished),
        "pass_rate": (sum(every) / len(every)) if every and gated else None,
        "error_rate": (sum(1 for row in finished if row["status"] == ExperimentResult.Status.ERROR) / len(finished))
        if finished
        else None,
        "latency_ms": {
            "p50": stats.percentile(latencies, 0.5),
            "p95": stats.percentile(latencies, 0.95),
            "mean": (sum(latencies) / len(latencies)) if latencies else None,
        },
        "completion": (len(finished) / len(results)) if results else None,
        "cost": str(cost),
        "cost_per_item": str((cost / len(finished)).quantize(Decimal("0.000000001"))) if finished else None,
    }


def _ask_to_end(experiment: Experiment, change, *, action: str = "", actor=None, ip: str | None = None):
    """Lock an unfinished experiment, apply ``change`` (it sets fields and returns their
    names), audit ``action`` if given, then advance it (it ends when nothing is in flight)."""
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if experiment.ended:
            raise Conflict(f"the experiment already {experiment.status}")
        experiment.save(update_fields=[*change(experiment), "updated_at"])
        if action:
            audit_record(
                organization=experiment.project.organization, actor=actor, action=action, target=experiment, ip=ip
            )
    experiment_advance(experiment_id=experiment.pk)
    experiment.refresh_from_db()
    return experiment


def experiment_cancel(*, experiment: Experiment, actor, ip: str | None = None) -> Experiment:
    """Stop starting items and cancel the running ones; scored items are kept, items
    never started stay pending and out of the numbers."""

    def cancel(locked):
        locked.cancel_requested = True
        return ["cancel_requested"]

    return _ask_to_end(experiment, cancel, action="experiment.cancel", actor=actor, ip=ip)


def experiment_stop(*, experiment: Experiment, error: str) -> Experiment:
    """End an experiment as failed, keeping what was scored (its GPU job failed or was
    lost): like a cancel, with the reason."""

    def stop(locked):
        locked.cancel_requested = True
        locked.error = error[:5000]
        locked.metadata = {**locked.metadata, "stop_status": Experiment.Status.FAILED}
        return ["cancel_requested", "error", "metadata"]

    return _ask_to_end(experiment, stop)


# -- results reported from outside --------------------------------------------------------


@dataclass
class Reported:
    key: str
    output: Any
    scores: dict[str, float]
    cost: Decimal
    latency_ms: int | None
    tokens: int
    error: str
    steps: list | None
    tool_calls: list | None


def results_report(*, experiment: Experiment, results: list[dict]) -> int:
    """Store outputs an outside harness reports for items of an external experiment
    (all or none: any bad entry refuses the whole request, naming it), then score them
    with the experiment's evaluators on a worker. Reporting an item again replaces it
    (a harness may retry). The experiment ends when every item is reported, or with
    ``experiment_complete``."""
    if experiment.kind != Experiment.Kind.EXTERNAL:
        raise InvalidRequest("results are reported only to external experiments; this one runs its agent itself")
    if not isinstance(results, list) or not results:
        raise InvalidRequest("send a non-empty list of results")
    if len(results) > MAX_REPORTED_RESULTS:
        raise InvalidRequest(f"send at most {MAX_REPORTED_RESULTS} results per request")
    parsed = [_parse_reported(index, entry) for index, entry in enumerate(results)]
    keys = [entry.key for entry in parsed]
    if len(set(keys)) != len(keys):
        raise InvalidRequest("an item is reported twice in one request")
    with transaction.atomic():
        experiment = Experiment.objects.select_for_update().get(pk=experiment.pk)
        if experiment.ended:
            raise Conflict(f"the experiment already {experiment.status}; it takes no more results")
        rows = {
            row.item_key: row
            for row in ExperimentResult.objects.select_for_update().filter(experiment=experiment, item_key__in=keys)
        }
        unknown = [key for key in keys if key not in rows]
        if unknown:
            raise InvalidRequest(
                f"not items of this experiment's dataset version: {', '.join(unknown[:10])}",
                details={"unknown": unknown},
            )
        if experiment.status == Experiment.Status.QUEUED:
            experiment.status = Experiment.Status.RUNNING
            experiment.started_at = timezone.now()
            experiment.save(update_fields=["status", "started_at", "updated_at"])
        now = timezone.now()
        to_score = []
        for entry in parsed:
            row = rows[entry.key]
            if row.status in (ExperimentResult.Status.DONE, ExperimentResult.Status.ERROR):
                _uncount(experiment, row)
            row.output = entry.output
            row.cost = entry.cost
            row.latency_ms = entry.latency_ms
            row.tokens = entry.tokens
            row.error = entry.error
            row.reported = {"scores": entry.scores, "steps": entry.steps, "tool_calls": entry.tool_calls}
            row.status = ExperimentResult.Status.SCORING
            row.started_at = row.started_at or now
            row.ended_at = None
            row.updated_at = now
            to_score.append(row)
        ExperimentResult.objects.bulk_update(
            to_score,
            [
                "output",
                "cost",
                "latency_ms",
                "tokens",
                "error",
                "reported",
                "status",
                "started_at",
                "ended_at",
                "updated_at",
            ],
        )
        ids = [row.pk for row in to_score]
        organization_id = experiment.organization_id
        transaction.on_commit(lambda: _enqueue_scoring(organization_id, ids))
    return len(parsed)


def _uncount(experiment: Experiment, result: ExperimentResult) -> None:
    """Take a finished item out of the running totals (it is reported again)."""
    Experiment.objects.filter(pk=experiment.pk).update(
        completed_count=F("completed_count") - 1,
        error_count=F("error_count") - (1 if result.status == ExperimentResult.Status.ERROR else 0),
        total_cost=F("total_cost") - (result.cost or 0),
        total_tokens=F("total_tokens") - (result.tokens or 0),
        total_latency_ms=F("total_latency_ms") - (result.latency_ms or 0),
    )


# The fields of one reported result (docs/evaluations.md).
REPORTED_FIELDS = ("item", "output", "scores", "cost", "latency_ms", "tokens", "error", "steps", "tool_calls")


def _parse_reported(index: int, entry: Any) -> Reported:
    where = f"results[{index}]"
    if not isinstance(entry, dict):
        raise InvalidRequest(f"{where} must be an object")
    if problem := unknown_fields(entry, REPORTED_FIELDS):
        raise InvalidRequest(f"{where}: {problem}")
    key = entry.get("item")
    if not isinstance(key, str) or not key:
        raise InvalidRequest(f"{where}.item must be the item's key (a string)")
    if "output" not in entry and not entry.get("error"):
        raise InvalidRequest(f"{where} needs an output (or an error)")
    scores = entry.get("scores") or {}
    if not isinstance(scores, dict):
        raise InvalidRequest(f"{where}.scores must be an object of metric: score")
    for name, value in scores.items():
        if not isinstance(value, int | float) or isinstance(value, bool) or not 0 <= value <= 1:
            raise InvalidRequest(f"{where}.scores.{name} must be a number from 0 to 1")
        if not isinstance(name, str) or not 0 < len(name) <= 64:
            raise InvalidRequest(f"{where}.scores: metric names are 1 to 64 characters")
        if name in RESERVED_NAMES:
            raise InvalidRequest(f"{where}.scores: {name!r} is the name of an experiment-wide metric")
    try:
        cost = Decimal(str(entry.get("cost", 0) or 0))
    except InvalidOperation as exc:
        raise InvalidRequest(f"{where}.cost must be a number") from exc
    if not cost.is_finite() or not 0 <= cost < MAX_MONEY:
        raise InvalidRequest(f"{where}.cost must be a number from 0 to under {MAX_MONEY:,} (US dollars)")
    latency = entry.get("latency_ms")
    if latency is not None and (
        not isinstance(latency, int) or isinstance(latency, bool) or not 0 <= latency <= MAX_BIGINT
    ):
        raise InvalidRequest(f"{where}.latency_ms must be a whole number of at least 0")
    tokens = entry.get("tokens", 0) or 0
    if not isinstance(tokens, int) or isinstance(tokens, bool) or not 0 <= tokens <= MAX_BIGINT:
        raise InvalidRequest(f"{where}.tokens must be a whole number of at least 0")
    for field in ("output", "error", "steps", "tool_calls", "scores"):
        if problem := storage_problem(entry.get(field)):
            raise InvalidRequest(f"{where}.{field} cannot be stored: {problem}")
    error = entry.get("error") or ""
    if not isinstance(error, str):
        raise InvalidRequest(f"{where}.error must be a string")
    steps, tool_calls = entry.get("steps"), entry.get("tool_calls")
    for field, value in (("steps", steps), ("tool_calls", tool_calls)):
        if value is not None and not isinstance(value, list):
            raise InvalidRequest(f"{where}.{field} must be a list")
    return Reported(key, entry.get("output"), scores, cost, latency, tokens, error[:5000], steps, tool_calls)


def experiment_complete(*, experiment: Experiment, actor, ip: str | None = None) -> Experiment:
    """End an external experiment once the reported items are scored; items never
    reported stay pending and out of the numbers (its ``completion`` says how many)."""
    if experiment.kind != Experiment.Kind.EXTERNAL:
        raise InvalidRequest("only external experiments are completed by their harness")

    def complete(locked):
        locked.metadata = {**locked.metadata, "complete_requested": True}
        return ["metadata"]

    return _ask_to_end(experiment, complete, action="experiment.complete", actor=actor, ip=ip)


def experiment_run_here(*, experiment_id: int, max_rounds: int = 100_000) -> Experiment:
    """Run an executed experiment to its end in this process, as the workers would:
    execute each started run, score its result (which starts the next items). For
    seeding demo data before any worker runs, and for tests."""
    from runs.execution import run_execute

    experiment_advance(experiment_id=experiment_id)
    for _ in range(max_rounds):
        experiment = Experiment.objects.get(pk=experiment_id)
        if experiment.ended:
            return experiment
        results = ExperimentResult.objects.filter(experiment=experiment)
        running = list(
            results.filter(status=ExperimentResult.Status.RUNNING)
            .exclude(run__status__in=Run.ENDED)
            .values_list("run_id", flat=True)
        )
        for run_id in running:
            run_execute(run_id=run_id)
        scoring = list(results.filter(status=ExperimentResult.Status.SCORING).values_list("id", flat=True))
        for result_id in scoring:
            score_result(result_id=result_id)
        if not running and not scoring:
            experiment_advance(experiment_id=experiment_id)
    raise RuntimeError(f"experiment {experiment_id} did not end in {max_rounds} rounds")


# -- recovery -----------------------------------------------------------------------------


def stalled_work() -> tuple[list[tuple[int, int]], list[tuple[int, int]]]:
    """(experiments to advance, results to score again) across organizations: results
    whose run ended but were never queued for scoring (the worker died between the
    two), results stuck in scoring, and running experiments (advancing is idempotent)."""
    from agentops.scoping import dangerously_unscoped

    cutoff = timezone.now() - SCORING_STALL
    with dangerously_unscoped("recovery looks at every organization's experiments"):
        experiments = list(
            Experiment.objects.filter(status__in=(Experiment.Status.QUEUED, Experiment.Status.RUNNING)).values_list(
                "organization_id", "id"
            )
        )
        ended_runs = ExperimentResult.objects.filter(status=ExperimentResult.Status.RUNNING, run__status__in=Run.ENDED)
        stuck = ExperimentResult.objects.filter(status=ExperimentResult.Status.SCORING, updated_at__lt=cutoff)
        results = list(ended_runs.values_list("organization_id", "id")) + list(
            stuck.values_list("organization_id", "id")
        )
    if results:
        ExperimentResult.dangerously_unscoped_objects.filter(id__in=[rid for _, rid in results]).update(
            status=ExperimentResult.Status.SCORING, updated_at=timezone.now()
        )
    return experiments, results
