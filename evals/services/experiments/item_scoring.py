"""Scoring one item: when its run ends (``on_run_ended``, the receiver of
``runs.signals.run_ended``) or its output is reported (``external``), its result is
marked ``scoring`` and ``score_result`` runs the experiment's evaluators on it, stores
the scores, the cost, tokens and latency, adds it to the running totals (``totals``) and
advances the experiment: the freed slot starts the next item.

Scoring after a run happens on the worker where the run ended when there is one (no hop
through the broker), else on a worker (``evals.tasks.score_result``); what a dead worker
dropped is picked up by recovery. The evaluators run outside any transaction (a judge
may take seconds); the result is then stored only if it is still being scored and was
not reported again meanwhile, so scoring twice is harmless. The platform's evaluator
wins over a reported score of the same name.
"""

from __future__ import annotations

import logging
from decimal import Decimal
from functools import cache

from celery import current_task
from django.db import connection, transaction
from django.utils import timezone

from agentops import rows
from agentops.models import Organization, Project
from agentops.queueing import send_or_leave_to_sweeper
from agentops.scoping import organization_id_for_sql
from evals import live, tasks
from evals.models import DatasetItem, Experiment, ExperimentResult, Score
from evals.scoring import Subject, evaluate, passed, reads_trajectory
from evals.services.experiments.advance import ACTIVE, advance_locked, cancel_after_advance, lock_experiment
from evals.services.experiments.totals import count_finished
from runs.models import Run

logger = logging.getLogger(__name__)


# What score_result reads (any other field would be read when used, one query each): of
# the result, its experiment (its project and organization whole), its item and its run
# (some fifty columns, large JSON among them).
_SCORED = (
    (
        ExperimentResult,
        rows.all_but(
            ExperimentResult,
            *("organization_id", "project_id", "experiment_id", "item_id", "run_id", "status", "updated_at"),
            *("reported", "output", "cost", "tokens", "latency_ms", "error"),
        ),
    ),
    (Experiment, rows.all_but(Experiment, "organization_id", "project_id", "kind", "evaluators")),
    (Project, ()),
    (Organization, ()),
    (DatasetItem, rows.all_but(DatasetItem, "organization_id", "project_id", "input", "expected", "metadata")),
    (
        Run,
        rows.all_but(
            Run,
            *("organization_id", "project_id", "status", "error", "output", "total_cost", "input_tokens"),
            *("output_tokens", "latency_ms"),
        ),
    ),
)


@cache
def _scored_sql() -> str:
    """The result with its experiment, project, organization, item and run (NULL for a
    reported result): one statement, built once (``agentops.rows``)."""
    (result, result_skip), (experiment, experiment_skip), _, _, (item, item_skip), (run, run_skip) = _SCORED
    return f"""
        SELECT {rows.columns(result, "result", result_skip)}, {rows.columns(experiment, "experiment", experiment_skip)},
               {rows.columns(Project, "project")}, {rows.columns(Organization, "organization")},
               {rows.columns(item, "item", item_skip)}, {rows.columns(run, "run", run_skip)}
        FROM {result._meta.db_table} AS result
        JOIN {experiment._meta.db_table} AS experiment ON experiment.id = result.experiment_id
        JOIN {Project._meta.db_table} AS project ON project.id = experiment.project_id
        JOIN {Organization._meta.db_table} AS organization ON organization.id = project.organization_id
        JOIN {item._meta.db_table} AS item ON item.id = result.item_id
        LEFT JOIN {run._meta.db_table} AS run ON run.id = result.run_id
        WHERE result.id = %(result_id)s
          AND (%(organization_id)s::bigint IS NULL OR result.organization_id = %(organization_id)s)
        """  # noqa: S608 - quoted constants


def _scored(result_id: int) -> ExperimentResult | None:
    """The result to score, with what scoring reads of its experiment, item and run."""
    with connection.cursor() as cursor:
        cursor.execute(_scored_sql(), {"result_id": result_id, "organization_id": organization_id_for_sql()})
        row = cursor.fetchone()
    if row is None:
        return None
    result, experiment, project, organization, item, run = rows.instances(row, *_SCORED)
    project.organization = organization
    experiment.project = project
    result.experiment, result.item, result.run = experiment, item, run
    return result


def on_run_ended(sender, run: Run, status: str, **kwargs) -> None:
    """``runs.signals.run_ended`` receiver: the item whose run this is gets scored."""
    organization_id = run.organization_id
    with connection.cursor() as cursor:  # one statement for every run that ends, an item's or not
        cursor.execute(
            "UPDATE evals_experimentresult SET status = %s, updated_at = %s "
            "WHERE organization_id = %s AND run_id = %s AND status = %s RETURNING id",
            [
                ExperimentResult.Status.SCORING,
                timezone.now(),
                organization_id,
                run.pk,
                ExperimentResult.Status.RUNNING,
            ],
        )
        ids = [row[0] for row in cursor.fetchall()]
    if not ids:
        return
    transaction.on_commit(lambda: _score_soon(organization_id, ids))


