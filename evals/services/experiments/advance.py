"""Moving an experiment forward: ``experiment_advance``, one idempotent step, called
when it starts, after each item is scored, when it is asked to end, and by recovery.

Under a lock on the experiment the step
- starts pending items of an executed experiment on the runs executor until
  ``concurrency`` items are in flight (running or being scored): each becomes an
  executed run tagged ``experiment:<id>``, whose end brings its result to scoring
  (``item_scoring``);
- waits, for an external experiment, until every item is reported and scored (or its
  harness completed it);
- starts nothing once the experiment is asked to end (``ending``), and cancels its
  running runs after the lock (their results are scored as usual).
With nothing left in flight it ends the experiment: the summary (``summary``), the
status (failed when every finished item failed); once committed, the live pages are told
and ``evals.tasks.experiment_ended`` runs what follows an end (the exports).

A scoring advances in its own transaction (``lock_experiment``, ``advance_locked``,
``cancel_after_advance``): the item's end and the start of the next one commit together.
"""

from __future__ import annotations

from functools import cache

from django.db import connection, transaction
from django.utils import timezone

from agentops import rows
from agentops.errors import Conflict
from agentops.models import Organization, Project
from agentops.scoping import organization_id_for_sql
from evals import live, tasks
from evals.models import DatasetItem, Experiment, ExperimentResult
from evals.services.experiments.summary import summarize
from evals.services.experiments.totals import count_finished
from runs.execution import create_executed_run, run_cancel, version_spec
from runs.models import Agent, AgentVersion, Run

# A result in flight: its run is running, or its output is being scored.
ACTIVE = (ExperimentResult.Status.RUNNING, ExperimentResult.Status.SCORING)


def experiment_advance(*, experiment_id: int) -> None:
    """Start as many pending items as the concurrency allows, finish a cancelled
    experiment, or finalize one with nothing left. Safe to call any number of times."""
    with transaction.atomic():
        cancel_runs = advance_locked(lock_experiment(experiment_id))
    cancel_after_advance(cancel_runs)


@cache
def _lock_sql() -> str:
    """The experiment locked, with its project and organization, its agent version and
    agent (NULL when deleted): one statement, built once (``agentops.rows``)."""
    return f"""
        SELECT {rows.columns(Experiment, "experiment")}, {rows.columns(Project, "project")},
               {rows.columns(Organization, "organization")}, {rows.columns(AgentVersion, "version")},
               {rows.columns(Agent, "agent")}
        FROM {Experiment._meta.db_table} AS experiment
        JOIN {Project._meta.db_table} AS project ON project.id = experiment.project_id
        JOIN {Organization._meta.db_table} AS organization ON organization.id = project.organization_id
        LEFT JOIN {AgentVersion._meta.db_table} AS version ON version.id = experiment.agent_version_id
        LEFT JOIN {Agent._meta.db_table} AS agent ON agent.id = version.agent_id
        WHERE experiment.id = %(experiment_id)s
          AND (%(organization_id)s::bigint IS NULL OR experiment.organization_id = %(organization_id)s)
        FOR UPDATE OF experiment
        """  # noqa: S608 - quoted constants


def lock_experiment(experiment_id: int) -> Experiment | None:
    """The experiment, locked until the caller's transaction ends, with what advancing it
    reads: its project and organization, its agent version and agent."""
    with connection.cursor() as cursor:
        cursor.execute(_lock_sql(), {"experiment_id": experiment_id, "organization_id": organization_id_for_sql()})
        row = cursor.fetchone()
    if row is None:
        return None
    experiment, project, organization, version, agent = rows.instances(
        row, (Experiment, ()), (Project, ()), (Organization, ()), (AgentVersion, ()), (Agent, ())
    )
    project.organization = organization
    experiment.project = project
    if version is not None:
        version.agent = agent
    experiment.agent_version = version
    return experiment


