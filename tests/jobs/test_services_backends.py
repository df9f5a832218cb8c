"""Backends configured (jobs/services/backends.py): the local backend turned off for the
installation, and a local job refused when it may not run."""

import os

import pytest

from agentops.errors import InvalidRequest
from agentops.scoping import organization_scope
from jobs import services
from tests.jobs.factories import poll_once, submit_job


def test_the_local_backend_can_be_turned_off_for_the_installation(tenant, backend, scripted, settings):
    settings.JOBS_LOCAL_BACKEND = False
    with pytest.raises(InvalidRequest, match="JOBS_LOCAL_BACKEND=false"):
        submit_job(tenant, backend)
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match="turned off"):
        services.backend_create(organization=tenant.organization, actor=tenant.owner, name="other", kind="local")


@pytest.mark.skipif(os.geteuid() != 0, reason="the refusal is for a worker running as root")
def test_a_local_job_fails_with_the_reason_when_it_may_not_run(tenant, settings, tmp_path):
    with organization_scope(tenant.organization):
        backend = services.backend_create(
            organization=tenant.organization, actor=None, name="box", kind="local", config={"work_dir": str(tmp_path)}
        )
    as_root = submit_job(tenant, backend, hardware="cpu-basic", command=["/usr/bin/id"])
    turned_off = submit_job(tenant, backend, hardware="cpu-basic", command=["/usr/bin/id"])

    settings.JOBS_LOCAL_USER = ""  # a worker running as root, with no user for the jobs
    poll_once(tenant, as_root)
    settings.JOBS_LOCAL_USER, settings.JOBS_LOCAL_BACKEND = "nobody", False  # queued, then turned off
    poll_once(tenant, turned_off)

    assert as_root.status == "failed" and as_root.error.startswith(
        "the backend refused the job: local jobs never run as root: set JOBS_LOCAL_USER"
    )
    assert turned_off.status == "failed" and "the local backend is turned off" in turned_off.error
    assert as_root.cost is None and turned_off.cost is None and not list(tmp_path.iterdir())
