"""Jobs demo data: a local backend and a queued demo job, added once."""

from django.core.management import call_command

from agentops.scoping import organization_scope
from jobs.models import ComputeBackend, Job


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
