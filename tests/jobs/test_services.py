"""Jobs: submitting (validation, estimate, budget), every status transition of the
poller, logs kept in order, GPU samples, cancelling, a lost job, the time limit, and the
job-scoped token. The backend here is scripted (the real backends have their own tests)."""

import os
from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest, PaymentRequired
from agentops.scoping import organization_scope
from billing.budgets import budget_create, utc_today
from billing.models import UsageDaily
from jobs import services
from jobs.backends.base import BackendError, RemoteStatus
from jobs.models import Job, JobEvent, JobLogLine, JobMetric
from jobs.services import job_cancel, job_for_token, job_poll, job_submit, secret_set, token_live
from jobs.services.polling import MAX_FAILED_POLLS
from tests.jobs.helpers import ScriptedBackend, build_backends_with, make_backend


@pytest.fixture
def scripted(monkeypatch):
    ScriptedBackend.reset()
    build_backends_with(
        monkeypatch,
        backend_for=lambda backend: ScriptedBackend(config={}, credentials={}),
        backend_class=lambda kind: ScriptedBackend,
    )
    return ScriptedBackend


@pytest.fixture
def backend(tenant):
    return make_backend(tenant.organization)


def _submit(tenant, backend, **fields):
    fields = {"hardware": "a100", "command": ["python", "train.py"], "time_limit_seconds": 3600, **fields}
    with organization_scope(tenant.organization):
        return job_submit(project=tenant.project, actor=tenant.member, backend=backend, **fields)


def _poll(tenant, job):
    with organization_scope(tenant.organization):
        following = job_poll(job_id=job.pk)
        job.refresh_from_db()
    return following[0] if following else None


def _timeline(tenant, job):
    with organization_scope(tenant.organization):
        return list(JobEvent.objects.filter(job=job).values_list("status", flat=True))


def test_a_job_goes_from_queued_to_succeeded_with_its_logs_and_cost(tenant, backend, scripted):
    scripted.reset(
        states=["pending", "running", "running", RemoteStatus(state="succeeded", exit_code=0)],
        log_batches=[[], ["loading model"], ["item 1/2", "item 2/2"], ["done"]],
    )
    job = _submit(tenant, backend, time_limit_seconds=7200)
    assert job.status == "queued" and job.estimated_cost == Decimal("6.000000000")  # 2 h of a100 at $3.00/h
    assert job.estimate["basis"] == "time_limit"
    assert _poll(tenant, job) == 1.0 and job.status == "submitted" and job.external_id == f"remote-{job.pk}"
    _poll(tenant, job)
    assert job.status == "submitted"  # pending at the backend
    _poll(tenant, job)
    assert job.status == "running" and job.started_at is not None
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=90))
    job.refresh_from_db()
    _poll(tenant, job)
    assert _poll(tenant, job) is None
    assert job.status == "succeeded" and job.exit_code == 0 and job.ended_at is not None
    assert _timeline(tenant, job) == ["queued", "submitted", "running", "succeeded"]
    with organization_scope(tenant.organization):
        lines = list(JobLogLine.objects.filter(job=job).values_list("number", "text"))
        ledger = UsageDaily.objects.filter(project=tenant.project, model="gpu:a100")
        assert sum(row.cost for row in ledger) == job.cost
    assert lines == [(1, "loading model"), (2, "item 1/2"), (3, "item 2/2"), (4, "done")]
    assert Decimal("4.49") < job.cost < Decimal("4.52")  # 90 minutes at $3.00/h
    assert job.price_id is not None


def test_the_spec_carries_env_and_secrets_but_the_job_stores_no_secret(tenant, backend, scripted):
    with organization_scope(tenant.organization):
        secret_set(organization=tenant.organization, actor=tenant.owner, name="HF_TOKEN", value="hf_supersecret_value")
    job = _submit(tenant, backend, env={"BATCH": 8}, secret_names=["HF_TOKEN"])
    _poll(tenant, job)
    (spec,) = [call[1] for call in scripted.all_calls() if call[0] == "submit"]
    assert spec.env == {"BATCH": "8", "HF_TOKEN": "hf_supersecret_value"}
    assert spec.command == ["python", "train.py"] and spec.hardware == "a100"
    with organization_scope(tenant.organization):
        stored = Job.objects.get(pk=job.pk)
    assert "hf_supersecret_value" not in str(stored.env) + str(stored.__dict__)


