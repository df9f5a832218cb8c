"""Jobs demo data: a local backend and a queued demo job, added once, that runs to the
end with the settings `make run` has (as JOBS_LOCAL_USER when run as root)."""

import time

from django.core.management import call_command

from agentops.scoping import organization_scope
from jobs.models import ComputeBackend, Job, JobLogLine
from jobs.services import job_poll


def test_demo_backend_and_job_are_added_once(tenant, capsys, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        call_command("seed_demo_jobs", "acme/agent")
        assert "Added a local compute backend" in capsys.readouterr().out
        call_command("seed_demo_jobs", "acme/agent")
        assert "already has the demo backend" in capsys.readouterr().out
    with organization_scope(tenant.organization):
        backend = ComputeBackend.objects.get()
        job = Job.objects.get()
    assert backend.kind == "local" and job.backend == backend and job.status == "queued"
    assert job.hardware == "cpu-basic" and job.estimated_cost is not None


def test_no_demo_job_when_the_local_backend_is_off(tenant, settings, capsys):
    settings.JOBS_LOCAL_BACKEND = False
    call_command("seed_demo_jobs", "acme/agent")
    assert "turned off" in capsys.readouterr().out
    with organization_scope(tenant.organization):
        assert not Job.objects.exists()


def test_the_demo_job_runs_to_the_end(tenant, django_capture_on_commit_callbacks):
    with django_capture_on_commit_callbacks(execute=False):
        call_command("seed_demo_jobs", "acme/agent")
    with organization_scope(tenant.organization):
        job = Job.objects.get()
        deadline = time.monotonic() + 60
        while not job.ended and time.monotonic() < deadline:
            job_poll(job_id=job.pk)
            job.refresh_from_db()
            time.sleep(0.5)
        lines = list(JobLogLine.objects.filter(job=job).order_by("number").values_list("text", flat=True))
    assert job.status == "succeeded", (job.error, lines)
    assert lines == [f"demo job: step {step}/10" for step in range(1, 11)] + ["demo job: done"]
