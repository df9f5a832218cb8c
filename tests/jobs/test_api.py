"""The jobs API: submit (202, Idempotency-Key, estimate, 402), read, logs, cancel; the
hardware catalog; backends and secrets for admins only, never showing credentials; the
job token's two endpoints; roles and tenant isolation of every endpoint."""

import uuid
from decimal import Decimal

import pytest

from agentops.scoping import organization_scope
from jobs import services
from jobs.backends import backend_class, backend_for
from jobs.models import ComputeBackend, Job, JobSecret
from jobs.services import job_poll
from tests.evals.factories import make_dataset, make_evaluator
from tests.isolation import CreateIsolation, DeleteIsolation, ListIsolation, ReadIsolation, UpdateIsolation
from tests.jobs.factories import (
    ScriptedBackend,
    build_backends_with,
    fake_nvidia_smi,
    make_backend,
    make_job,
    make_job_secret,
)


@pytest.fixture(autouse=True)
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
    return make_backend(tenant.organization, name="gpu-box")


def _url(tenant, suffix=""):
    return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/{suffix}"


def _poll(tenant, job_id):
    with organization_scope(tenant.organization):
        job_poll(job_id=job_id)


def test_submit_follow_logs_and_cancel(tenant, backend, key_client, scripted):
    client = key_client(tenant.project)
    body = {
        "backend": "gpu-box",
        "hardware": "a100",
        "command": "python train.py --epochs 1",
        "time_limit_seconds": 1800,
    }
    key = str(uuid.uuid4())
    first = client.post(_url(tenant, "jobs/"), body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    again = client.post(_url(tenant, "jobs/"), body, format="json", HTTP_IDEMPOTENCY_KEY=key)
    assert first.status_code == 202 and again.json()["id"] == first.json()["id"]
    job = first.json()
    assert job["status"] == "queued" and job["command"] == ["python", "train.py", "--epochs", "1"]
    assert job["estimated_cost"] == "1.500000000" and job["estimate"]["basis"] == "time_limit"
    assert job["events"][0]["status"] == "queued" and job["url"].endswith(f"/jobs/{job['id']}/")
    scripted.reset(states=["running"], log_batches=[["line one", "line two"], ["line three"]])
    _poll(tenant, job["id"])
    _poll(tenant, job["id"])
    _poll(tenant, job["id"])
    logs = client.get(_url(tenant, f"jobs/{job['id']}/logs/")).json()
    assert [line["text"] for line in logs["lines"]] == ["line one", "line two", "line three"]
    assert logs["next_after"] == 3 and logs["ended"] is False
    assert client.get(_url(tenant, f"jobs/{job['id']}/logs/?after=2")).json()["lines"][0]["number"] == 3
    detail = client.get(_url(tenant, f"jobs/{job['id']}/")).json()
    assert detail["status"] == "running" and detail["log_line_count"] == 3
    cancelled = client.post(_url(tenant, f"jobs/{job['id']}/cancel/"))
    assert cancelled.status_code == 202
    _poll(tenant, job["id"])
    assert client.get(_url(tenant, f"jobs/{job['id']}/")).json()["status"] == "cancelled"
    assert client.post(_url(tenant, f"jobs/{job['id']}/cancel/")).status_code == 409
    assert [j["id"] for j in client.get(_url(tenant, "jobs/?status=cancelled")).json()["results"]] == [job["id"]]


def test_estimate_before_submitting(tenant, backend, client_for):
    client = client_for(tenant.viewer)  # reading an estimate is open to viewers
    body = {"backend": backend.pk, "hardware": "t4", "command": ["x"], "time_limit_seconds": 7200}
    answer = client.post(_url(tenant, "jobs/estimate/"), body, format="json").json()
    assert answer["amount"] == "0.700000000" and Decimal(answer["hourly"]) == Decimal("0.35")  # 2 h of t4
    hardware = {row["name"]: row for row in client.get(_url(tenant, "hardware/")).json()["hardware"]}
    assert list(hardware) == ["cpu-basic", "t4", "l4", "a10g", "a100", "h100", "h200"]
    assert Decimal(hardware["a100"]["hourly_by_backend"]["gpu-box"]) == Decimal("3.00")
    with organization_scope(tenant.organization):
        assert not Job.objects.exists()


def test_a_local_backend_offers_only_the_hardware_its_host_has(tenant, client_for, monkeypatch, tmp_path):
    # the real local backend, not the scripted one
    build_backends_with(monkeypatch, backend_for=backend_for, backend_class=backend_class)
    smi = fake_nvidia_smi(tmp_path, "NVIDIA A100-SXM4-80GB, 81920\n")
    with organization_scope(tenant.organization):
        services.backend_create(
            organization=tenant.organization, actor=None, name="box", kind="local", config={"nvidia_smi": str(smi)}
        )
    client = client_for(tenant.member)
    body = {"backend": "box", "command": ["/bin/sleep", "12"], "time_limit_seconds": 600}

    refused = client.post(_url(tenant, "jobs/"), {**body, "hardware": "h200"}, format="json")
    estimate = client.post(_url(tenant, "jobs/estimate/"), {**body, "hardware": "h200"}, format="json").json()
    offered = client.post(_url(tenant, "jobs/estimate/"), {**body, "hardware": "a100"}, format="json").json()
    hardware = {row["name"]: row for row in client.get(_url(tenant, "hardware/")).json()["hardware"]}

    assert refused.status_code == 400
    assert refused.json()["error"]["message"] == "backend 'box' (local) does not offer h200; it offers: cpu-basic, a100"
    assert estimate["amount"] is None and estimate["basis"] == "not_offered"
    assert "does not offer h200; it offers: cpu-basic, a100" in estimate["note"]
    assert offered["amount"] is not None and offered["offered_hardware"] == ["cpu-basic", "a100"]
    assert hardware["a100"]["offered_by"] == ["box"] and hardware["h200"]["offered_by"] == []
    assert hardware["h200"]["hourly_by_backend"] == {}
    with organization_scope(tenant.organization):
        assert not Job.objects.exists()


def test_bad_submissions_answer_clearly(tenant, backend, client_for):
    client = client_for(tenant.member)
    cases = [
        ({"backend": "nope", "hardware": "a100", "command": ["x"]}, 404, "no backend 'nope'"),
        ({"backend": "gpu-box", "hardware": "tpu", "command": ["x"]}, 400, "unknown hardware"),
        ({"backend": "gpu-box", "hardware": "a100"}, 400, "command"),
        (
            {"backend": "gpu-box", "hardware": "a100", "command": ["x"], "env": {"A B": "1"}},
            400,
            "environment variable",
        ),
        ({"backend": "gpu-box", "hardware": "a100", "command": ["x"], "time_limit_seconds": 10**9}, 400, "time_limit"),
        (
            {
                "backend": "gpu-box",
                "hardware": "a100",
                "evaluation": {"dataset": "none", "evaluators": ["e"], "model": "m"},
            },
            404,
            "no dataset 'none'",
        ),
    ]
    for body, status, message in cases:
        response = client.post(_url(tenant, "jobs/"), body, format="json")
        assert response.status_code == status, (body, response.content)
        assert message in response.json()["error"]["message"], response.json()


def test_viewers_read_members_submit(tenant, backend, client_for):
    body = {"backend": "gpu-box", "hardware": "a100", "command": ["x"]}
    assert client_for(tenant.viewer).post(_url(tenant, "jobs/"), body, format="json").status_code == 403
    job = client_for(tenant.member).post(_url(tenant, "jobs/"), body, format="json").json()
    assert client_for(tenant.viewer).get(_url(tenant, f"jobs/{job['id']}/")).status_code == 200
    assert client_for(tenant.viewer).post(_url(tenant, f"jobs/{job['id']}/cancel/")).status_code == 403


def test_backends_and_secrets_are_for_admins_and_never_shown(tenant, client_for):
    base = f"/api/v1/organizations/{tenant.organization.slug}/"
    admin = client_for(tenant.admin)
    created = admin.post(
        base + "compute-backends/",
        {
            "name": "lab",
            "kind": "hf_jobs",
            "config": {"namespace": "acme"},
            "credentials": {"token": "very-secret-token"},
        },
        format="json",
    )
    assert created.status_code == 201, created.content
    assert "very-secret-token" not in created.content.decode() and created.json()["credentials_hint"] == "token"
    with organization_scope(tenant.organization):
        stored = ComputeBackend.objects.get(name="lab")
    assert "very-secret-token" not in stored.credentials_ciphertext
    assert admin.post(base + "compute-backends/", {"name": "lab", "kind": "ray"}, format="json").status_code == 409
    assert client_for(tenant.member).get(base + "compute-backends/").status_code == 403
    saved = admin.post(base + "job-secrets/", {"name": "HF_TOKEN", "value": "hf_0123456789abcdef"}, format="json")
    assert saved.status_code == 201 and "hf_0123456789" not in saved.content.decode()
    assert admin.get(base + "job-secrets/").json() == [
        {"name": "HF_TOKEN", "hint": "cdef", "updated_at": saved.json()["updated_at"]}
    ]
    assert (
        client_for(tenant.member).post(base + "job-secrets/", {"name": "X", "value": "y"}, format="json").status_code
        == 403
    )
    assert admin.delete(base + "job-secrets/HF_TOKEN/").status_code == 204


def test_only_platform_staff_add_or_change_a_local_backend(tenant, client_for, settings):
    base = f"/api/v1/organizations/{tenant.organization.slug}/compute-backends/"
    body = {"name": "box", "kind": "local", "config": {}}
    refused = client_for(tenant.owner).post(base, body, format="json")
    assert refused.status_code == 403
    assert "only platform staff may add or change a local backend" in refused.json()["error"]["message"]
    tenant.owner.is_staff = True
    tenant.owner.save()
    created = client_for(tenant.owner).post(base, body, format="json")
    assert created.status_code == 201, created.content
    local = f"{base}{created.json()['id']}/"
    admin = client_for(tenant.admin)
    changed = admin.patch(local, {"config": {"work_dir": "/srv/jobs"}}, format="json")
    assert changed.status_code == 403 and "platform staff" in changed.json()["error"]["message"]
    assert admin.patch(local, {"enabled": False}, format="json").json()["enabled"] is False  # turning it off is fine
    assert admin.patch(local, {"enabled": True}, format="json").status_code == 403
    settings.JOBS_LOCAL_BACKEND = False
    off = client_for(tenant.owner).post(base, {**body, "name": "other"}, format="json")
    assert off.status_code == 400 and "JOBS_LOCAL_BACKEND=false" in off.json()["error"]["message"]
    with organization_scope(tenant.organization):
        assert list(ComputeBackend.objects.values_list("name", "config", "enabled")) == [("box", {}, False)]


def test_the_job_token_endpoints(tenant, backend, client_for, api_client, scripted, make_api_key):
    make_dataset(
        tenant.project, [{"key": "a", "input": "hi", "expected": "hi"}, {"key": "b", "input": "yo", "expected": "no"}]
    )
    make_evaluator(tenant.project, "exact", "exact_match")
    body = {
        "backend": "gpu-box",
        "hardware": "a100",
        "evaluation": {"dataset": "qa", "evaluators": ["exact"], "model": "echo", "seconds_per_item": 60},
    }
    job = client_for(tenant.member).post(_url(tenant, "jobs/"), body, format="json").json()
    assert job["kind"] == "evaluation" and job["estimate"]["basis"] == "items"
    assert job["estimated_cost"] == "0.100000000"  # 2 items × 60 s at $3.00/h
    _poll(tenant, job["id"])
    token = next(call[1] for call in scripted.all_calls() if call[0] == "submit").env["AGENTOPS_JOB_TOKEN"]
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    items = api_client.get(f"/api/v1/jobs/{job['id']}/items/").json()
    assert [item["key"] for item in items["items"]] == ["a", "b"] and items["evaluators"] == ["exact"]
    posted = api_client.post(
        f"/api/v1/jobs/{job['id']}/results/", {"results": [{"item": "a", "output": "hi"}]}, format="json"
    )
    assert posted.status_code == 202 and posted.json() == {"accepted": 1}
    # Not another job's endpoints, not the project's API, not an API key here.
    other = client_for(tenant.member).post(_url(tenant, "jobs/"), body, format="json").json()
    assert api_client.get(f"/api/v1/jobs/{other['id']}/items/").status_code == 404
    assert api_client.get(_url(tenant, "jobs/")).status_code == 401
    _, raw_key = make_api_key(tenant.project)
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw_key}")
    assert api_client.get(f"/api/v1/jobs/{job['id']}/items/").status_code == 401
    # After the job ends the token is refused.
    scripted.reset(states=["succeeded"])
    _poll(tenant, job["id"])
    api_client.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    refused = api_client.post(f"/api/v1/jobs/{job['id']}/results/", {"results": []}, format="json")
    assert refused.status_code == 401 and "expired" in refused.json()["error"]["message"]


