"""What an evaluation job reaches with its token, and where its results land.

An evaluation job is handed a job-scoped token when it is submitted (``new_token``,
called by ``polling``): stored hashed, it opens only the job's two results endpoints
(``jobs.auth``: ``job_for_token``, ``token_live``) and stops working when the job ends
(or at its time limit plus an hour). Through it the job reads what to evaluate
(``job_items``) and reports its results (``job_results``) into the external experiment
submission started for it; when the job ends, ``close_experiment`` completes that
experiment (or stops it as failed, keeping what was reported).
"""

from __future__ import annotations

import hashlib
import re
import secrets
from datetime import timedelta

from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest
from agentops.scoping import dangerously_unscoped
from evals.models import ExperimentResult
from evals.services.experiments import experiment_complete, experiment_stop, results_report
from jobs.models import Job

TOKEN_PREFIX = "aoj_"


def _token_hash(raw: str) -> str:
    return hashlib.sha256(raw.encode()).hexdigest()


def new_token(job: Job) -> str:
    """A token for this job's results endpoints only; stored hashed, valid until the
    job ends (and at most its time limit plus an hour)."""
    raw = f"{TOKEN_PREFIX}{job.pk}_{secrets.token_urlsafe(32)}"
    job.token_hash = _token_hash(raw)
    job.token_expires_at = timezone.now() + timedelta(seconds=job.time_limit_seconds) + timedelta(hours=1)
    return raw


def job_for_token(raw: str) -> Job | None:
    """The job a token belongs to, if it is a live job token; None otherwise."""
    match = re.fullmatch(rf"{TOKEN_PREFIX}(\d+)_[A-Za-z0-9_-]+", raw or "")
    if not match:
        return None
    with dangerously_unscoped("a job token names its organization only through its job"):
        job = Job.objects.select_related("project__organization", "experiment").filter(pk=int(match[1])).first()
    if job is None or not job.token_hash or not secrets.compare_digest(job.token_hash, _token_hash(raw)):
        return None
    return job


def token_live(job: Job) -> bool:
    return not job.ended and job.token_expires_at is not None and job.token_expires_at > timezone.now()


def close_experiment(job_id: int) -> None:
    """An evaluation job ended: its experiment ends with what it reported (a job that
    did not succeed ends it as failed, keeping the results it had sent)."""
    job = Job.objects.select_related("experiment").get(pk=job_id)
    experiment = job.experiment
    if experiment is None or experiment.ended:
        return
    try:
        if job.status == Job.Status.SUCCEEDED:
            experiment_complete(experiment=experiment, actor=None)
        else:
            experiment_stop(experiment=experiment, error=f"the job {job.status}: {job.error}"[:2000])
    except Conflict:
        pass


def job_results(*, job: Job, results: list[dict]) -> int:
    """Results an evaluation job reports (through its token): into its experiment."""
    if job.experiment is None:
        raise InvalidRequest("this job is not an evaluation job")
    return results_report(experiment=job.experiment, results=results)


def job_items(*, job: Job) -> dict:
    """What an evaluation job evaluates: its experiment's items and evaluators."""
    if job.experiment is None:
        raise InvalidRequest("this job is not an evaluation job")
    rows = ExperimentResult.objects.filter(experiment=job.experiment).select_related("item").order_by("id")
    return {
        "experiment": job.experiment_id,
        "evaluators": [spec["name"] for spec in job.experiment.evaluators],
        "items": [
            {"key": row.item_key, "input": row.item.input, "expected": row.item.expected, "metadata": row.item.metadata}
            for row in rows
        ],
    }
