"""End to end on the local backend: an evaluation job submitted through the API runs
as a real subprocess on the worker's host (the built-in runner), prints its progress,
posts its results with its own token to the running server, and they land as an
experiment on the dataset's leaderboard; the job's time goes to the ledger and its
token stops working. And a job run by a real worker process reads neither that
worker's environment nor DATA_DIR."""

import os
import pwd
import textwrap
import time
from pathlib import Path
from urllib.parse import urlsplit

import pytest
import requests

from agentops.scoping import organization_scope
from billing.models import UsageDaily
from evals import selectors
from jobs.models import Job, JobLogLine
from jobs.services import backend_create, job_submit
from tests.evals.factories import make_dataset, make_evaluator
from tests.worker_process import worker_process


def _wait_for_end(job_id: int, timeout: float = 90) -> Job:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        job = Job.dangerously_unscoped_objects.get(pk=job_id)
        if job.ended:
            return job
        time.sleep(0.2)
    raise AssertionError(f"job {job_id} is still {job.status}")


@pytest.mark.django_db(transaction=True)
def test_an_evaluation_job_runs_locally_and_lands_as_an_experiment(
    live_server, celery_worker, tenant, make_api_key, settings, tmp_path
):
    settings.JOBS_CALLBACK_URL = live_server.url
    tenant.owner.is_staff = True  # only platform staff add a local backend
    tenant.owner.save()
    with organization_scope(tenant.organization):
        backend_create(
            organization=tenant.organization,
            actor=tenant.owner,
            name="lab",
            kind="local",
            config={"work_dir": str(tmp_path)},
        )
    items = [{"key": f"q{i}", "input": f"say {i}", "expected": f"say {i}" if i < 4 else "other"} for i in range(5)]
    dataset = make_dataset(tenant.project, items, name="echo-set")
    make_evaluator(tenant.project, "exact", "exact_match")
    _, raw_key = make_api_key(tenant.project, scopes=("read", "execute"))
    api = requests.Session()
    api.headers["Authorization"] = f"Bearer {raw_key}"
    base = f"{live_server.url}/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}"
    submitted = api.post(
        f"{base}/jobs/",
        json={
            "backend": "lab",
            "hardware": "cpu-basic",
            "time_limit_seconds": 600,
            "evaluation": {"dataset": "echo-set", "evaluators": ["exact"], "model": "echo", "seconds_per_item": 1},
        },
    )
    assert submitted.status_code == 202, submitted.text
    job_id = submitted.json()["id"]
    job = _wait_for_end(job_id)
    assert job.status == "succeeded", (
        job.error,
        list(JobLogLine.dangerously_unscoped_objects.filter(job_id=job_id).values_list("text", flat=True)),
    )
    assert job.exit_code == 0 and job.started_at and job.ended_at

    logs = api.get(f"{base}/jobs/{job_id}/logs/").json()
    assert any("item 5/5" in line["text"] or "q4" in line["text"] for line in logs["lines"]), logs
    detail = api.get(f"{base}/jobs/{job_id}/").json()
    assert [event["status"] for event in detail["events"]] == ["queued", "submitted", "running", "succeeded"]

    with organization_scope(tenant.organization):
        experiment = Job.objects.get(pk=job_id).experiment
        deadline = time.monotonic() + 30
        while not experiment.ended and time.monotonic() < deadline:
            time.sleep(0.2)
            experiment.refresh_from_db()
        assert experiment.status == "succeeded" and experiment.kind == "external"
        assert experiment.summary["metrics"]["exact"]["mean"] == 0.8
        _, rows = selectors.leaderboard(dataset=dataset)
        assert [row.experiment.pk for row in rows] == [experiment.pk]
        ledger = UsageDaily.objects.filter(project=tenant.project, model="gpu:cpu-basic")
        assert ledger.exists() and sum(row.cost for row in ledger) == job.cost

    # A guessed token is refused (the real one's expiry: tests/jobs/test_api.py).
    token_refused = requests.post(
        f"{live_server.url}/api/v1/jobs/{job_id}/results/",
        json={"results": [{"item": "q0", "output": "late"}]},
        headers={"Authorization": f"Bearer aoj_{job_id}_guessed"},
    )
    assert token_refused.status_code == 401


@pytest.mark.skipif(os.geteuid() != 0, reason="starting a job as another user needs root (or CAP_SETUID)")
@pytest.mark.django_db(transaction=True)
def test_a_local_job_reads_neither_the_workers_environment_nor_data_dir(tenant, settings, tmp_path):
    tenant.owner.is_staff = True  # only platform staff add a local backend
    tenant.owner.save()
    data_dir = Path(settings.DATA_DIR)
    script = f"""
        id -u
        read=0
        for f in /proc/[0-9]*/environ; do
            if tr '\\0' '\\n' < "$f" 2>/dev/null; then read=$((read + 1)); fi
        done
        echo "environments read: $read"
        ls -1a {data_dir} {data_dir}/postgres {data_dir}/redis {data_dir}/jobs 2>&1
        cat {data_dir}/redis/server.json {data_dir}/redis/redis.conf 2>&1
        echo "workspace: $(pwd)"; ls -1a . 2>&1
        echo finished
    """
    with worker_process(tmp_path / "worker.log", name="local-jobs") as worker:
        # The worker holds the platform's keys and its servers' addresses, as in production.
        worker_secrets = [settings.SECRET_KEY, *settings.ENCRYPTION_KEYS, urlsplit(settings.REDIS_URL).password]
        worker_environment = Path(f"/proc/{worker.pid}/environ").read_bytes().decode(errors="replace")
        assert all(value and value in worker_environment for value in worker_secrets)
        with organization_scope(tenant.organization):
            backend = backend_create(organization=tenant.organization, actor=tenant.owner, name="box", kind="local")
            job = job_submit(
                project=tenant.project,
                actor=tenant.member,
                backend=backend,
                hardware="cpu-basic",
                command=["/bin/sh", "-c", textwrap.dedent(script)],
                time_limit_seconds=120,
            )
        job = _wait_for_end(job.pk, timeout=60)
    lines = list(JobLogLine.dangerously_unscoped_objects.filter(job_id=job.pk).values_list("text", flat=True))
    log = "\n".join(lines)

    assert job.status == "succeeded" and lines[-1] == "finished", (job.error, lines)
    assert "environments read: 0" not in log  # it read its own, and nothing of the worker's:
    for value in worker_secrets:
        assert value not in log
    assert "SECRET_KEY=" not in log and "ENCRYPTION_KEYS=" not in log and "REDIS_URL=" not in log
    listed = set(lines)
    assert not listed & {"postgres", "redis", "jobs", "pgdata", "server.json", "redis.conf", "dump.rdb"}, log
    assert log.count("Permission denied") >= 6, log  # it tried each one
    assert lines[0] == str(pwd.getpwnam(settings.JOBS_LOCAL_USER).pw_uid) != "0"
    workspace = next(line.removeprefix("workspace: ") for line in lines if line.startswith("workspace: "))
    assert not workspace.startswith(str(data_dir)) and {".", ".."} <= listed  # a folder of its own it may use
