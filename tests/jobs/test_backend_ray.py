"""The Ray Jobs backend against a real Ray head node started for these tests
(``ray start --head`` on free ports in a temporary folder, stopped afterwards). The
tests that need it are skipped, saying why, when the ray package is not installed."""

from __future__ import annotations

import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from pathlib import Path

import psutil
import pytest

from agentops.errors import InvalidRequest
from jobs.backends import ray as ray_module
from jobs.backends.base import BackendError, JobNotFound, JobSpec
from jobs.backends.ray import RayBackend
from jobs.hardware import CATALOG

HEAD_START_TIMEOUT = 90
JOB_TIMEOUT = 60


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture(scope="module")
def ray_address():
    """The Jobs API URL of a one-CPU Ray head node on this machine. Module-scoped: only
    this module needs it, and its dozen processes (about 2 GB) go as soon as it is done
    instead of idling through the rest of the suite."""
    try:
        import ray  # noqa: F401
        from ray.job_submission import JobSubmissionClient  # noqa: F401
    except ImportError:
        pytest.skip('ray is not installed: pip install -r requirements-dev.txt (it pins "ray[default]")')
    ray_command = Path(sys.executable).with_name("ray")
    if not ray_command.exists():
        pytest.skip(f"the ray command is not next to {sys.executable}")

    # Short: Ray puts unix sockets under it, and their paths are limited to 107 bytes.
    temp_dir = tempfile.mkdtemp(prefix="ray-", dir="/tmp")
    ports = {
        name: _free_port()
        for name in (
            "port",
            "dashboard-port",
            "node-manager-port",
            "object-manager-port",
            "dashboard-agent-listen-port",
            "dashboard-agent-grpc-port",
            "runtime-env-agent-port",
            "metrics-export-port",
            "ray-client-server-port",
        )
    }
    command = [
        str(ray_command),
        "start",
        "--head",
        "--block",
        "--num-cpus=1",
        "--num-gpus=0",
        "--include-dashboard=true",
        "--dashboard-host=127.0.0.1",
        "--node-ip-address=127.0.0.1",
        f"--temp-dir={temp_dir}",
        "--object-store-memory=100000000",
        "--disable-usage-stats",
        *(f"--{name}={port}" for name, port in ports.items()),
    ]
    environment = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0"}
    for variable in ray_module.RAY_ADDRESS_VARIABLES:
        environment.pop(variable, None)
    log_path = Path(temp_dir) / "ray-start.log"
    started = time.monotonic()
    with open(log_path, "wb") as log:
        # --block keeps `ray start` in the foreground: stopping that one process (by
        # its id) stops the node it started, and nothing else on the machine.
        head = subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env=environment)
    address = f"http://127.0.0.1:{ports['dashboard-port']}"
    try:
        while True:
            if head.poll() is not None:
                pytest.fail(f"ray start exited with {head.returncode}:\n{log_path.read_text()[-3000:]}")
            if time.monotonic() - started > HEAD_START_TIMEOUT:
                pytest.fail(f"the Ray head did not answer in {HEAD_START_TIMEOUT} s:\n{log_path.read_text()[-3000:]}")
            try:
                with urllib.request.urlopen(f"{address}/api/version", timeout=2) as response:
                    if response.status == 200:
                        break
            except OSError:
                time.sleep(0.5)
        print(f"\nRay head node up at {address} in {time.monotonic() - started:.1f} s")
        yield address
    finally:
        _stop_head(head)
        shutil.rmtree(temp_dir, ignore_errors=True)