def test_a_failing_job_keeps_its_exit_code(tenant, backend, scripted):
    scripted.reset(states=[RemoteStatus(state="failed", exit_code=3, message="exit code 3")])
    job = _submit(tenant, backend)
    _poll(tenant, job)
    _poll(tenant, job)
    assert job.status == "failed" and job.exit_code == 3 and job.error == "exit code 3"
    # The backend gave no start time: it never ran (an image that would not pull), so
    # the timeline says no "running" and nothing is charged.
    assert _timeline(tenant, job) == ["queued", "submitted", "failed"]
    assert job.cost is None and job.started_at is None


def test_a_refused_submission_fails_the_job_and_a_flaky_one_is_retried(tenant, backend, scripted):
    scripted.reset(submit_error=BackendError("the cluster is busy", retryable=True))
    job = _submit(tenant, backend)
    assert _poll(tenant, job) == 2.0 and job.status == "queued"
    scripted.script["submit_error"] = BackendError("image not found")
    assert _poll(tenant, job) is None
    assert job.status == "failed" and "image not found" in job.error


def test_cancel_a_queued_job_and_a_running_one(tenant, backend, scripted):
    queued = _submit(tenant, backend)
    with organization_scope(tenant.organization):
        job_cancel(job=queued, actor=tenant.member)
    _poll(tenant, queued)
    assert queued.status == "cancelled" and not [c for c in scripted.all_calls() if c[0] == "submit"]
    running = _submit(tenant, backend)
    _poll(tenant, running)
    _poll(tenant, running)
    assert running.status == "running"
    with organization_scope(tenant.organization):
        job_cancel(job=running, actor=tenant.member)
        with pytest.raises(Conflict):
            _poll(tenant, running)
            job_cancel(job=running, actor=tenant.member)
    assert running.status == "cancelled"
    assert ("cancel", f"remote-{running.pk}") in scripted.all_calls()
    assert _timeline(tenant, running) == ["queued", "submitted", "running", "cancelled"]


def test_a_job_the_backend_forgot_is_lost_after_three_polls(tenant, backend, scripted):
    scripted.reset(states=["running", "missing", "missing", "running", "missing", "missing", "missing"])
    job = _submit(tenant, backend)
    _poll(tenant, job)
    _poll(tenant, job)
    _poll(tenant, job)
    _poll(tenant, job)
    assert job.status == "running"  # two misses, then it answered again
    for _ in range(4):  # answered once more, then three misses in a row
        _poll(tenant, job)
    assert job.status == "lost" and "no longer knows" in job.error


def test_the_time_limit_stops_a_job(tenant, backend, scripted):
    job = _submit(tenant, backend, time_limit_seconds=60)
    _poll(tenant, job)
    _poll(tenant, job)
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=61))
    _poll(tenant, job)
    assert job.status == "failed" and "time limit of 60 s" in job.error
    assert ("cancel", f"remote-{job.pk}") in scripted.all_calls()


def test_polling_backs_off_while_nothing_happens(tenant, backend, scripted):
    job = _submit(tenant, backend)
    _poll(tenant, job)
    intervals = [_poll(tenant, job) for _ in range(12)]
    assert intervals[0] == 1.0  # became running: look again soon
    assert intervals[1] == 1.5 and intervals == sorted(intervals) and intervals[-1] == 30.0
    scripted.script["log_batches"] = [["news"]]
    assert _poll(tenant, job) == 1.0  # a new line: back to watching closely


def test_gpu_samples_are_kept(tenant, backend, scripted):
    sample = {"gpu_index": 0, "utilization_percent": 87.0, "memory_used_mib": 30000, "memory_total_mib": 81920}
    scripted.reset(states=[RemoteStatus(state="running", gpu_samples=[sample])])
    job = _submit(tenant, backend)
    _poll(tenant, job)
    _poll(tenant, job)
    with organization_scope(tenant.organization):
        (metric,) = JobMetric.objects.filter(job=job)
    assert metric.utilization_percent == 87.0 and metric.memory_used_mib == 30000