# -- tenant isolation: the shared checks (tests/isolation.py) -------------------------------------


def _org_url(tenant, suffix=""):
    return f"/api/v1/organizations/{tenant.organization.slug}/{suffix}"


class TestJobIsolation(ReadIsolation, ListIsolation, CreateIsolation):
    create_body = {"backend": "gpu-box", "hardware": "a100", "command": ["x"]}

    @pytest.fixture(autouse=True)
    def backends(self, tenant, other_tenant):
        return {t.organization.pk: make_backend(t.organization, name="gpu-box") for t in (tenant, other_tenant)}

    def make_object(self, tenant):
        backend = ComputeBackend.dangerously_unscoped_objects.get(organization=tenant.organization, name="gpu-box")
        return make_job(tenant.project, backend)

    def detail_url(self, url_tenant, job):
        return _url(url_tenant, f"jobs/{job.pk}/")

    def list_url(self, tenant):
        return _url(tenant, "jobs/")

    def created_organization_id(self, response):
        return Job.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id

    def test_other_organizations_job_cannot_be_followed_or_cancelled(self, caller, tenant, other_tenant):
        foreign = self.make_object(other_tenant)
        for url_tenant in (tenant, other_tenant):
            for method, suffix in (("get", "logs/"), ("post", "cancel/")):
                response = getattr(caller, method)(f"{self.detail_url(url_tenant, foreign)}{suffix}")
                assert response.status_code == 404, (suffix, response.content)
        with organization_scope(other_tenant.organization):
            assert Job.objects.get(pk=foreign.pk).cancel_requested is False

    def test_other_organizations_estimate_and_hardware_are_not_found(self, caller, other_tenant):
        assert caller.post(_url(other_tenant, "jobs/estimate/"), self.create_body, format="json").status_code == 404
        assert caller.get(_url(other_tenant, "hardware/")).status_code == 404

    def test_other_organizations_backend_cannot_take_a_submission(self, caller, tenant, other_tenant, backends):
        foreign_backend = backends[other_tenant.organization.pk]
        body = {**self.create_body, "backend": foreign_backend.pk}
        assert caller.post(_url(tenant, "jobs/"), body, format="json").status_code == 404
        assert not Job.dangerously_unscoped_objects.filter(backend=foreign_backend).exists()


