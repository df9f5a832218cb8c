"""The Hugging Face Jobs backend through the real ``huggingface_hub`` client, pointed at
a local server that speaks the Jobs API (tests/jobs/fake_hf_jobs.py)."""

from __future__ import annotations

import json
import time

import pytest

from agentops import crypto
from agentops.errors import InvalidRequest
from jobs.backends import backend_for
from jobs.backends.base import BackendError, JobNotFound, JobSpec
from jobs.backends.hf_jobs import HfJobsBackend
from jobs.hardware import CATALOG
from jobs.models import ComputeBackend
from tests.jobs.fake_hf_jobs import TOKEN, USER, fake_hf_jobs  # noqa: F401 - the fixture

SECRET = "sk-very-secret-value-42"


def _spec(**overrides) -> JobSpec:
    values = {
        "job_id": 7,
        "name": "fine-tune",
        "image": "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime",
        "command": ["python", "-c", "print('hi')"],
        "env": {"MODE": "eval", "OPENAI_API_KEY": SECRET},
        "hardware": "a10g",
        "time_limit_seconds": 1800,
        "labels": {"agentops-job": "7", "agentops-project": "agent"},
    }
    values.update(overrides)
    return JobSpec(**values)


@pytest.fixture
def backend(fake_hf_jobs):  # noqa: F811
    return HfJobsBackend(config={"namespace": "acme", "endpoint": fake_hf_jobs.url}, credentials={"token": TOKEN})


def test_submit_sends_image_command_flavor_timeout_and_the_environment_as_secrets(backend, fake_hf_jobs):  # noqa: F811
    external_id = backend.submit(_spec())

    job = fake_hf_jobs.only_job()
    assert external_id == f"acme/{job.id}"
    [request] = fake_hf_jobs.requests_to("POST", "/api/jobs/acme")
    assert request["authorization"] == f"Bearer {TOKEN}"
    body = request["body"]
    assert body["dockerImage"] == "pytorch/pytorch:2.6.0-cuda12.4-cudnn9-runtime"
    assert body["command"] == ["python", "-c", "print('hi')"]
    assert body["flavor"] == "a10g-small"
    assert body["timeoutSeconds"] == 1800
    # Plain variables and secrets arrive merged: all go as secrets, none in plain sight.
    assert body["secrets"] == {"MODE": "eval", "OPENAI_API_KEY": SECRET}
    assert body["environment"] == {}
    assert body["labels"]["agentops-job"] == "7"
    # The namespace was configured: nobody asked who the token is.
    assert not fake_hf_jobs.requests_to("GET", "/api/whoami-v2")


@pytest.mark.parametrize(
    ("hardware", "flavor"),
    [("cpu-basic", "cpu-basic"), ("t4", "t4-small"), ("l4", "l4x1"), ("a100", "a100-large"), ("h200", "h200")],
)
def test_each_supported_hardware_becomes_its_flavor(backend, fake_hf_jobs, hardware, flavor):  # noqa: F811
    backend.submit(_spec(hardware=hardware))
    assert fake_hf_jobs.requests_to("POST", "/api/jobs/acme")[0]["body"]["flavor"] == flavor


def test_hardware_map_names_only_catalog_hardware_and_flavors_the_client_knows():
    from huggingface_hub import JobHardware

    assert set(HfJobsBackend.hardware_map) <= set(CATALOG)
    assert set(HfJobsBackend.hardware_map.values()) <= {flavor.value for flavor in JobHardware}


def test_unsupported_hardware_and_a_missing_image_are_refused_before_any_call(backend, fake_hf_jobs):  # noqa: F811
    with pytest.raises(BackendError, match="h100"):
        backend.submit(_spec(hardware="h100"))
    with pytest.raises(BackendError, match="image"):
        backend.submit(_spec(image=""))
    assert fake_hf_jobs.requests == []


def test_without_a_namespace_the_tokens_user_is_asked_once_and_kept_in_the_id(fake_hf_jobs):  # noqa: F811
    backend = HfJobsBackend(config={"endpoint": fake_hf_jobs.url}, credentials={"token": TOKEN})

    external_id = backend.submit(_spec())
    backend.status(external_id)
    backend.logs(external_id, {})

    assert external_id.startswith(f"{USER}/")
    assert len(fake_hf_jobs.requests_to("GET", "/api/whoami-v2")) == 1


def test_status_goes_pending_running_succeeded(backend, fake_hf_jobs):  # noqa: F811
    fake_hf_jobs.script("SCHEDULING", "RUNNING", "COMPLETED")
    external_id = backend.submit(_spec())

    first, second, third = (backend.status(external_id) for _ in range(3))

    assert first.state == "pending"
    assert first.started_at is None
    assert second.state == "running"
    assert second.started_at is not None
    assert third.state == "succeeded"
    assert third.exit_code == 0
    assert third.ended_at >= third.started_at