@cache
def _pending_sql() -> str:
    """The first pending results (with their items) that the free slots can start: as
    many as the concurrency less the results in flight (counted in the same statement)."""
    results, items = ExperimentResult._meta.db_table, DatasetItem._meta.db_table
    in_flight = (
        f"(SELECT count(*) FROM {results} WHERE organization_id = %(organization_id)s "  # noqa: S608 - constants
        "AND experiment_id = %(experiment_id)s AND status = ANY(%(active)s))"
    )
    return f"""
        SELECT {in_flight}, {rows.columns(ExperimentResult, "result")}, {rows.columns(DatasetItem, "item")}
        FROM {results} AS result JOIN {items} AS item ON item.id = result.item_id
        WHERE result.organization_id = %(organization_id)s AND result.experiment_id = %(experiment_id)s
          AND result.status = %(pending)s
        ORDER BY result.id
        LIMIT GREATEST(%(concurrency)s - {in_flight}, 0)
        """  # noqa: S608 - quoted constants


def _startable(experiment: Experiment) -> tuple[int, list[ExperimentResult]]:
    """(results in flight, the pending results the free slots can start, first first)."""
    with connection.cursor() as cursor:
        cursor.execute(
            _pending_sql(),
            {
                "organization_id": experiment.organization_id,
                "experiment_id": experiment.pk,
                "active": [status.value for status in ACTIVE],
                "pending": ExperimentResult.Status.PENDING.value,
                "concurrency": experiment.concurrency,
            },
        )
        found = cursor.fetchall()
    if not found:  # no slot free, or nothing pending: count what is in flight
        return ExperimentResult.objects.filter(experiment=experiment, status__in=ACTIVE).count(), []
    pending = []
    for row in found:
        result, item = rows.instances(row[1:], (ExperimentResult, ()), (DatasetItem, ()))
        result.item = item
        pending.append(result)
    return found[0][0], pending


def advance_locked(experiment: Experiment | None) -> list[int]:
    """``experiment_advance`` inside the caller's transaction, which holds the experiment's
    lock (``lock_experiment``); returns the runs to cancel once it commits
    (``cancel_after_advance``)."""
    cancel_runs: list[int] = []
    if experiment is None or experiment.ended:
        return cancel_runs
    if experiment.status == Experiment.Status.QUEUED:
        experiment.status = Experiment.Status.RUNNING
        experiment.started_at = timezone.now()
        experiment.save(update_fields=["status", "started_at", "updated_at"])
    results = ExperimentResult.objects.filter(experiment=experiment)
    if experiment.cancel_requested:
        cancel_runs = list(
            results.filter(status=ExperimentResult.Status.RUNNING, run__isnull=False).values_list("run_id", flat=True)
        )
        if not results.filter(status__in=ACTIVE).exists():
            _finalize(experiment, status=experiment.metadata.get("stop_status", Experiment.Status.CANCELLED))
    elif experiment.kind == Experiment.Kind.EXECUTED:
        active, pending = _startable(experiment)
        if experiment.concurrency - active > 0:
            for result in pending:
                _start_item(experiment, result)
            if pending:
                started = [result.pk for result in pending]
                transaction.on_commit(lambda: _announce_started(experiment, started))
            if not pending and active == 0:
                _finalize(experiment)
    else:  # external: ends when every item is reported and scored, or when its harness says so
        waiting_for = (
            ACTIVE if experiment.metadata.get("complete_requested") else (ExperimentResult.Status.PENDING, *ACTIVE)
        )
        if not results.filter(status__in=waiting_for).exists():
            _finalize(experiment)
    return cancel_runs


def cancel_after_advance(run_ids: list[int]) -> None:
    """Cancel the running runs of an experiment asked to end (after the lock: their
    results are scored as usual)."""
    for run_id in run_ids:
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
        count_finished(experiment, result)
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
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE evals_experimentresult SET run_id = %s, status = %s, started_at = %s, updated_at = %s "
            "WHERE id = %s",
            [run.pk, result.status, result.started_at, result.updated_at, result.pk],
        )


def _announce_started(experiment: Experiment, result_ids: list[int]) -> None:
    live.announce_started(experiment_id=experiment.pk, result_ids=result_ids, project_id=experiment.project_id)


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
    live.announce_ended(experiment_id=experiment_id)
    tasks.experiment_ended.delay(Experiment.objects.get(pk=experiment_id).organization_id, experiment_id)