class TestJobIsolationWithApiKey(TestJobIsolation):
    as_key = True


class TestComputeBackendIsolation(ReadIsolation, UpdateIsolation, ListIsolation, CreateIsolation):
    update_body = {"enabled": False}
    create_body = {"name": "lab", "kind": "ray"}  # not local: only platform staff add those

    def make_object(self, tenant):
        return make_backend(tenant.organization, name="gpu-box")

    def detail_url(self, url_tenant, backend):
        return _org_url(url_tenant, f"compute-backends/{backend.pk}/")

    def list_url(self, tenant):
        return _org_url(tenant, "compute-backends/")

    def created_organization_id(self, response):
        return ComputeBackend.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id


class TestJobSecretIsolation(DeleteIsolation, ListIsolation, CreateIsolation):
    create_body = {"name": "HF_TOKEN", "value": "hf_0123456789abcdef"}

    def make_object(self, tenant):
        return make_job_secret(tenant.organization, name=f"TOKEN_{tenant.organization.slug.upper()}")

    def detail_url(self, url_tenant, secret):
        return _org_url(url_tenant, f"job-secrets/{secret.name}/")

    def list_url(self, tenant):
        return _org_url(tenant, "job-secrets/")

    def list_ids(self, response) -> set:
        return {item["name"] for item in response.json()}

    def list_id(self, secret):
        return secret.name

    def created_organization_id(self, response):
        (secret,) = JobSecret.dangerously_unscoped_objects.filter(name=response.json()["name"])
        return secret.organization_id


