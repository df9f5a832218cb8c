"""The Kubernetes backend through the real ``kubernetes`` client, pointed at a local
server that speaks the part of the Kubernetes API it uses (tests/jobs/fake_kubernetes.py)."""

from __future__ import annotations

import json

import pytest

from agentops import crypto
from agentops.errors import InvalidRequest
from jobs.backends import backend_for
from jobs.backends.base import BackendError, JobNotFound, JobSpec
from jobs.backends.kubernetes import KubernetesBackend
from jobs.hardware import CATALOG
from jobs.models import ComputeBackend
from tests.jobs.fake_kubernetes import TOKEN, fake_kubernetes  # noqa: F401 - the fixture

SECRET = "sk-very-secret-value-42"
CA_CERT = "-----BEGIN CERTIFICATE-----\nMIIB\n-----END CERTIFICATE-----\n"


def _spec(**overrides) -> JobSpec:
    values = {
        "job_id": 7,
        "name": "fine-tune",
        "image": "ghcr.io/acme/eval:1.2",
        "command": ["python", "-m", "eval", "--fast"],
        "env": {"MODE": "eval", "OPENAI_API_KEY": SECRET},
        "hardware": "a100",
        "time_limit_seconds": 1800,
        "labels": {"agentops-job": "7", "agentops-project": "agent"},
    }
    values.update(overrides)
    return JobSpec(**values)


def _backend(fake, **config) -> KubernetesBackend:
    return KubernetesBackend(config={"host": fake.url, **config}, credentials={"token": TOKEN})


@pytest.fixture
def backend(fake_kubernetes):  # noqa: F811
    return _backend(fake_kubernetes)


def _name(external_id: str) -> str:
    return external_id.split("/")[1]


def test_submit_creates_a_gpu_job_with_its_environment_in_a_secret(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec())

    namespace, name = external_id.split("/")
    assert namespace == "default"
    assert name.startswith("agentops-job-7-") and len(name) <= 63
    [create] = fake_kubernetes.requests_to("POST", r"^/apis/batch/v1/namespaces/default/jobs$")
    assert create["authorization"] == f"Bearer {TOKEN}"
    job = create["body"]
    assert job["metadata"]["labels"] == {"agentops/job": "7", "agentops/project": "agent"}
    assert job["spec"]["backoffLimit"] == 0
    assert job["spec"]["activeDeadlineSeconds"] == 1800
    assert job["spec"]["ttlSecondsAfterFinished"] == 3600
    pod = job["spec"]["template"]["spec"]
    assert pod["restartPolicy"] == "Never"
    assert pod["tolerations"] == [{"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"}]
    [container] = pod["containers"]
    assert container["image"] == "ghcr.io/acme/eval:1.2"
    assert container["command"] == ["python", "-m", "eval", "--fast"]
    assert container["resources"]["limits"] == {"nvidia.com/gpu": "1", "cpu": "12", "memory": "142Gi"}
    assert container["envFrom"] == [{"secretRef": {"name": name}}]
    assert "env" not in container
    # The values live in the Secret only, which the Job owns (deleted with it).
    assert SECRET not in json.dumps(job)
    assert fake_kubernetes.secret_values(name) == {"MODE": "eval", "OPENAI_API_KEY": SECRET}
    [owner] = fake_kubernetes.secrets[("default", name)]["metadata"]["ownerReferences"]
    assert owner == {"apiVersion": "batch/v1", "kind": "Job", "name": name, "uid": job_uid(fake_kubernetes, name)}
    # The Secret first (the pod never waits for it), then the Job, then the ownership.
    assert [(r["method"], r["path"].split("/")[-1]) for r in fake_kubernetes.requests] == [
        ("POST", "secrets"),
        ("POST", "jobs"),
        ("PATCH", name),
    ]


def job_uid(fake, name: str) -> str:
    return fake.jobs[("default", name)]["metadata"]["uid"]


def test_cpu_job_has_no_gpu_limit_nor_toleration_and_no_secret_without_environment(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec(hardware="cpu-basic", env={}))

    pod = fake_kubernetes.only_job()["spec"]["template"]["spec"]
    assert pod["containers"][0]["resources"]["limits"] == {"cpu": "2", "memory": "16Gi"}
    assert "tolerations" not in pod
    assert "envFrom" not in pod["containers"][0]
    assert fake_kubernetes.secrets == {}
    assert backend.status(external_id).state == "pending"


