"""The Modal backend at the boundary of the Modal SDK. Modal's SDK talks gRPC to
Modal's own control plane, which cannot be stood up locally: these tests replace the
SDK entry points the backend calls (Client.from_credentials, App.lookup,
Image.from_registry, Secret.from_dict, Sandbox.create, Sandbox.from_id) with recording
fakes that keep the SDK's signatures, and use the SDK's real exception and LogEntry
types. They are skipped when the modal package is not installed."""

from __future__ import annotations

import functools
import inspect
import itertools
import json
import sys
from datetime import UTC, datetime, timedelta

import pytest

from agentops.errors import InvalidRequest
from jobs.backends import modal as modal_backend
from jobs.backends.base import BackendError, JobNotFound, JobSpec
from jobs.backends.modal import ModalBackend
from jobs.hardware import CATALOG

# The sandboxes' log entries are written an hour ago: the backend's first read looks back
# FIRST_LOG_LOOKBACK from the real clock, so a fixed date would fall out of it one day.
T0 = (datetime.now(UTC) - timedelta(hours=1)).replace(microsecond=0)


def bind_to_sdk(real):
    """Check each call against the real SDK function's signature before faking it, so
    the fakes cannot accept an argument the SDK would refuse."""
    signature = inspect.signature(real)
    takes_class = next(iter(signature.parameters), None) in ("cls", "self")

    def decorator(fake_function):
        @functools.wraps(fake_function)
        def checked(*args, **kwargs):
            signature.bind(*((None,) if takes_class else ()), *args, **kwargs)
            return fake_function(*args, **kwargs)

        return checked

    return decorator


class FakeModal:
    """What the SDK was asked, and the sandboxes it "runs"."""

    def __init__(self, modal):
        self.modal = modal
        self.calls: list[tuple] = []
        self.sandboxes: dict[str, FakeSandbox] = {}
        self.clients: list[FakeClient] = []
        self.ids = itertools.count(1)
        self.fail_with: Exception | None = None

    # -- the SDK entry points, same arguments as the real ones --
    def from_credentials(self, token_id, token_secret):
        if self.fail_with is not None:
            raise self.fail_with
        client = FakeClient(token_id, token_secret)
        self.clients.append(client)
        return client

    def app_lookup(self, name, *, client=None, environment_name=None, create_if_missing=False):
        self.calls.append(("App.lookup", name, client, environment_name, create_if_missing))
        return FakeApp(name)

    def image_from_registry(self, tag, secret=None, *, setup_dockerfile_commands=(), force_build=False, **kwargs):
        self.calls.append(("Image.from_registry", tag, kwargs))
        return FakeImage(tag, kwargs)

    def secret_from_dict(self, env_dict={}):  # noqa: B006 - the SDK's own signature
        self.calls.append(("Secret.from_dict", dict(env_dict)))
        return FakeSecret(dict(env_dict))

    def sandbox_create(self, *args, app=None, image=None, secrets=None, timeout=300, gpu=None, tags=None, client=None):
        sandbox = FakeSandbox(f"sb-{next(self.ids):06d}", self.modal)
        sandbox.created_with = {
            "args": args,
            "app": app,
            "image": image,
            "secrets": secrets,
            "timeout": timeout,
            "gpu": gpu,
            "tags": tags,
            "client": client,
        }
        self.sandboxes[sandbox.object_id] = sandbox
        self.calls.append(("Sandbox.create", sandbox.object_id))
        return sandbox

    def sandbox_from_id(self, sandbox_id, client=None):
        self.calls.append(("Sandbox.from_id", sandbox_id, client))
        if sandbox_id not in self.sandboxes:
            raise self.modal.exception.NotFoundError(f"Sandbox {sandbox_id} not found")
        return self.sandboxes[sandbox_id]


class FakeClient:
    def __init__(self, token_id, token_secret):
        self.token_id, self.token_secret = token_id, token_secret
        self.closed = False

    def close(self):
        self.closed = True


class FakeApp:
    def __init__(self, name):
        self.name = name


class FakeImage:
    def __init__(self, tag, kwargs):
        self.tag, self.kwargs = tag, kwargs


class FakeSecret:
    def __init__(self, env):
        self.env = env


