"""The poller (jobs/services/polling.py): every status transition, logs kept in order, GPU
samples, cancelling, a lost job, the time limit, backing off, the sweeper and stale poll
chains. The backend here is scripted (the real backends have their own tests)."""

from datetime import timedelta
from decimal import Decimal

import pytest
from django.utils import timezone

from agentops.errors import Conflict, InvalidRequest
from agentops.scoping import organization_scope
from billing.models import UsageDaily
from jobs import services
from jobs.backends.base import BackendError, RemoteStatus
from jobs.models import Job, JobLogLine, JobMetric
from jobs.services import job_cancel, job_poll, secret_set
from jobs.services.polling import MAX_FAILED_POLLS
from tests.jobs.factories import ScriptedBackend, poll_once, submit_job, timeline


def test_a_job_goes_from_queued_to_succeeded_with_its_logs_and_cost(tenant, backend, scripted):
    scripted.reset(
        states=["pending", "running", "running", RemoteStatus(state="succeeded", exit_code=0)],
        log_batches=[[], ["loading model"], ["item 1/2", "item 2/2"], ["done"]],
    )
    job = submit_job(tenant, backend, time_limit_seconds=7200)
    assert job.status == "queued" and job.estimated_cost == Decimal("6.000000000")  # 2 h of a100 at $3.00/h
    assert job.estimate["basis"] == "time_limit"
    assert poll_once(tenant, job) == 1.0 and job.status == "submitted" and job.external_id == f"remote-{job.pk}"
    poll_once(tenant, job)
    assert job.status == "submitted"  # pending at the backend
    poll_once(tenant, job)
    assert job.status == "running" and job.started_at is not None
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(minutes=90))
    job.refresh_from_db()
    poll_once(tenant, job)
    assert poll_once(tenant, job) is None
    assert job.status == "succeeded" and job.exit_code == 0 and job.ended_at is not None
    assert timeline(tenant, job) == ["queued", "submitted", "running", "succeeded"]
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
    job = submit_job(tenant, backend, env={"BATCH": 8}, secret_names=["HF_TOKEN"])
    poll_once(tenant, job)
    (spec,) = [call[1] for call in scripted.all_calls() if call[0] == "submit"]
    assert spec.env == {"BATCH": "8", "HF_TOKEN": "hf_supersecret_value"}
    assert spec.command == ["python", "train.py"] and spec.hardware == "a100"
    with organization_scope(tenant.organization):
        stored = Job.objects.get(pk=job.pk)
    assert "hf_supersecret_value" not in str(stored.env) + str(stored.__dict__)


def test_a_failing_job_keeps_its_exit_code(tenant, backend, scripted):
    scripted.reset(states=[RemoteStatus(state="failed", exit_code=3, message="exit code 3")])
    job = submit_job(tenant, backend)
    poll_once(tenant, job)
    poll_once(tenant, job)
    assert job.status == "failed" and job.exit_code == 3 and job.error == "exit code 3"
    # The backend gave no start time: it never ran (an image that would not pull), so
    # the timeline says no "running" and nothing is charged.
    assert timeline(tenant, job) == ["queued", "submitted", "failed"]
    assert job.cost is None and job.started_at is None


def test_a_refused_submission_fails_the_job_and_a_flaky_one_is_retried(tenant, backend, scripted):
    scripted.reset(submit_error=BackendError("the cluster is busy", retryable=True))
    job = submit_job(tenant, backend)
    assert poll_once(tenant, job) == 2.0 and job.status == "queued"
    scripted.script["submit_error"] = BackendError("image not found")
    assert poll_once(tenant, job) is None
    assert job.status == "failed" and "image not found" in job.error


def test_cancel_a_queued_job_and_a_running_one(tenant, backend, scripted):
    queued = submit_job(tenant, backend)
    with organization_scope(tenant.organization):
        job_cancel(job=queued, actor=tenant.member)
    poll_once(tenant, queued)
    assert queued.status == "cancelled" and not [c for c in scripted.all_calls() if c[0] == "submit"]
    running = submit_job(tenant, backend)
    poll_once(tenant, running)
    poll_once(tenant, running)
    assert running.status == "running"
    with organization_scope(tenant.organization):
        job_cancel(job=running, actor=tenant.member)
        with pytest.raises(Conflict):
            poll_once(tenant, running)
            job_cancel(job=running, actor=tenant.member)
    assert running.status == "cancelled"
    assert ("cancel", f"remote-{running.pk}") in scripted.all_calls()
    assert timeline(tenant, running) == ["queued", "submitted", "running", "cancelled"]


def test_a_job_the_backend_forgot_is_lost_after_three_polls(tenant, backend, scripted):
    scripted.reset(states=["running", "missing", "missing", "running", "missing", "missing", "missing"])
    job = submit_job(tenant, backend)
    poll_once(tenant, job)
    poll_once(tenant, job)
    poll_once(tenant, job)
    poll_once(tenant, job)
    assert job.status == "running"  # two misses, then it answered again
    for _ in range(4):  # answered once more, then three misses in a row
        poll_once(tenant, job)
    assert job.status == "lost" and "no longer knows" in job.error


def test_the_time_limit_stops_a_job(tenant, backend, scripted):
    job = submit_job(tenant, backend, time_limit_seconds=60)
    poll_once(tenant, job)
    poll_once(tenant, job)
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(started_at=timezone.now() - timedelta(seconds=61))
    poll_once(tenant, job)
    assert job.status == "failed" and "time limit of 60 s" in job.error
    assert ("cancel", f"remote-{job.pk}") in scripted.all_calls()