def test_a_failed_job_gives_its_message_and_the_exit_code_it_states(backend, fake_hf_jobs):  # noqa: F811
    external_id = backend.submit(_spec())
    job_id = external_id.split("/")[1]
    fake_hf_jobs.set_stage(job_id, "RUNNING")
    fake_hf_jobs.set_stage(job_id, "ERROR", "Job failed with exit code: 3")

    status = backend.status(external_id)

    assert status.state == "failed"
    assert status.exit_code == 3
    assert status.message == "Job failed with exit code: 3"


@pytest.mark.parametrize("stage", ["CANCELED", "DELETED"])
def test_cancelled_and_deleted_jobs_are_cancelled(backend, fake_hf_jobs, stage):  # noqa: F811
    external_id = backend.submit(_spec())
    fake_hf_jobs.set_stage(external_id.split("/")[1], stage)
    assert backend.status(external_id).state == "cancelled"


def test_a_running_job_reports_its_gpu_use(backend, fake_hf_jobs):  # noqa: F811
    external_id = backend.submit(_spec())
    job_id = external_id.split("/")[1]
    fake_hf_jobs.jobs[job_id].gpus = {
        "882fa930": {"utilization": 87, "memory_used_bytes": 2 * 1048576, "memory_total_bytes": 24 * 1048576}
    }
    fake_hf_jobs.set_stage(job_id, "RUNNING")

    status = backend.status(external_id)

    assert status.gpu_samples == [
        {"gpu_index": 0, "utilization_percent": 87, "memory_used_mib": 2.0, "memory_total_mib": 24.0}
    ]


def test_logs_come_incrementally_and_never_twice(backend, fake_hf_jobs):  # noqa: F811
    external_id = backend.submit(_spec())
    job_id = external_id.split("/")[1]
    fake_hf_jobs.set_stage(job_id, "RUNNING")

    empty = backend.logs(external_id, {})
    fake_hf_jobs.add_logs(job_id, "loading model", "step 1")
    first = backend.logs(external_id, empty.cursor)
    again = backend.logs(external_id, first.cursor)
    fake_hf_jobs.add_logs(job_id, "step 2", "")
    fake_hf_jobs.set_stage(job_id, "COMPLETED")
    second = backend.logs(external_id, again.cursor)

    assert empty.lines == []
    # The "===== Job started" banner is the client's to drop.
    assert first.lines == ["loading model", "step 1"]
    assert again.lines == []
    assert second.lines == ["step 2", ""]
    assert json.loads(json.dumps(second.cursor)) == second.cursor
    # Every read replayed the whole log from the first line: the cursor skipped it.
    assert len(fake_hf_jobs.requests_to("GET", "/logs")) == 4


def test_logs_of_a_running_job_do_not_wait_for_lines_written_after_the_read_began(backend, fake_hf_jobs):  # noqa: F811
    external_id = backend.submit(_spec())
    job_id = external_id.split("/")[1]
    fake_hf_jobs.set_stage(job_id, "RUNNING")
    fake_hf_jobs.add_logs(job_id, "one")
    # The Hub keeps a running job's stream open and sends new lines as they come.
    fake_hf_jobs.hold_open = 60
    fake_hf_jobs.late_lines, fake_hf_jobs.late_delay = ["two"], 2.2

    started = time.monotonic()
    first = backend.logs(external_id, {})
    elapsed = time.monotonic() - started
    fake_hf_jobs.hold_open = 0
    second = backend.logs(external_id, first.cursor)

    assert first.lines == ["one"]
    assert elapsed < 45  # returned with what came, long before the stream's 60 s end
    assert second.lines == ["two"]


def test_logs_of_a_silent_running_job_return_after_a_short_wait(backend, fake_hf_jobs):  # noqa: F811
    external_id = backend.submit(_spec())
    job_id = external_id.split("/")[1]
    fake_hf_jobs.set_stage(job_id, "RUNNING")
    fake_hf_jobs.add_logs(job_id, "one")
    fake_hf_jobs.hold_open = 60

    started = time.monotonic()
    chunk = backend.logs(external_id, {})

    assert chunk.lines == ["one"]
    # huggingface_hub stops after 5 s without a line, long before the stream's 60 s end.
    assert time.monotonic() - started < 45


def test_cancel_stops_the_job_and_is_idempotent(backend, fake_hf_jobs):  # noqa: F811
    external_id = backend.submit(_spec())
    job_id = external_id.split("/")[1]
    fake_hf_jobs.set_stage(job_id, "RUNNING")

    backend.cancel(external_id)
    backend.cancel(external_id)  # The fake refuses to cancel an ended job: still fine.
    backend.cancel("acme/000000000000000000000000")  # Unknown: nothing to stop.

    assert fake_hf_jobs.jobs[job_id].stage == "CANCELED"
    assert len(fake_hf_jobs.requests_to("POST", f"/{job_id}/cancel")) == 2
    assert backend.status(external_id).state == "cancelled"


def test_an_unknown_job_is_not_found(backend, fake_hf_jobs):  # noqa: F811
    with pytest.raises(JobNotFound):
        backend.status("acme/000000000000000000000000")
    with pytest.raises(JobNotFound):
        backend.logs("acme/000000000000000000000000", {})