# -- a stored credential stays with its destination ----------------------------------------------


@pytest.fixture
def real_backends(monkeypatch):
    """The real backend classes (their validate and credential destination)."""
    from jobs.backends import backend_class

    build_backends_with(monkeypatch, backend_class=backend_class)


MOVES = [
    # kind, saved config, credentials, a change that moves the credential, the setting named
    (
        "kubernetes",
        {"host": "https://k8s.acme.example", "namespace": "ml"},
        {"token": "k8s-stored-token"},
        {"host": "https://k8s.evil.example", "namespace": "ml"},
        "changing host",
    ),
    (
        "kubernetes",
        {"host": "https://k8s.acme.example", "namespace": "ml"},
        {"token": "k8s-stored-token"},
        {"host": "https://k8s.acme.example", "namespace": "ml", "verify_ssl": False},
        "turning off verify_ssl",
    ),
    (
        "hf_jobs",
        {"namespace": "acme"},
        {"token": "hf_stored_token"},
        {"namespace": "acme", "endpoint": "https://hub.evil.example"},
        "changing endpoint",
    ),
    (
        "ray",
        {"address": "https://ray.acme.example:8265"},
        {"headers": {"Authorization": "Bearer ray-stored-token"}},
        {"address": "https://ray.evil.example:8265"},
        "changing address",
    ),
]