def test_configured_namespace_service_account_and_gpu_nodes(fake_kubernetes):  # noqa: F811
    backend = _backend(
        fake_kubernetes,
        namespace="ml",
        service_account="eval-runner",
        node_selector={"pool": "gpu"},
        gpu_products={"a100": "NVIDIA-A100-SXM4-80GB", "t4": "Tesla-T4"},
    )

    external_id = backend.submit(_spec())

    assert external_id.startswith("ml/")
    pod = fake_kubernetes.only_job()["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "eval-runner"
    assert pod["nodeSelector"] == {"pool": "gpu", "nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"}
    # A GPU type the cluster was not said to have is not offered (the platform refuses a
    # job asking for it, 400), and refused here too, not run on another GPU.
    assert list(backend.hardware_map) == ["cpu-basic", "t4", "a100"]
    with pytest.raises(BackendError, match="h100"):
        backend.submit(_spec(hardware="h100"))


def test_hardware_map_covers_the_catalog_and_unknown_hardware_is_refused(backend, fake_kubernetes):  # noqa: F811
    assert set(KubernetesBackend.hardware_map) == set(CATALOG)
    with pytest.raises(BackendError, match="tpu-v5"):
        backend.submit(_spec(hardware="tpu-v5"))
    with pytest.raises(BackendError, match="image"):
        backend.submit(_spec(image=""))
    with pytest.raises(BackendError, match="variable names"):
        backend.submit(_spec(env={"NOT-A-NAME": "x"}))
    assert fake_kubernetes.requests == []


def test_status_goes_pending_running_succeeded(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec())
    name = _name(external_id)

    pending = backend.status(external_id)
    fake_kubernetes.start(name)
    running = backend.status(external_id)
    fake_kubernetes.finish(name, exit_code=0)
    succeeded = backend.status(external_id)

    assert pending.state == "pending"
    assert running.state == "running"
    assert running.started_at is not None
    assert succeeded.state == "succeeded"
    assert succeeded.exit_code == 0
    assert succeeded.ended_at >= succeeded.started_at
    assert fake_kubernetes.requests_to("GET", rf"/jobs/{name}/status$")
    assert fake_kubernetes.requests_to("GET", r"/pods$")[0]["query"]["labelSelector"] == [f"job-name={name}"]


def test_a_failed_job_gives_the_containers_exit_code(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec())
    fake_kubernetes.start(_name(external_id))
    fake_kubernetes.finish(_name(external_id), exit_code=3)

    status = backend.status(external_id)

    assert status.state == "failed"
    assert status.exit_code == 3
    assert status.message == "the container exited with code 3"


def test_a_job_past_its_time_limit_fails_with_the_jobs_reason(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec())
    fake_kubernetes.start(_name(external_id))
    fake_kubernetes.deadline_exceeded(_name(external_id))

    status = backend.status(external_id)

    assert (status.state, status.exit_code) == ("failed", None)
    assert status.message == "DeadlineExceeded: Job was active longer than specified deadline"
    assert status.ended_at is not None
    assert backend.logs(external_id, {}).lines == []  # The pod is gone.


def test_a_pending_job_says_why(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec())
    fake_kubernetes.unschedulable(_name(external_id), "0/3 nodes are available: 3 Insufficient nvidia.com/gpu.")
    assert backend.status(external_id).message == (
        "Unschedulable 0/3 nodes are available: 3 Insufficient nvidia.com/gpu."
    )
    fake_kubernetes.waiting(_name(external_id), "ImagePullBackOff", "Back-off pulling image")
    status = backend.status(external_id)
    assert (status.state, status.message) == ("pending", "ImagePullBackOff: Back-off pulling image")


def test_logs_come_incrementally_and_never_twice(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec())
    name = _name(external_id)

    before_start = backend.logs(external_id, {})  # The API answers 400 until the container runs.
    fake_kubernetes.start(name)
    fake_kubernetes.write_log(name, "loading model\nstep 1\nstep 2 is hal")
    first = backend.logs(external_id, before_start.cursor)
    again = backend.logs(external_id, first.cursor)
    fake_kubernetes.write_log(name, "f done\nstep 3\n")
    second = backend.logs(external_id, again.cursor)
    fake_kubernetes.write_log(name, "no newline at the end")
    fake_kubernetes.finish(name)
    last = backend.logs(external_id, json.loads(json.dumps(second.cursor)))

    assert before_start.lines == []
    assert first.lines == ["loading model", "step 1"]  # The unfinished line waits.
    assert again.lines == []
    assert second.lines == ["step 2 is half done", "step 3"]
    assert last.lines == ["no newline at the end"]  # The pod ended: the last line is whole.
    assert all(r["query"]["timestamps"] == ["true"] for r in fake_kubernetes.requests_to("GET", r"/log$"))


def test_logs_with_the_same_timestamp_are_told_apart_by_count(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec())
    name = _name(external_id)
    fake_kubernetes.start(name)
    # Go trims trailing zeros: ".5" is later than ".25" though it sorts first as text.
    fake_kubernetes.write_log(name, "a\n", at="2026-01-01T00:00:00.25Z")
    fake_kubernetes.write_log(name, "b\n", at="2026-01-01T00:00:00.5Z")
    first = backend.logs(external_id, {})
    fake_kubernetes.write_log(name, "c\n", at="2026-01-01T00:00:00.5Z")
    fake_kubernetes.write_log(name, "d\n", at="2026-01-01T00:00:01Z")
    second = backend.logs(external_id, first.cursor)

    assert first.lines == ["a", "b"]
    assert second.lines == ["c", "d"]


def test_logs_after_the_log_file_was_rotated_do_not_repeat_or_skip(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec())
    name = _name(external_id)
    fake_kubernetes.start(name)
    fake_kubernetes.write_log(name, "one\ntwo\n")
    first = backend.logs(external_id, {})
    # The kubelet rotated the file: the API now returns only what came after.
    pod_name = fake_kubernetes.pod_of(name)["metadata"]["name"]
    fake_kubernetes.logs[("default", pod_name)] = []
    fake_kubernetes.write_log(name, "three\n")
    second = backend.logs(external_id, first.cursor)

    assert first.lines == ["one", "two"]
    assert second.lines == ["three"]


def test_cancel_deletes_the_job_in_the_background_and_its_secret_and_is_idempotent(backend, fake_kubernetes):  # noqa: F811
    external_id = backend.submit(_spec())
    name = _name(external_id)
    fake_kubernetes.start(name)

    backend.cancel(external_id)
    backend.cancel(external_id)

    assert fake_kubernetes.jobs == {}
    assert fake_kubernetes.secrets == {}
    deletes = fake_kubernetes.requests_to("DELETE", rf"/jobs/{name}$")
    assert len(deletes) == 2
    assert deletes[0]["body"]["propagationPolicy"] == "Background"
    assert fake_kubernetes.requests_to("DELETE", rf"/secrets/{name}$")
    with pytest.raises(JobNotFound):
        backend.status(external_id)


def test_an_unknown_job_is_not_found(backend, fake_kubernetes):  # noqa: F811
    with pytest.raises(JobNotFound):
        backend.status("default/agentops-job-1-nothere")
    assert backend.logs("default/agentops-job-1-nothere", {}).lines == []
    backend.cancel("default/agentops-job-1-nothere")


def test_a_refused_token_is_a_clear_error_without_the_token(fake_kubernetes):  # noqa: F811
    wrong = "wrong-token-abcdef"
    backend = KubernetesBackend(config={"host": fake_kubernetes.url}, credentials={"token": wrong})

    with pytest.raises(BackendError) as caught:
        backend.submit(_spec())

    assert "refused the token" in caught.value.message
    assert wrong not in str(caught.value)
    assert fake_kubernetes.requests[0]["authorization"] == f"Bearer {wrong}"


def test_secrets_never_appear_in_errors_and_a_refused_job_leaves_no_secret(backend, fake_kubernetes, monkeypatch):  # noqa: F811
    def refuse(namespace, body):
        return 422, {
            "kind": "Status",
            "apiVersion": "v1",
            "status": "Failure",
            "reason": "Invalid",
            "code": 422,
            "message": f"the value {SECRET} of OPENAI_API_KEY is invalid",
        }

    monkeypatch.setattr(fake_kubernetes, "create_job", refuse)
    with pytest.raises(BackendError) as caught:
        backend.submit(_spec())

    assert "is invalid" in caught.value.message
    assert SECRET not in str(caught.value)
    assert not caught.value.retryable
    assert fake_kubernetes.secrets == {}
    assert fake_kubernetes.requests_to("DELETE", r"/secrets/agentops-job-7-")


def test_an_api_server_that_cannot_be_reached_is_a_retryable_error():
    backend = KubernetesBackend(config={"host": "http://127.0.0.1:9"}, credentials={"token": TOKEN})
    with pytest.raises(BackendError) as caught:
        backend.status("default/agentops-job-1-abcde")
    assert caught.value.retryable


def test_validate_cleans_good_settings():
    config, credentials = KubernetesBackend.validate(
        {
            "host": "https://127.0.0.1:6443/",
            "namespace": "ml",
            "verify_ssl": False,
            "service_account": "eval-runner",
            "node_selector": {"cloud.google.com/gke-nodepool": "gpu-pool"},
            "gpu_products": {"a100": "NVIDIA-A100-SXM4-80GB"},
        },
        {"token": f" {TOKEN}\n", "ca_cert": CA_CERT},
    )
    assert config == {
        "host": "https://127.0.0.1:6443",
        "namespace": "ml",
        "verify_ssl": False,
        "service_account": "eval-runner",
        "node_selector": {"cloud.google.com/gke-nodepool": "gpu-pool"},
        "gpu_products": {"a100": "NVIDIA-A100-SXM4-80GB"},
    }
    assert credentials == {"token": TOKEN, "ca_cert": CA_CERT}
    assert KubernetesBackend.validate({"host": "http://127.0.0.1:8001"}, {"token": TOKEN})[0] == {
        "host": "http://127.0.0.1:8001",
        "namespace": "default",
        "verify_ssl": True,
    }


@pytest.mark.parametrize(
    ("config", "credentials", "message"),
    [
        ({"host": "https://127.0.0.1:6443"}, {}, "token is required"),
        ({}, {"token": TOKEN}, "host"),
        ({"host": "ftp://127.0.0.1"}, {"token": TOKEN}, "http:// or https://"),
        ({"host": "https://admin:pw@127.0.0.1"}, {"token": TOKEN}, "user name or password"),
        ({"host": "https://127.0.0.1", "namespace": "Not_Valid"}, {"token": TOKEN}, "namespace"),
        ({"host": "https://127.0.0.1", "verify_ssl": "no"}, {"token": TOKEN}, "verify_ssl"),
        ({"host": "https://127.0.0.1", "node_selector": ["gpu"]}, {"token": TOKEN}, "node_selector"),
        ({"host": "https://127.0.0.1", "gpu_products": {"cpu-basic": "x"}}, {"token": TOKEN}, "not GPU types"),
        ({"host": "https://127.0.0.1"}, {"token": TOKEN, "ca_cert": "not a pem"}, "PEM"),
        ({"host": "https://127.0.0.1", "kubeconfig": "~/.kube/config"}, {"token": TOKEN}, "unknown"),
    ],
)
def test_validate_refuses_bad_settings(config, credentials, message):
    with pytest.raises(InvalidRequest, match=message) as caught:
        KubernetesBackend.validate(config, credentials)
    assert TOKEN not in caught.value.message


def test_a_private_api_server_is_refused_when_private_urls_are_not_allowed(settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    with pytest.raises(InvalidRequest, match="private"):
        KubernetesBackend.validate({"host": "https://10.0.0.1:6443"}, {"token": TOKEN})
    backend = KubernetesBackend(config={"host": "https://10.0.0.1:6443"}, credentials={"token": TOKEN})
    with pytest.raises(BackendError, match="not allowed"):
        backend.status("default/agentops-job-1-abcde")


def test_an_api_server_whose_name_rebinds_to_a_private_address_gets_neither_the_token_nor_the_secrets(rebinding):
    """The check before the call sees a public address; the connection, made a moment
    later, would reach 127.0.0.1: it checks the address it connects to, and refuses."""
    backend = KubernetesBackend(config={"host": rebinding.url}, credentials={"token": TOKEN})
    with pytest.raises(BackendError, match="private or reserved"):
        backend.submit(_spec(env={"HF_TOKEN": "hf_secret_value"}))
    assert rebinding.received == []


def test_backend_for_builds_it_from_a_compute_backend_row(fake_kubernetes):  # noqa: F811
    row = ComputeBackend(
        kind=ComputeBackend.Kind.KUBERNETES,
        config={"host": fake_kubernetes.url, "namespace": "ml"},
        credentials_ciphertext=crypto.encrypt(json.dumps({"token": TOKEN})),
    )

    backend = backend_for(row)
    external_id = backend.submit(_spec(hardware="t4"))

    assert isinstance(backend, KubernetesBackend)
    assert external_id.startswith("ml/")
    assert backend.status(external_id).state == "pending"


@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_is_not_followed_with_the_token_or_the_secrets(redirect_trap, status):
    """An API server that redirects elsewhere gets an error back: the token and the
    job's environment never reach the address the redirect names (it was never checked)."""
    redirect_trap.status = status
    backend = KubernetesBackend(config={"host": redirect_trap.url}, credentials={"token": TOKEN})

    with pytest.raises(BackendError, match=f"redirect \\({status}\\)"):
        backend.submit(_spec())
    with pytest.raises(BackendError):
        backend.status("default/agentops-job-7-abcde")

    assert [request["authorization"] for request in redirect_trap.redirected][:1] == [f"Bearer {TOKEN}"]
    assert redirect_trap.elsewhere == []