class FakeSandbox:
    """A sandbox whose end and output the test scripts."""

    def __init__(self, object_id, modal):
        self.object_id = object_id
        self.modal = modal
        self.exit_code: int | None = None
        self.ended_by: str | None = None  # "terminated", "timeout" or None
        self.entries: list = []
        self.terminate_calls = 0
        self.no_task_yet = False
        self.logs = FakeLogs(self)

    def finish(self, exit_code: int, ended_by: str | None = None):
        self.exit_code, self.ended_by = exit_code, ended_by

    def write(self, message: str, *, at: datetime, source: str = "stdout"):
        from modal.types import LogEntry

        self.entries.append(LogEntry(message, at, source, self.object_id, ["ta-1"]))

    # -- the SDK's Sandbox methods --
    def poll(self, *args, **kwargs):
        inspect.signature(self.modal.Sandbox.poll).bind(self, *args, **kwargs)
        return self.exit_code

    def wait(self, *args, **kwargs):
        arguments = inspect.signature(self.modal.Sandbox.wait).bind(self, *args, **kwargs).arguments
        raise_on_termination = arguments.get("raise_on_termination", True)
        assert self.exit_code is not None, "the backend only waits on a finished sandbox"
        if self.ended_by == "timeout":
            raise self.modal.exception.SandboxTimeoutError()
        if self.ended_by == "terminated" and raise_on_termination:
            raise self.modal.exception.SandboxTerminatedError()

    def terminate(self, *args, **kwargs):
        inspect.signature(self.modal.Sandbox.terminate).bind(self, *args, **kwargs)
        self.terminate_calls += 1
        if self.exit_code is None:
            self.finish(137, "terminated")


class FakeLogs:
    def __init__(self, sandbox):
        self.sandbox = sandbox
        self.fetches: list[datetime] = []

    def fetch(self, *args, **kwargs):
        from modal._logs_manager import SandboxLogsManager

        arguments = inspect.signature(SandboxLogsManager.fetch).bind(self, *args, **kwargs).arguments
        since, until = arguments["since"], arguments.get("until")
        self.fetches.append(since)
        if self.sandbox.no_task_yet:
            raise self.sandbox.modal.exception.ExecutionError("Sandbox task_id is not available yet.")
        for entry in sorted(self.sandbox.entries, key=lambda e: e.timestamp):
            if entry.timestamp >= since and (until is None or entry.timestamp < until):
                yield entry


@pytest.fixture
def fake(monkeypatch):
    modal = pytest.importorskip("modal", reason="modal is not installed: pip install -r requirements-dev.txt")
    fake = FakeModal(modal)
    for owner, name, fake_function in [
        (modal.Client, "from_credentials", fake.from_credentials),
        (modal.App, "lookup", fake.app_lookup),
        (modal.Image, "from_registry", fake.image_from_registry),
        (modal.Secret, "from_dict", fake.secret_from_dict),
        (modal.Sandbox, "create", fake.sandbox_create),
        (modal.Sandbox, "from_id", fake.sandbox_from_id),
    ]:
        monkeypatch.setattr(owner, name, bind_to_sdk(getattr(owner, name))(fake_function))
    return fake


def make_backend(**config) -> ModalBackend:
    config, credentials = ModalBackend.validate(config, {"token_id": "ak-test", "token_secret": "as-test"})
    return ModalBackend(config=config, credentials=credentials)


def spec(*, hardware="a100", image="ghcr.io/acme/eval:1", env=None, command=None) -> JobSpec:
    return JobSpec(
        job_id=7,
        name="nightly eval",
        image=image,
        command=command or ["python", "-m", "jobs.runner", "--batch", "8"],
        env={"AGENTOPS_JOB_TOKEN": "job-token-123", "MODE": "full"} if env is None else env,
        hardware=hardware,
        time_limit_seconds=1800,
        labels={"project": "acme"},
    )


def test_submit_creates_a_sandbox_with_the_jobs_image_gpu_time_limit_and_secrets(fake):
    backend = make_backend(environment="staging")
    external_id = backend.submit(spec())

    sandbox = fake.sandboxes[external_id]
    created = sandbox.created_with
    assert created["args"] == ("python", "-m", "jobs.runner", "--batch", "8")
    assert created["image"].tag == "ghcr.io/acme/eval:1"
    assert created["gpu"] == "A100-80GB"
    assert created["timeout"] == 1800
    assert [secret.env for secret in created["secrets"]] == [{"AGENTOPS_JOB_TOKEN": "job-token-123", "MODE": "full"}]
    assert created["app"].name == "agentops-jobs"
    assert created["tags"] == {"project": "acme", "agentops_job_id": "7"}
    client = created["client"]
    assert (client.token_id, client.token_secret) == ("ak-test", "as-test")
    assert ("App.lookup", "agentops-jobs", client, "staging", True) in fake.calls
    assert all(client.closed for client in fake.clients)