def test_a_refused_token_is_a_clear_error_without_the_token(fake_hf_jobs):  # noqa: F811
    wrong = "hf_wrong_token_abcdef"
    backend = HfJobsBackend(config={"namespace": "acme", "endpoint": fake_hf_jobs.url}, credentials={"token": wrong})

    with pytest.raises(BackendError) as caught:
        backend.submit(_spec())

    assert "refused the token" in caught.value.message
    assert wrong not in str(caught.value)
    assert fake_hf_jobs.requests[0]["authorization"] == f"Bearer {wrong}"


def test_secrets_never_appear_in_a_backend_error(backend, fake_hf_jobs):  # noqa: F811
    fake_hf_jobs.fail_next_create = (400, {"error": f"secret OPENAI_API_KEY={SECRET} is too long"})

    with pytest.raises(BackendError) as caught:
        backend.submit(_spec())

    assert "too long" in caught.value.message
    assert SECRET not in caught.value.message
    assert SECRET not in str(caught.value)
    assert not caught.value.retryable


def test_a_hub_that_cannot_be_reached_is_a_retryable_error():
    backend = HfJobsBackend(
        config={"namespace": "acme", "endpoint": "http://127.0.0.1:9"}, credentials={"token": TOKEN}
    )
    with pytest.raises(BackendError) as caught:
        backend.submit(_spec())
    assert caught.value.retryable


def test_validate_cleans_good_settings():
    config, credentials = HfJobsBackend.validate(
        {"namespace": "acme-org", "endpoint": "http://127.0.0.1:8000/"}, {"token": f" {TOKEN} "}
    )
    assert config == {"namespace": "acme-org", "endpoint": "http://127.0.0.1:8000"}
    assert credentials == {"token": TOKEN}
    assert HfJobsBackend.validate({}, {"token": TOKEN}) == ({}, {"token": TOKEN})


@pytest.mark.parametrize(
    ("config", "credentials", "message"),
    [
        ({}, {}, "token is required"),
        ({}, {"token": "  "}, "token is required"),
        ({"endpoint": "ftp://huggingface.co"}, {"token": TOKEN}, "http:// or https://"),
        ({"endpoint": "not a url"}, {"token": TOKEN}, "http:// or https://"),
        ({"endpoint": "https://user:pw@huggingface.co"}, {"token": TOKEN}, "user name or password"),
        ({"namespace": "../etc"}, {"token": TOKEN}, "namespace"),
        ({"flavour": "a100"}, {"token": TOKEN}, "unknown"),
    ],
)
def test_validate_refuses_bad_settings(config, credentials, message):
    with pytest.raises(InvalidRequest, match=message) as caught:
        HfJobsBackend.validate(config, credentials)
    assert TOKEN not in caught.value.message


def test_a_private_endpoint_is_refused_when_private_urls_are_not_allowed(settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    with pytest.raises(InvalidRequest, match="private"):
        HfJobsBackend.validate({"endpoint": "http://127.0.0.1:8000"}, {"token": TOKEN})
    backend = HfJobsBackend(config={"endpoint": "http://127.0.0.1:8000"}, credentials={"token": TOKEN})
    with pytest.raises(BackendError, match="not allowed"):
        backend.status("acme/123")


def test_no_token_means_no_call_rather_than_a_token_found_on_the_worker(fake_hf_jobs):  # noqa: F811
    backend = HfJobsBackend(config={"namespace": "acme", "endpoint": fake_hf_jobs.url}, credentials={})
    with pytest.raises(BackendError, match="no token"):
        backend.status("acme/123")
    assert fake_hf_jobs.requests == []


def test_backend_for_builds_it_from_a_compute_backend_row(fake_hf_jobs):  # noqa: F811
    row = ComputeBackend(
        kind=ComputeBackend.Kind.HF_JOBS,
        config={"namespace": "acme", "endpoint": fake_hf_jobs.url},
        credentials_ciphertext=crypto.encrypt(json.dumps({"token": TOKEN})),
    )

    backend = backend_for(row)
    external_id = backend.submit(_spec(env={}))

    assert isinstance(backend, HfJobsBackend)
    assert backend.status(external_id).state == "pending"


@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_is_not_followed_with_the_token_or_the_secrets(redirect_trap, status):
    """A Hub endpoint that redirects elsewhere gets an error back: the token and the job's
    secrets never reach the address the redirect names (it was never checked)."""
    redirect_trap.status = status
    backend = HfJobsBackend(config={"namespace": "acme", "endpoint": redirect_trap.url}, credentials={"token": TOKEN})

    with pytest.raises(BackendError, match=f"redirect \\({status}\\)"):
        backend.submit(_spec())
    with pytest.raises(BackendError, match="redirect"):
        backend.status("acme/job-1")
    without_namespace = HfJobsBackend(config={"endpoint": redirect_trap.url}, credentials={"token": TOKEN})
    with pytest.raises(BackendError, match="redirect"):
        without_namespace.status("job-1")  # asks whoami first

    assert [request["authorization"] for request in redirect_trap.redirected] == [f"Bearer {TOKEN}"] * 3
    assert redirect_trap.elsewhere == []