def test_bad_submissions_are_refused_with_a_reason(tenant, backend, scripted):
    cases = [
        ({"hardware": "tpu"}, "unknown hardware 'tpu'"),
        ({"hardware": "h200"}, "does not offer h200; it offers: cpu-basic, t4, a100"),
        ({"command": []}, "command must be"),
        ({"env": {"1BAD": "x"}}, "not an environment variable name"),
        ({"env": {"AGENTOPS_URL": "x"}}, "set by the platform"),
        ({"secret_names": ["NOPE"]}, "no secret named NOPE"),
        ({"time_limit_seconds": 5}, "time_limit_seconds"),
    ]
    for fields, message in cases:
        with pytest.raises(InvalidRequest, match=message):
            _submit(tenant, backend, **fields)
    with organization_scope(tenant.organization):
        assert not Job.objects.exists()


def test_a_spent_hard_budget_refuses_a_job(tenant, backend, scripted):
    with organization_scope(tenant.organization):
        budget_create(organization=tenant.organization, actor=tenant.owner, name="cap", amount="1", hard_limit=True)
    UsageDaily.dangerously_unscoped_objects.create(
        organization=tenant.organization, project=tenant.project, day=utc_today(), model="m", cost=Decimal("1")
    )
    with pytest.raises(PaymentRequired):
        _submit(tenant, backend)


def test_the_job_token_opens_its_job_only_while_it_runs(tenant, backend, scripted):
    from tests.evals.helpers import make_dataset, make_evaluator

    dataset = make_dataset(tenant.project, [{"key": "a", "input": "x", "expected": "x"}])
    evaluator = make_evaluator(tenant.project, "exact", "exact_match")
    job = _submit(
        tenant,
        backend,
        evaluation={"dataset": dataset, "evaluators": [evaluator], "model": "echo", "seconds_per_item": 30},
    )
    assert job.kind == "evaluation" and job.experiment.kind == "external" and job.experiment.job == job.pk
    assert job.estimate["basis"] == "items" and job.estimated_cost == Decimal("0.025000000")  # 30 s at $3.00/h
    _poll(tenant, job)
    (spec,) = [call[1] for call in scripted.all_calls() if call[0] == "submit"]
    token = spec.env["AGENTOPS_JOB_TOKEN"]
    assert spec.env["AGENTOPS_JOB_ID"] == str(job.pk) and spec.env["AGENTOPS_MODEL"] == "echo"
    found = job_for_token(token)
    assert found.pk == job.pk and token_live(found)
    assert job_for_token(token[:-2] + "xx") is None and job_for_token("ao_not_a_job_token") is None
    with organization_scope(tenant.organization):
        assert job.token_hash and token not in str(Job.objects.get(pk=job.pk).__dict__)
        job_cancel(job=job, actor=tenant.member)
    _poll(tenant, job)
    assert not token_live(job_for_token(token))


def test_the_local_backend_can_be_turned_off_for_the_installation(tenant, backend, scripted, settings):
    settings.JOBS_LOCAL_BACKEND = False
    with pytest.raises(InvalidRequest, match="JOBS_LOCAL_BACKEND=false"):
        _submit(tenant, backend)
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="turned off"):
        services.backend_create(organization=tenant.organization, actor=tenant.owner, name="other", kind="local")


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is for a worker running as root")
def test_a_local_job_fails_with_the_reason_when_it_may_not_run(tenant, settings, tmp_path):
    with organization_scope(tenant.organization):
        backend = services.backend_create(
            organization=tenant.organization, actor=None, name="box", kind="local", config={"work_dir": str(tmp_path)}
        )
    as_root = _submit(tenant, backend, hardware="cpu-basic", command=["/usr/bin/id"])
    turned_off = _submit(tenant, backend, hardware="cpu-basic", command=["/usr/bin/id"])

    settings.JOBS_LOCAL_USER = ""  # a worker running as root, with no user for the jobs
    _poll(tenant, as_root)
    settings.JOBS_LOCAL_USER, settings.JOBS_LOCAL_BACKEND = "nobody", False  # queued, then turned off
    _poll(tenant, turned_off)

    assert as_root.status == "failed" and as_root.error.startswith(
        "the backend refused the job: local jobs never run as root: set JOBS_LOCAL_USER"
    )
    assert turned_off.status == "failed" and "the local backend is turned off" in turned_off.error
    assert as_root.cost is None and turned_off.cost is None and not list(tmp_path.iterdir())