@pytest.mark.parametrize(
    ("hardware", "gpu"),
    [("cpu-basic", None), ("t4", "T4"), ("l4", "L4"), ("a10g", "A10G"), ("h100", "H100"), ("h200", "H200")],
)
def test_each_catalog_hardware_asks_modal_for_its_gpu(fake, hardware, gpu):
    external_id = make_backend().submit(spec(hardware=hardware))
    assert fake.sandboxes[external_id].created_with["gpu"] == gpu


def test_hardware_map_covers_the_catalog():
    assert set(ModalBackend.hardware_map) == set(CATALOG)
    for name, hardware in CATALOG.items():
        assert (ModalBackend.hardware_map[name] is None) == (hardware.gpus == 0)


def test_submit_without_image_or_env_uses_modals_default_image_and_no_secret(fake):
    backend = make_backend(app_name="evals", add_python="3.11")
    external_id = backend.submit(spec(image="", env={}))
    created = fake.sandboxes[external_id].created_with
    assert created["image"] is None
    assert created["secrets"] == []
    assert created["app"].name == "evals"
    assert not [call for call in fake.calls if call[0] in ("Image.from_registry", "Secret.from_dict")]


def test_add_python_is_passed_to_the_image(fake):
    make_backend(add_python="3.12").submit(spec())
    assert ("Image.from_registry", "ghcr.io/acme/eval:1", {"add_python": "3.12"}) in fake.calls


def test_submit_refuses_hardware_outside_the_map(fake):
    with pytest.raises(BackendError, match="no hardware"):
        make_backend().submit(spec(hardware="tpu-v5"))
    assert fake.sandboxes == {}


@pytest.mark.parametrize(
    ("exit_code", "ended_by", "state"),
    [(None, None, "running"), (0, None, "succeeded"), (3, None, "failed"), (137, "terminated", "cancelled")],
)
def test_status_follows_the_sandboxs_poll_and_how_it_ended(fake, exit_code, ended_by, state):
    backend = make_backend()
    external_id = backend.submit(spec())
    if exit_code is not None:
        fake.sandboxes[external_id].finish(exit_code, ended_by)
    status = backend.status(external_id)
    assert status.state == state
    assert status.exit_code == exit_code
    if state == "failed":
        assert status.message == "exit code 3"


def test_a_sandbox_stopped_at_its_time_limit_is_failed(fake):
    backend = make_backend()
    external_id = backend.submit(spec())
    fake.sandboxes[external_id].finish(124, "timeout")
    status = backend.status(external_id)
    assert (status.state, status.exit_code) == ("failed", 124)
    assert "time limit" in status.message


def test_unknown_sandbox_is_not_found_and_cancelling_it_is_not_an_error(fake):
    backend = make_backend()
    with pytest.raises(JobNotFound):
        backend.status("sb-missing")
    with pytest.raises(JobNotFound):
        backend.logs("sb-missing", {})
    backend.cancel("sb-missing")
    assert all(client.closed for client in fake.clients)


def test_cancel_terminates_the_sandbox_and_is_idempotent(fake):
    backend = make_backend()
    external_id = backend.submit(spec())
    backend.cancel(external_id)
    assert backend.status(external_id).state == "cancelled"
    backend.cancel(external_id)
    assert fake.sandboxes[external_id].terminate_calls == 2  # Modal ignores the second
    assert backend.status(external_id).state == "cancelled"


def test_logs_are_incremental_whole_lines_across_chunks_and_streams(fake):
    backend = make_backend()
    external_id = backend.submit(spec())
    sandbox = fake.sandboxes[external_id]
    sandbox.write("loading model\nhel", at=T0)
    sandbox.write("warn: slow\n", at=T0 + timedelta(milliseconds=1), source="stderr")

    first = backend.logs(external_id, {})
    assert first.lines == ["loading model", "warn: slow"]
    json.dumps(first.cursor)  # stored on the job as JSON

    sandbox.write("lo\r\nbatch 1 done\n", at=T0 + timedelta(seconds=1))
    second = backend.logs(external_id, first.cursor)
    assert second.lines == ["hello", "batch 1 done"]

    again = backend.logs(external_id, second.cursor)
    assert again.lines == []
    # Later reads start from the last entry read, not from the beginning.
    assert sandbox.logs.fetches[-1] == T0 + timedelta(seconds=1)