def _score_soon(organization_id: int, result_ids: list[int]) -> None:
    """Score on this worker right away when the run ended on one (the executor's task:
    no hop through the broker); from anywhere else (a request that cancelled a queued
    run), on a worker. Any failure here leaves the result to the task and to recovery."""
    request = getattr(current_task, "request", None)  # a proxy: no task, no request
    if request is None or not request.id:
        enqueue_scoring(organization_id, result_ids)
        return
    for result_id in result_ids:
        try:
            score_result(result_id=result_id)
        except Exception:  # noqa: BLE001 - the run is stored; scoring is retried on a worker
            logger.exception("result %s: scoring after its run failed; queued again", result_id)
            enqueue_scoring(organization_id, [result_id])


def score_result(*, result_id: int) -> None:
    """Run the experiment's evaluators on one item's output and store the scores, the
    cost and the latency; then advance the experiment. Idempotent: a result already
    done is left alone, and scores are upserted."""
    result = _scored(result_id)
    if result is None or result.status not in ACTIVE:
        return
    seen = result.updated_at  # a newer report while this one is scored starts over
    experiment = result.experiment
    run = result.run
    if experiment.kind == Experiment.Kind.EXECUTED:
        if run is None or run.status not in Run.ENDED:
            return  # not ended yet: its end will bring it back
        subject = Subject.from_run(run, item=result.item, trajectory=reads_trajectory(experiment.evaluators))
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
        (
            spec,
            evaluate(
                spec,
                subject,
                organization=experiment.project.organization,
                project=experiment.project,
                source="experiment",
                experiment_id=experiment.pk,
            ),
        )
        for spec in experiment.evaluators
    ]

    scores: dict[str, float | None] = {spec["name"]: outcome.value for spec, outcome in outcomes}
    reported_scores = {name: value for name, value in reported_scores.items() if name not in scores}
    scores.update(reported_scores)  # the platform's evaluator of a name wins over a reported score
    result.status = ExperimentResult.Status.ERROR if error else ExperimentResult.Status.DONE
    result.cost, result.tokens, result.latency_ms = cost or Decimal(0), tokens or 0, latency
    with transaction.atomic():
        # Stored only if it is still being scored and was not reported again meanwhile
        # (that report's scoring stores it): the UPDATE locks the row and checks both.
        now = timezone.now()
        scores_field = ExperimentResult._meta.get_field("scores")
        with connection.cursor() as cursor:
            cursor.execute(
                "UPDATE evals_experimentresult SET scores = %s, output = %s, cost = %s, tokens = %s, latency_ms = %s, "
                "error = %s, status = %s, ended_at = %s, updated_at = %s "
                "WHERE id = %s AND status = ANY(%s) AND updated_at = %s",
                [
                    scores_field.get_db_prep_save(scores, connection),
                    ExperimentResult._meta.get_field("output").get_db_prep_save(output, connection),
                    result.cost,
                    result.tokens,
                    latency,
                    error,
                    result.status,
                    now,
                    now,
                    result_id,
                    [status.value for status in ACTIVE],
                    seen,
                ],
            )
            if cursor.rowcount != 1:
                return
        rows = []

        def score_row(**fields) -> Score:
            """A score of this item's result and run: an evaluator's, or one reported with it."""
            return Score(
                organization_id=result.organization_id, project_id=result.project_id, run=run, result=result, **fields
            )

        for spec, outcome in outcomes:
            rows.append(
                score_row(
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
            rows.append(score_row(name=name, value=value, passed=None, source=Score.Source.EXTERNAL))
        Score.objects.filter(result=result).delete()
        Score.objects.bulk_create(rows)
        # The experiment's lock, its totals and the next item, in this transaction: the
        # item's end and the start of the next one commit together.
        locked = lock_experiment(experiment.pk)
        count_finished(experiment, result)
        transaction.on_commit(lambda: _announce_result(experiment, result.pk))
        cancel_runs = advance_locked(locked)
    cancel_after_advance(cancel_runs)


def _announce_result(experiment: Experiment, result_id: int) -> None:
    live.announce_result(experiment_id=experiment.pk, result_id=result_id, project_id=experiment.project_id)


def enqueue_scoring(organization_id: int, result_ids: list[int]) -> None:
    """Queue each result's scoring on a worker (``evals.tasks.score_result``). Called
    after the commit that stored the results: while the broker is down the results wait
    in ``scoring`` for ``recover_experiments``, and the request that reported them still
    answers with its 2xx (it answered a 503 for results it had stored)."""
    for result_id in result_ids:
        send_or_leave_to_sweeper(tasks.score_result, organization_id, result_id)