def test_a_job_whose_poll_was_lost_is_found_by_the_sweeper(tenant, backend, scripted):
    job = _submit(tenant, backend)
    _poll(tenant, job)  # submitted; the next look is due in a second
    # As if the worker holding the next poll died: the message is gone, the row remains.
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(next_poll_at=timezone.now() - timedelta(seconds=60))
    assert (tenant.organization.pk, job.pk) in services.due_job_ids(overdue_seconds=20)
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(next_poll_at=timezone.now())
    assert (tenant.organization.pk, job.pk) not in services.due_job_ids(overdue_seconds=20)
    _poll(tenant, job)
    assert job.status == "running"  # a new worker simply carries on from the stored state


def test_a_job_that_ran_between_two_polls_still_shows_running(tenant, backend, scripted):
    started = timezone.now().timestamp() - 30
    scripted.reset(states=[RemoteStatus(state="succeeded", exit_code=0, started_at=started, ended_at=started + 20)])
    job = _submit(tenant, backend)
    _poll(tenant, job)
    _poll(tenant, job)
    assert _timeline(tenant, job) == ["queued", "submitted", "running", "succeeded"]
    assert job.cost is not None and 19 < (job.ended_at - job.started_at).total_seconds() < 21


def test_a_cancel_the_backend_refuses_is_tried_again(tenant, backend, scripted, monkeypatch):
    job = _submit(tenant, backend)
    _poll(tenant, job)
    refusals = iter([BackendError("busy"), BackendError("busy"), None])

    def cancel(self, external_id):
        error = next(refusals)
        if error:
            raise error

    monkeypatch.setattr(ScriptedBackend, "cancel", cancel)
    with organization_scope(tenant.organization):
        job_cancel(job=job, actor=tenant.member)
        job_cancel(job=job, actor=tenant.member)  # a second click: no second request
    assert _poll(tenant, job) == 2.0 and job.status == "submitted"
    assert _poll(tenant, job) == 4.0 and job.status == "submitted"
    assert _poll(tenant, job) is None and job.status == "cancelled"


def test_a_backend_that_keeps_breaking_fails_the_job_in_the_end(tenant, backend, scripted, monkeypatch):
    job = _submit(tenant, backend)
    _poll(tenant, job)

    def broken(self, external_id):
        raise KeyError("a bug in a client library")

    monkeypatch.setattr(ScriptedBackend, "status", broken)
    for _ in range(MAX_FAILED_POLLS - 1):
        assert _poll(tenant, job) is not None
    assert _poll(tenant, job) is None
    assert job.status == "failed" and "failed 8 times in a row: KeyError" in job.error


def test_output_the_database_cannot_store_is_cleaned_not_fatal(tenant, backend, scripted):
    scripted.reset(states=["running"], log_batches=[["a\x00b", "fine"]])
    job = _submit(tenant, backend)
    _poll(tenant, job)
    _poll(tenant, job)
    with organization_scope(tenant.organization):
        assert list(JobLogLine.objects.filter(job=job).values_list("text", flat=True)) == ["ab", "fine"]
    with pytest.raises(InvalidRequest, match="NUL"):
        _submit(tenant, backend, command=["echo", "a\x00b"])
    with pytest.raises(InvalidRequest, match="NUL"):
        _submit(tenant, backend, env={"A": "x\x00"})


def test_a_stale_poll_chain_stops_when_a_newer_one_took_over(tenant, backend, scripted):
    job = _submit(tenant, backend)
    with organization_scope(tenant.organization):
        _, first_token = job_poll(job_id=job.pk)
        _, second_token = job_poll(job_id=job.pk)  # a forced poll (cancel, sweeper): a new chain
        assert job_poll(job_id=job.pk, token=first_token) is None  # the old chain stops
        assert job_poll(job_id=job.pk, token=second_token) is not None


def test_a_job_the_backend_never_starts_fails_at_its_time_limit(tenant, backend, scripted):
    scripted.reset(states=["pending"])
    job = _submit(tenant, backend, time_limit_seconds=60)
    _poll(tenant, job)
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(seconds=61))
    _poll(tenant, job)
    assert job.status == "failed" and "before the backend started it" in job.error and job.cost is None