def _stop_head(head: subprocess.Popen) -> None:
    try:
        children = psutil.Process(head.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        children = []
    head.send_signal(signal.SIGTERM)
    try:
        head.wait(timeout=45)
    except subprocess.TimeoutExpired:
        head.kill()
        head.wait()
    # Whatever the node left behind (it drains and stops its processes on SIGTERM).
    _, alive = psutil.wait_procs(children, timeout=10)
    for process in alive:
        try:
            process.kill()
        except psutil.NoSuchProcess:
            pass


@pytest.fixture
def backend(ray_address):
    config, credentials = RayBackend.validate({"address": ray_address}, {})
    return RayBackend(config=config, credentials=credentials)


def python_command(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def spec(command: list[str], *, env=None, hardware="cpu-basic", job_id=1) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        name="test job",
        image="",
        command=command,
        env=env or {},
        hardware=hardware,
        time_limit_seconds=600,
        labels={"project": "acme"},
    )


def wait_for(backend: RayBackend, external_id: str, states: set[str], *, log_cursor=None, lines=None):
    """Poll like the poller does (status, then logs) until the job reaches ``states``."""
    deadline = time.monotonic() + JOB_TIMEOUT
    cursor = log_cursor if log_cursor is not None else {}
    while True:
        status = backend.status(external_id)
        if lines is not None:
            chunk = backend.logs(external_id, cursor)
            lines.extend(chunk.lines)
            cursor = chunk.cursor
        if status.state in states:
            return status, cursor
        assert time.monotonic() < deadline, f"job still {status.state} after {JOB_TIMEOUT} s"
        time.sleep(0.3)


def test_job_runs_to_success_with_each_log_line_once(backend):
    code = "import time\nprint('hello', flush=True)\ntime.sleep(1.5)\nprint('bye', flush=True)"
    external_id = backend.submit(spec(python_command(code), job_id=42))
    assert external_id.startswith("agentops-42-")

    lines: list[str] = []
    status, cursor = wait_for(backend, external_id, {"succeeded", "failed", "cancelled"}, lines=lines)

    assert status.state == "succeeded"
    assert status.exit_code == 0
    assert status.started_at and status.ended_at and status.started_at <= status.ended_at
    assert lines.count("hello") == 1 and lines.count("bye") == 1
    assert lines.index("hello") < lines.index("bye")
    # Nothing is repeated once everything was read.
    assert backend.logs(external_id, cursor).lines == []
    assert backend.logs(external_id, cursor).cursor == cursor


def test_logs_read_while_running_continue_where_they_stopped(backend):
    code = "import time\nprint('first', flush=True)\ntime.sleep(3)\nprint('second', flush=True)"
    external_id = backend.submit(spec(python_command(code)))
    deadline = time.monotonic() + JOB_TIMEOUT
    early = backend.logs(external_id, {})
    while "first" not in early.lines:
        assert time.monotonic() < deadline
        time.sleep(0.3)
        more = backend.logs(external_id, early.cursor)
        early = type(early)(lines=early.lines + more.lines, cursor=more.cursor)
    assert "second" not in early.lines

    status, _ = wait_for(backend, external_id, {"succeeded", "failed"})
    assert status.state == "succeeded"
    late = backend.logs(external_id, early.cursor)
    assert "second" in late.lines
    assert "first" not in late.lines


def test_environment_variables_reach_the_job(backend):
    code = "import os\nprint('token=' + os.environ['AGENTOPS_TEST_VALUE'])"
    external_id = backend.submit(spec(python_command(code), env={"AGENTOPS_TEST_VALUE": "s3cret-value"}))
    lines: list[str] = []
    status, _ = wait_for(backend, external_id, {"succeeded", "failed"}, lines=lines)
    assert status.state == "succeeded", status.message
    assert "token=s3cret-value" in lines


def test_failing_entrypoint_is_failed_with_its_exit_code_and_last_line(backend):
    code = "import sys\nprint('working', flush=True)\nsys.stdout.write('oops, no newline')\nsys.exit(3)"
    external_id = backend.submit(spec(python_command(code)))
    lines: list[str] = []
    status, _ = wait_for(backend, external_id, {"succeeded", "failed"}, lines=lines)
    assert status.state == "failed"
    assert status.exit_code == 3
    assert status.message
    # The unterminated last line is delivered once the job has ended.
    assert lines[-1] == "oops, no newline"
    assert lines.count("working") == 1


def test_stopping_a_long_job_cancels_it_and_cancel_is_idempotent(backend):
    code = "import time\nprint('started', flush=True)\ntime.sleep(120)"
    external_id = backend.submit(spec(python_command(code)))
    wait_for(backend, external_id, {"running"})

    backend.cancel(external_id)
    status, _ = wait_for(backend, external_id, {"cancelled", "succeeded", "failed"})
    assert status.state == "cancelled"
    backend.cancel(external_id)  # already stopped: not an error
    assert backend.status(external_id).state == "cancelled"


def test_unknown_job_is_not_found(backend):
    with pytest.raises(JobNotFound):
        backend.status("agentops-0-doesnotexist")
    with pytest.raises(JobNotFound):
        backend.logs("agentops-0-doesnotexist", {})
    backend.cancel("agentops-0-doesnotexist")  # nothing to stop


def test_gpu_hardware_asks_ray_for_a_gpu_and_waits_for_one(ray_address, monkeypatch):
    client_class = ray_module._client_class()
    submitted = []
    real_submit = client_class.submit_job

    def recording_submit(self, **arguments):
        submitted.append(arguments)
        return real_submit(self, **arguments)

    monkeypatch.setattr(client_class, "submit_job", recording_submit)
    config, credentials = RayBackend.validate({"address": ray_address, "match_accelerator_type": True}, {})
    backend = RayBackend(config=config, credentials=credentials)
    external_id = backend.submit(spec(python_command("print('never runs here')"), hardware="a100"))
    try:
        assert submitted[0]["entrypoint_num_gpus"] == 1
        assert submitted[0]["entrypoint_resources"] == {"accelerator_type:A100": 0.001}
        assert submitted[0]["metadata"] == {"project": "acme", "agentops_job_id": "1", "agentops_job_name": "test job"}
        # This head node has no GPU: the job waits for one.
        time.sleep(2)
        status = backend.status(external_id)
        assert status.state == "pending"
        assert "waiting for resources" in status.message
    finally:
        # Ray queues the stop until the job gets its resources (never, here): the job
        # stays pending, and goes with the head node at the end of the session.
        backend.cancel(external_id)
    assert backend.status(external_id).state == "pending"


def test_unreachable_cluster_is_a_retryable_error():
    pytest.importorskip("ray.job_submission", reason="ray is not installed")
    backend = RayBackend(config={"address": f"http://127.0.0.1:{_free_port()}"}, credentials={})
    with pytest.raises(BackendError) as caught:
        backend.status("agentops-1-abc")
    assert caught.value.retryable
    assert "cannot reach the Ray cluster" in caught.value.message


def test_hardware_outside_the_catalog_is_refused(backend):
    with pytest.raises(BackendError, match="no hardware"):
        backend.submit(spec(["true"], hardware="tpu-v5"))


def test_hardware_map_covers_the_catalog_with_its_gpu_counts():
    assert set(RayBackend.hardware_map) == set(CATALOG)
    for name, hardware in CATALOG.items():
        assert RayBackend.hardware_map[name]["num_gpus"] == hardware.gpus
    assert RayBackend.hardware_map["cpu-basic"]["accelerator_type"] is None
    assert RayBackend.hardware_map["h100"]["accelerator_type"] == "H100"


def test_a_worker_without_ray_says_so(monkeypatch):
    monkeypatch.setitem(sys.modules, "ray.job_submission", None)  # makes the import fail
    ray_module._client_class.cache_clear()
    try:
        backend = RayBackend(config={"address": "http://127.0.0.1:8265"}, credentials={})
        with pytest.raises(BackendError, match="ray package is not installed"):
            backend.status("agentops-1-abc")
    finally:
        ray_module._client_class.cache_clear()


def test_ray_address_in_the_worker_environment_is_refused(monkeypatch):
    monkeypatch.setenv("RAY_ADDRESS", "http://10.0.0.5:8265")
    backend = RayBackend(config={"address": "http://127.0.0.1:8265"}, credentials={})
    with pytest.raises(BackendError, match="RAY_ADDRESS"):
        backend.status("agentops-1-abc")


def test_validate_cleans_a_good_configuration():
    config, credentials = RayBackend.validate(
        {
            "address": " http://127.0.0.1:8265/ ",
            "runtime_env": {"pip": ["requests==2.34.2"], "working_dir": "s3://bucket/code.zip"},
            "use_image_uri": True,
        },
        {"headers": {"Authorization": "Bearer abc"}},
    )
    assert config == {
        "address": "http://127.0.0.1:8265",
        "runtime_env": {"pip": ["requests==2.34.2"], "working_dir": "s3://bucket/code.zip"},
        "use_image_uri": True,
    }
    assert credentials == {"headers": {"Authorization": "Bearer abc"}}
    assert RayBackend.validate({"address": "https://ray.example.com"}, {}) == (
        {"address": "https://ray.example.com"},
        {},
    )


@pytest.mark.parametrize(
    ("config", "credentials", "message"),
    [
        ({}, {}, "address is required"),
        ({"address": "ray://127.0.0.1:10001"}, {}, "http"),
        ({"address": "file:///etc/passwd"}, {}, "http"),
        ({"address": "http://127.0.0.1:8265", "runtime_env": {"working_dir": "/srv/app"}}, {}, "working_dir"),
        ({"address": "http://127.0.0.1:8265", "runtime_env": {"py_modules": ["./mine"]}}, {}, "py_modules"),
        ({"address": "http://127.0.0.1:8265", "runtime_env": {"pip": "requirements.txt"}}, {}, "pip"),
        ({"address": "http://127.0.0.1:8265", "runtime_env": {"conda": "env.yaml"}}, {}, "conda"),
        ({"address": "http://127.0.0.1:8265", "runtime_env": {"excludes": ["x"]}}, {}, "excludes"),
        ({"address": "http://127.0.0.1:8265", "use_image_uri": "yes"}, {}, "use_image_uri"),
        ({"address": "http://127.0.0.1:8265", "surprise": 1}, {}, "surprise"),
        ({"address": "http://127.0.0.1:8265"}, {"headers": {"X-A": "b\r\nX-Injected: 1"}}, "single-line"),
        ({"address": "http://127.0.0.1:8265"}, {"token": "abc"}, "token"),
    ],
)
def test_validate_refuses_bad_settings(config, credentials, message):
    with pytest.raises(InvalidRequest, match=message):
        RayBackend.validate(config, credentials)


def test_validate_refuses_an_address_inside_the_platform_network(settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    with pytest.raises(InvalidRequest, match="private or reserved"):
        RayBackend.validate({"address": "http://127.0.0.1:8265"}, {})
    backend = RayBackend(config={"address": "http://127.0.0.1:8265"}, credentials={})
    with pytest.raises(BackendError, match="not allowed"):
        backend.status("agentops-1-abc")


def test_command_is_quoted_for_the_shell(ray_address):
    backend = RayBackend(config={"address": ray_address}, credentials={})
    argument = "it's $HOME; `true` | cat"
    external_id = backend.submit(spec(python_command("import sys; print(sys.argv[1])") + [argument]))
    lines: list[str] = []
    status, _ = wait_for(backend, external_id, {"succeeded", "failed"}, lines=lines)
    assert status.state == "succeeded", status.message
    assert argument in lines


@pytest.mark.parametrize("status", [302, 307])
def test_a_redirect_is_not_followed_with_the_headers(redirect_trap, status):
    pytest.importorskip("ray.job_submission", reason="the ray package is not installed")
    redirect_trap.status = status
    backend = RayBackend(config={"address": redirect_trap.url}, credentials={"headers": {"Authorization": "Bearer rt"}})

    with pytest.raises(BackendError, match=f"HTTP {status}"):
        backend.status("agentops-7-abcd")

    assert redirect_trap.redirected[0]["authorization"] == "Bearer rt"
    assert redirect_trap.elsewhere == []


def test_an_address_whose_name_rebinds_to_a_private_address_never_gets_the_headers(rebinding):
    pytest.importorskip("ray.job_submission", reason="the ray package is not installed")
    backend = RayBackend(config={"address": rebinding.url}, credentials={"headers": {"Authorization": "Bearer rt"}})

    with pytest.raises(BackendError, match="private or reserved"):
        backend.status("agentops-7-abcd")

    assert rebinding.received == []