def test_entries_sharing_a_timestamp_are_neither_lost_nor_repeated(fake, monkeypatch):
    monkeypatch.setattr(modal_backend, "MAX_LOG_ENTRIES_PER_READ", 2)
    backend = make_backend()
    external_id = backend.submit(spec())
    sandbox = fake.sandboxes[external_id]
    for number in range(5):
        sandbox.write(f"line {number}\n", at=T0)  # one burst, one timestamp
    sandbox.write("after\n", at=T0 + timedelta(seconds=2))

    lines, cursor = [], {}
    for _ in range(5):
        chunk = backend.logs(external_id, cursor)
        lines += chunk.lines
        cursor = chunk.cursor
    assert lines == ["line 0", "line 1", "line 2", "line 3", "line 4", "after"]


def test_last_line_without_newline_comes_once_the_sandbox_has_ended(fake):
    backend = make_backend()
    external_id = backend.submit(spec())
    sandbox = fake.sandboxes[external_id]
    sandbox.write("step 1\nTraceback: boom", at=T0)

    running = backend.logs(external_id, {})
    assert running.lines == ["step 1"]
    sandbox.finish(1)
    ended = backend.logs(external_id, running.cursor)
    assert ended.lines == ["Traceback: boom"]
    assert backend.logs(external_id, ended.cursor).lines == []


def test_logs_of_a_sandbox_not_started_yet_are_empty(fake):
    backend = make_backend()
    external_id = backend.submit(spec())
    fake.sandboxes[external_id].no_task_yet = True
    chunk = backend.logs(external_id, {})
    assert chunk.lines == []
    fake.sandboxes[external_id].no_task_yet = False
    fake.sandboxes[external_id].write("up\n", at=T0)
    assert backend.logs(external_id, chunk.cursor).lines == ["up"]


def test_a_refused_token_is_a_clear_error(fake):
    fake.fail_with = fake.modal.exception.AuthError("Token is invalid")
    with pytest.raises(BackendError, match="refused the token") as caught:
        make_backend().submit(spec())
    assert not caught.value.retryable


def test_modal_being_unavailable_is_retryable(fake):
    fake.fail_with = fake.modal.exception.ServiceError("UNAVAILABLE")
    with pytest.raises(BackendError) as caught:
        make_backend().status("sb-000001")
    assert caught.value.retryable


def test_secrets_never_reach_an_error_message(fake, monkeypatch):
    def refuse(*args, **kwargs):
        raise fake.modal.exception.InvalidError(f"bad secret values: {kwargs['secrets'][0].env}")

    monkeypatch.setattr(fake.modal.Sandbox, "create", refuse)
    with pytest.raises(BackendError) as caught:
        make_backend().submit(spec())
    assert "job-token-123" not in caught.value.message
    assert "InvalidError" in caught.value.message


def test_a_worker_without_modal_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "modal", None)  # makes the import fail
    backend = ModalBackend(config={}, credentials={"token_id": "ak-x", "token_secret": "as-x"})
    with pytest.raises(BackendError, match="modal package is not installed"):
        backend.status("sb-000001")


def test_validate_cleans_a_good_configuration():
    assert ModalBackend.validate(
        {"app_name": "evals", "environment": "main", "add_python": "3.11"},
        {"token_id": " ak-1 ", "token_secret": "as-2"},
    ) == (
        {"app_name": "evals", "environment": "main", "add_python": "3.11"},
        {"token_id": "ak-1", "token_secret": "as-2"},
    )
    assert ModalBackend.validate({}, {"token_id": "ak-1", "token_secret": "as-2"})[0] == {}


@pytest.mark.parametrize(
    ("config", "credentials", "message"),
    [
        ({}, {}, "token_id is required"),
        ({}, {"token_id": "ak-1"}, "token_secret is required"),
        ({}, {"token_id": "ak-1", "token_secret": "as-2", "workspace": "x"}, "workspace"),
        ({"app_name": "bad name!"}, {"token_id": "ak-1", "token_secret": "as-2"}, "app_name"),
        ({"add_python": "python3"}, {"token_id": "ak-1", "token_secret": "as-2"}, "add_python"),
        ({"gpu": "H100"}, {"token_id": "ak-1", "token_secret": "as-2"}, "gpu"),
    ],
)
def test_validate_refuses_bad_settings(config, credentials, message):
    with pytest.raises(InvalidRequest, match=message):
        ModalBackend.validate(config, credentials)