@pytest.mark.parametrize(("kind", "config", "credentials", "moved", "setting"), MOVES)
def test_moving_a_backends_credentials_elsewhere_needs_them_again(
    tenant, client_for, real_backends, kind, config, credentials, moved, setting
):
    base = f"/api/v1/organizations/{tenant.organization.slug}/compute-backends/"
    admin = client_for(tenant.admin)
    created = admin.post(
        base, {"name": "remote", "kind": kind, "config": config, "credentials": credentials}, format="json"
    )
    assert created.status_code == 201, created.content
    url = f"{base}{created.json()['id']}/"
    with organization_scope(tenant.organization):
        before = ComputeBackend.objects.values("config", "credentials_ciphertext").get(name="remote")

    refused = admin.patch(url, {"config": moved}, format="json")

    assert refused.status_code == 400
    message = refused.json()["error"]["message"]
    assert message.startswith(f"{setting} requires re-entering the ") and "in the same request" in message
    with organization_scope(tenant.organization):
        assert ComputeBackend.objects.values("config", "credentials_ciphertext").get(name="remote") == before
    # With the credentials in the same request, the change is made.
    accepted = admin.patch(url, {"config": moved, "credentials": credentials}, format="json")
    assert accepted.status_code == 200, accepted.content
    with organization_scope(tenant.organization):
        assert ComputeBackend.objects.get(name="remote").config == {**before["config"], **moved}


def test_settings_that_do_not_move_the_token_change_without_it(tenant, client_for, real_backends):
    base = f"/api/v1/organizations/{tenant.organization.slug}/compute-backends/"
    admin = client_for(tenant.admin)
    created = admin.post(
        base,
        {
            "name": "cluster",
            "kind": "kubernetes",
            "config": {"host": "https://k8s.acme.example", "verify_ssl": False},
            "credentials": {"token": "k8s-stored-token"},
        },
        format="json",
    )
    url = f"{base}{created.json()['id']}/"
    # Another namespace on the same server, and the certificate check turned back on.
    changed = admin.patch(
        url, {"config": {"host": "https://k8s.acme.example", "namespace": "ml", "verify_ssl": True}}, format="json"
    )
    assert changed.status_code == 200, changed.content
    assert admin.patch(url, {"enabled": False}, format="json").status_code == 200
    from jobs.backends import backend_for

    with organization_scope(tenant.organization):
        saved = backend_for(ComputeBackend.objects.get(name="cluster"))
    assert (saved.host, saved.namespace, saved.verify_ssl, saved._token) == (
        "https://k8s.acme.example",
        "ml",
        True,
        "k8s-stored-token",
    )


def test_a_backend_without_saved_credentials_may_move(tenant, client_for, real_backends):
    base = f"/api/v1/organizations/{tenant.organization.slug}/compute-backends/"
    admin = client_for(tenant.admin)
    created = admin.post(
        base, {"name": "open-ray", "kind": "ray", "config": {"address": "https://ray.acme.example:8265"}}, format="json"
    )
    moved = admin.patch(
        f"{base}{created.json()['id']}/", {"config": {"address": "https://ray2.acme.example:8265"}}, format="json"
    )
    assert moved.status_code == 200, moved.content