def test_polling_backs_off_while_nothing_happens(tenant, backend, scripted):
    job = submit_job(tenant, backend)
    poll_once(tenant, job)
    intervals = [poll_once(tenant, job) for _ in range(12)]
    assert intervals[0] == 1.0  # became running: look again soon
    assert intervals[1] == 1.5 and intervals == sorted(intervals) and intervals[-1] == 30.0
    scripted.script["log_batches"] = [["news"]]
    assert poll_once(tenant, job) == 1.0  # a new line: back to watching closely


def test_gpu_samples_are_kept(tenant, backend, scripted):
    sample = {"gpu_index": 0, "utilization_percent": 87.0, "memory_used_mib": 30000, "memory_total_mib": 81920}
    scripted.reset(states=[RemoteStatus(state="running", gpu_samples=[sample])])
    job = submit_job(tenant, backend)
    poll_once(tenant, job)
    poll_once(tenant, job)
    with organization_scope(tenant.organization):
        (metric,) = JobMetric.objects.filter(job=job)
    assert metric.utilization_percent == 87.0 and metric.memory_used_mib == 30000


def test_a_job_whose_poll_was_lost_is_found_by_the_sweeper(tenant, backend, scripted):
    job = submit_job(tenant, backend)
    poll_once(tenant, job)  # submitted; the next look is due in a second
    # As if the worker holding the next poll died: the message is gone, the row remains.
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(next_poll_at=timezone.now() - timedelta(seconds=60))
    assert (tenant.organization.pk, job.pk) in services.due_job_ids(overdue_seconds=20)
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(next_poll_at=timezone.now())
    assert (tenant.organization.pk, job.pk) not in services.due_job_ids(overdue_seconds=20)
    poll_once(tenant, job)
    assert job.status == "running"  # a new worker simply carries on from the stored state


def test_a_job_that_ran_between_two_polls_still_shows_running(tenant, backend, scripted):
    started = timezone.now().timestamp() - 30
    scripted.reset(states=[RemoteStatus(state="succeeded", exit_code=0, started_at=started, ended_at=started + 20)])
    job = submit_job(tenant, backend)
    poll_once(tenant, job)
    poll_once(tenant, job)
    assert timeline(tenant, job) == ["queued", "submitted", "running", "succeeded"]
    assert job.cost is not None and 19 < (job.ended_at - job.started_at).total_seconds() < 21


def test_a_cancel_the_backend_refuses_is_tried_again(tenant, backend, scripted, monkeypatch):
    job = submit_job(tenant, backend)
    poll_once(tenant, job)
    refusals = iter([BackendError("busy"), BackendError("busy"), None])

    def cancel(self, external_id):
        error = next(refusals)
        if error:
            raise error

    monkeypatch.setattr(ScriptedBackend, "cancel", cancel)
    with organization_scope(tenant.organization):
        job_cancel(job=job, actor=tenant.member)
        job_cancel(job=job, actor=tenant.member)  # a second click: no second request
    assert poll_once(tenant, job) == 2.0 and job.status == "submitted"
    assert poll_once(tenant, job) == 4.0 and job.status == "submitted"
    assert poll_once(tenant, job) is None and job.status == "cancelled"


def test_a_backend_that_keeps_breaking_fails_the_job_in_the_end(tenant, backend, scripted, monkeypatch):
    job = submit_job(tenant, backend)
    poll_once(tenant, job)

    def broken(self, external_id):
        raise KeyError("a bug in a client library")

    monkeypatch.setattr(ScriptedBackend, "status", broken)
    for _ in range(MAX_FAILED_POLLS - 1):
        assert poll_once(tenant, job) is not None
    assert poll_once(tenant, job) is None
    assert job.status == "failed" and "failed 8 times in a row: KeyError" in job.error


def test_output_the_database_cannot_store_is_cleaned_not_fatal(tenant, backend, scripted):
    scripted.reset(states=["running"], log_batches=[["a\x00b", "fine"]])
    job = submit_job(tenant, backend)
    poll_once(tenant, job)
    poll_once(tenant, job)
    with organization_scope(tenant.organization):
        assert list(JobLogLine.objects.filter(job=job).values_list("text", flat=True)) == ["ab", "fine"]
    with pytest.raises(InvalidRequest, match="NUL"):
        submit_job(tenant, backend, command=["echo", "a\x00b"])
    with pytest.raises(InvalidRequest, match="NUL"):
        submit_job(tenant, backend, env={"A": "x\x00"})


def test_a_stale_poll_chain_stops_when_a_newer_one_took_over(tenant, backend, scripted):
    job = submit_job(tenant, backend)
    with organization_scope(tenant.organization):
        _, first_token = job_poll(job_id=job.pk)
        _, second_token = job_poll(job_id=job.pk)  # a forced poll (cancel, sweeper): a new chain
        assert job_poll(job_id=job.pk, token=first_token) is None  # the old chain stops
        assert job_poll(job_id=job.pk, token=second_token) is not None


def test_a_job_the_backend_never_starts_fails_at_its_time_limit(tenant, backend, scripted):
    scripted.reset(states=["pending"])
    job = submit_job(tenant, backend, time_limit_seconds=60)
    poll_once(tenant, job)
    Job.dangerously_unscoped_objects.filter(pk=job.pk).update(submitted_at=timezone.now() - timedelta(seconds=61))
    poll_once(tenant, job)
    assert job.status == "failed" and "before the backend started it" in job.error and job.cost is None
