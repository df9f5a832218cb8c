"""The local backend with real subprocesses: logs arrive as they are printed and never
twice, a job ends with its exit code, cancel and the time limit stop the whole process
group, a new backend (as after a worker restart) finds a job again from its id, the
job's environment stays out of the backend's files and logs, and GPU samples come from
nvidia-smi (a fake one that prints what the real one would)."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import pytest

from agentops.errors import InvalidRequest
from jobs.backends.base import BackendError, JobNotFound, JobSpec
from jobs.backends.local import MAX_LINE_BYTES, MAX_LINES_PER_CALL, HostPolicy, LocalBackend, parse_nvidia_smi
from tests.jobs.factories import fake_nvidia_smi

TIMEOUT_SECONDS = 15
PROJECT_ROOT = Path(__file__).resolve().parents[2]
JOBS_USER = os.environ.get("JOBS_LOCAL_USER", "")  # tests/settings.py: nobody when the suite runs as root


@pytest.fixture
def config(tmp_path) -> dict:
    return {
        "work_dir": str(tmp_path / "jobs"),
        "gpu_sample_seconds": 0.2,
        "cancel_grace_seconds": 1,
        "nvidia_smi": "nvidia-smi-not-installed",
    }


@pytest.fixture
def backend(config) -> LocalBackend:
    return LocalBackend(config=config, credentials={})


@pytest.fixture(autouse=True)
def _stop_leftover_jobs(tmp_path):
    """A failing test must not leave a sleeping job behind."""
    yield
    for state_path in (tmp_path / "jobs").glob("job-*/state.json"):
        state = json.loads(state_path.read_text())
        for pid in (state.get("command_pid"), state.get("pid")):
            if pid and state.get("state") == "running":
                try:
                    os.killpg(pid, signal.SIGKILL)
                except (ProcessLookupError, PermissionError):
                    pass


def python_command(source: str) -> list[str]:
    # The host's python3 (on the job's PATH): the job's user may not reach this Python.
    return ["python3", "-c", textwrap.dedent(source)]


def job_spec(command: list[str], *, env: dict | None = None, time_limit: int = 60, job_id: int = 7) -> JobSpec:
    return JobSpec(
        job_id=job_id,
        name="test job",
        image="ignored:latest",
        command=command,
        env=env or {},
        hardware="cpu-basic",
        time_limit_seconds=time_limit,
    )


def wait_for(condition, what: str, timeout: float = TIMEOUT_SECONDS):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = condition()
        if value:
            return value
        time.sleep(0.05)
    raise AssertionError(f"timed out waiting for {what}")


def wait_until_ended(backend: LocalBackend, external_id: str, timeout: float = TIMEOUT_SECONDS):
    return wait_for(
        lambda: (status := backend.status(external_id)).state in ("succeeded", "failed", "cancelled") and status,
        "the job to end",
        timeout,
    )


def all_logs(backend: LocalBackend, external_id: str, cursor: dict | None = None) -> tuple[list[str], dict]:
    cursor = cursor or {}
    lines: list[str] = []
    while True:
        chunk = backend.logs(external_id, cursor)
        lines += chunk.lines
        cursor = chunk.cursor
        if not chunk.lines:
            return lines, cursor


def group_alive(pgid: int) -> bool:
    """Whether any live (not zombie) process is in the process group."""
    for stat_path in Path("/proc").glob("[0-9]*/stat"):
        try:
            text = stat_path.read_text()
        except OSError:
            continue
        fields = text[text.rindex(")") + 2 :].split()
        if int(fields[2]) == pgid and fields[0] not in ("Z", "X"):
            return True
    return False


def state_of(external_id: str) -> dict:
    return json.loads((Path(external_id) / "state.json").read_text())


def test_logs_arrive_while_the_job_runs_and_never_repeat(backend):
    external_id = backend.submit(
        job_spec(
            python_command(
                """
                import time
                for number in range(1, 7):
                    print(f"line {number}")
                    time.sleep(0.3)
                """
            )
        )
    )
    collected: list[str] = []
    batches = 0
    states = set()
    cursor: dict = {}
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        status = backend.status(external_id)
        states.add(status.state)
        chunk = backend.logs(external_id, cursor)
        cursor = chunk.cursor
        if chunk.lines:
            batches += 1
            collected += chunk.lines
        if status.state == "succeeded" and not chunk.lines:
            break
        time.sleep(0.1)

    assert collected == [f"line {number}" for number in range(1, 7)]
    assert batches >= 3, "the lines arrived all at once, not as they were printed"
    assert "running" in states
    assert status.state == "succeeded"
    assert status.exit_code == 0
    assert status.started_at <= status.ended_at
    assert backend.logs(external_id, cursor).lines == []


def test_a_failing_command_fails_with_its_exit_code(backend):
    external_id = backend.submit(job_spec(python_command("import sys; print('bad input'); sys.exit(3)")))

    status = wait_until_ended(backend, external_id)

    assert status.state == "failed"
    assert status.exit_code == 3
    assert status.message == "exited with code 3"
    assert all_logs(backend, external_id)[0] == ["bad input"]


def test_a_program_that_does_not_exist_fails_with_127(backend):
    external_id = backend.submit(job_spec(["no-such-program-for-agentops-tests"]))

    status = wait_until_ended(backend, external_id)

    assert (status.state, status.exit_code) == ("failed", 127)
    assert "could not start the command" in status.message
    assert any("could not start the command" in line for line in all_logs(backend, external_id)[0])


def test_cancel_stops_the_whole_process_group(backend):
    # The job starts a child of its own: cancel must stop it too.
    external_id = backend.submit(
        job_spec(
            python_command(
                """
                import subprocess, sys, time
                subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])
                print("started", flush=True)
                time.sleep(120)
                """
            )
        )
    )
    wait_for(lambda: backend.logs(external_id, {}).lines == ["started"], "the job to start")
    command_group = state_of(external_id)["command_pid"]
    assert group_alive(command_group)

    backend.cancel(external_id)
    # Generous limits: they catch a cancel that never ends, not a slow machine.
    status = wait_until_ended(backend, external_id, timeout=60)

    assert status.state == "cancelled"
    wait_for(lambda: not group_alive(command_group), "the process group to be gone", timeout=60)
    backend.cancel(external_id)  # idempotent, also once ended
    assert backend.status(external_id).state == "cancelled"


def test_cancel_kills_a_command_that_ignores_sigterm_after_the_grace_period(backend):
    external_id = backend.submit(
        job_spec(
            python_command(
                """
                import signal, time
                signal.signal(signal.SIGTERM, signal.SIG_IGN)
                print("ignoring SIGTERM", flush=True)
                time.sleep(120)
                """
            )
        )
    )
    wait_for(lambda: backend.logs(external_id, {}).lines, "the job to start")
    command_group = state_of(external_id)["command_pid"]

    backend.cancel(external_id)
    backend.cancel(external_id)
    status = wait_until_ended(backend, external_id, timeout=6)

    assert status.state == "cancelled"
    assert status.exit_code == 128 + signal.SIGKILL
    assert not group_alive(command_group)


def test_the_time_limit_stops_the_job(backend):
    external_id = backend.submit(job_spec(python_command("import time; time.sleep(120)"), time_limit=1))

    status = wait_until_ended(backend, external_id, timeout=8)

    assert status.state == "failed"
    assert "time limit of 1 s" in status.message
    assert any("time limit" in line for line in all_logs(backend, external_id)[0])


def test_a_job_outlives_the_worker_that_submitted_it(config):
    # A worker process submits and exits; a new backend in another process (this one)
    # follows the job from its id to the end, with all of its output.
    worker = subprocess.run(
        [
            sys.executable,
            "-c",
            textwrap.dedent(
                f"""
                import sys
                from jobs.backends.base import JobSpec
                from jobs.backends.local import HostPolicy, LocalBackend, default_workspace_root
                policy = HostPolicy(enabled=True, user={JOBS_USER!r}, debug=False,
                                    workspace_root=default_workspace_root())
                backend = LocalBackend(config={{**{config!r}, "hardware": ["cpu-basic"]}}, credentials={{}},
                                       policy=policy)
                program = "import time\\nfor n in range(3):\\n print(n, flush=True)\\n time.sleep(0.5)"
                command = ["python3", "-c", program]
                print(backend.submit(JobSpec(job_id=9, name="n", image="", command=command, env={{}},
                                             hardware="cpu-basic", time_limit_seconds=60)))
                """
            ),
        ],
        cwd=PROJECT_ROOT,
        capture_output=True,
        text=True,
        timeout=30,
        check=True,
    )
    external_id = worker.stdout.strip()
    after_restart = LocalBackend(config=config, credentials={})

    assert after_restart.status(external_id).state == "running"
    status = wait_until_ended(after_restart, external_id)
    assert (status.state, status.exit_code) == ("succeeded", 0)
    assert all_logs(after_restart, external_id)[0] == ["0", "1", "2"]


def test_a_new_backend_instance_continues_the_logs_from_the_cursor(backend, config):
    external_id = backend.submit(job_spec(python_command("print('one'); print('two')")))
    wait_until_ended(backend, external_id)
    first = backend.logs(external_id, {})

    restarted = LocalBackend(config=config, credentials={})

    assert first.lines == ["one", "two"]
    assert restarted.status(external_id).state == "succeeded"
    assert restarted.logs(external_id, first.cursor).lines == []


def test_the_job_gets_its_env_and_the_worker_keeps_its_own(backend, monkeypatch, caplog):
    secret = "sk-local-backend-secret-1234567890"
    monkeypatch.setenv("AGENTOPS_TEST_WORKER_ONLY", "the worker's own secret")
    caplog.set_level(logging.DEBUG)
    external_id = backend.submit(
        job_spec(
            python_command(
                """
                import hashlib, os
                print("secret sha256", hashlib.sha256(os.environ["HF_TOKEN"].encode()).hexdigest())
                print("worker-only", os.environ.get("AGENTOPS_TEST_WORKER_ONLY"))
                print("path", bool(os.environ.get("PATH")), "unbuffered", os.environ.get("PYTHONUNBUFFERED"))
                print("cwd", os.getcwd())
                """
            ),
            env={"HF_TOKEN": secret, "MODE": "plain"},
        )
    )
    status = wait_until_ended(backend, external_id)
    lines = all_logs(backend, external_id)[0]

    assert status.state == "succeeded"
    assert f"secret sha256 {hashlib.sha256(secret.encode()).hexdigest()}" in lines
    assert "worker-only None" in lines
    assert "path True unbuffered 1" in lines
    workspace = next(line.removeprefix("cwd ") for line in lines if line.startswith("cwd "))
    assert Path(workspace).name == Path(external_id).name and Path(workspace) != Path(external_id)
    assert not Path(workspace).exists()  # removed with the job
    for path in Path(external_id).iterdir():
        assert secret not in path.read_text(errors="replace"), path.name
    assert secret not in caplog.text
    assert secret not in json.dumps(status.__dict__)


needs_root = pytest.mark.skipif(
    os.geteuid() != 0, reason="starting a job as another user needs root (or CAP_SETUID and CAP_SETGID)"
)


@needs_root
def test_local_jobs_never_run_as_root(config, settings):
    for user, reason in [
        ("", "local jobs never run as root: set JOBS_LOCAL_USER"),
        ("root", "JOBS_LOCAL_USER must be an unprivileged user"),
        ("no-such-user-here", "JOBS_LOCAL_USER names no user of this host"),
    ]:
        settings.JOBS_LOCAL_USER = user
        with pytest.raises(BackendError, match=reason):
            LocalBackend(config=config, credentials={}).submit(job_spec(["/usr/bin/id"]))
    assert not list(Path(config["work_dir"]).glob("job-*"))


@needs_root
def test_a_workspace_the_jobs_user_cannot_reach_is_refused(config, tmp_path):
    private = tmp_path / "private"  # under pytest's own folder, which is 0700
    private.mkdir(mode=0o700)
    policy = HostPolicy(enabled=True, user=JOBS_USER, debug=False, workspace_root=private / "workspaces")
    backend = LocalBackend(config=config, credentials={}, policy=policy)

    with pytest.raises(BackendError, match="the job's user cannot reach .*/private/workspaces"):
        backend.submit(job_spec(["/usr/bin/id"]))
    assert not (private / "workspaces").exists() and not Path(config["work_dir"]).exists()


def test_a_local_backend_turned_off_runs_nothing(config, settings):
    settings.JOBS_LOCAL_BACKEND = False
    with pytest.raises(BackendError, match="turned off on this installation"):
        LocalBackend(config=config, credentials={}).submit(job_spec(["/usr/bin/id"]))
    assert not Path(config["work_dir"]).exists()


def test_gpu_samples_come_from_nvidia_smi(tmp_path, config):
    fake_nvidia_smi = tmp_path / "fake-nvidia-smi"
    fake_nvidia_smi.write_text(
        '#!/bin/sh\necho "$@" >> "$(dirname "$0")/nvidia-smi-arguments"\n'
        'printf "0, 37, 1024, 16384\\n1, [N/A], 2048, 16384\\n"\n'
    )
    fake_nvidia_smi.chmod(0o755)
    backend = LocalBackend(config={**config, "nvidia_smi": str(fake_nvidia_smi)}, credentials={})
    external_id = backend.submit(
        job_spec(python_command("import time; time.sleep(1.5)"), env={"CUDA_VISIBLE_DEVICES": "0,1"})
    )

    # Every status call returns the samples taken since the one before.
    reads = []
    deadline = time.monotonic() + TIMEOUT_SECONDS
    while time.monotonic() < deadline:
        status = backend.status(external_id)
        reads.append(status.gpu_samples)
        if status.state == "succeeded":
            break
        time.sleep(0.1)

    samples = [sample for read in reads for sample in read]
    assert samples[0] == {
        "at": samples[0]["at"],
        "gpu_index": 0,
        "utilization_percent": 37.0,
        "memory_used_mib": 1024.0,
        "memory_total_mib": 16384.0,
    }
    assert samples[1]["gpu_index"] == 1 and samples[1]["utilization_percent"] is None
    assert len([read for read in reads if read]) >= 2, "the samples did not come as they were taken"
    assert len(samples) >= 4
    keys = [(sample["at"], sample["gpu_index"]) for sample in samples]
    assert len(keys) == len(set(keys)), "a sample was returned twice"
    assert backend.status(external_id).gpu_samples == []
    calls = (tmp_path / "nvidia-smi-arguments").read_text().splitlines()
    arguments = next(call for call in calls if "utilization.gpu" in call)  # (the first asked for the host's GPUs)
    assert "--query-gpu=index,utilization.gpu,memory.used,memory.total" in arguments
    assert "--id=0,1" in arguments


def test_no_nvidia_smi_means_no_gpu_samples(backend):
    external_id = backend.submit(job_spec(python_command("import time; time.sleep(0.5)")))

    status = wait_until_ended(backend, external_id)

    assert status.state == "succeeded"
    assert status.gpu_samples == []


def test_a_killed_supervisor_fails_the_job_and_stops_its_command(backend):
    external_id = backend.submit(job_spec(python_command("import time; print('up', flush=True); time.sleep(120)")))
    wait_for(lambda: backend.logs(external_id, {}).lines, "the job to start")
    state = state_of(external_id)

    os.kill(state["pid"], signal.SIGKILL)
    status = wait_for(lambda: (s := backend.status(external_id)).state != "running" and s, "the job to fail")

    assert status.state == "failed"
    assert status.message == "the process died without an exit code"
    wait_for(lambda: not group_alive(state["command_pid"]), "the command to be stopped", timeout=5)
    workspace = json.loads((Path(external_id) / "spec.json").read_text())["workspace"]
    assert not Path(workspace).exists()  # its files go with it, as after a normal end


def test_unknown_jobs_are_not_found(backend, config, tmp_path):
    existing = backend.submit(job_spec(python_command("pass")))
    wait_until_ended(backend, existing)
    unknown = [
        str(Path(config["work_dir"]) / "job-1-deadbeef"),
        str(tmp_path),  # a real directory, outside the backend's work dir
        "/etc",
        f"{existing}/..",
        "not a path\x00",
    ]
    for external_id in unknown:
        with pytest.raises(JobNotFound):
            backend.status(external_id)
        with pytest.raises(JobNotFound):
            backend.logs(external_id, {})
        with pytest.raises(JobNotFound):
            backend.cancel(external_id)


def test_a_partial_last_line_waits_for_its_end(backend):
    external_id = backend.submit(
        job_spec(
            python_command(
                """
                import sys, time
                sys.stdout.write("whole\\npartial")
                sys.stdout.flush()
                time.sleep(1.5)
                sys.stdout.write(" and more\\nno newline at the end")
                """
            )
        )
    )
    first = wait_for(lambda: (chunk := backend.logs(external_id, {})).lines and chunk, "the first line")
    assert first.lines == ["whole"]
    assert backend.status(external_id).state == "running"
    assert backend.logs(external_id, first.cursor).lines == []

    wait_until_ended(backend, external_id)
    lines, cursor = all_logs(backend, external_id, first.cursor)

    assert lines == ["partial and more", "no newline at the end"]
    assert backend.logs(external_id, cursor).lines == []


def test_long_outputs_are_capped_per_call_and_per_line(backend):
    external_id = backend.submit(
        job_spec(
            python_command(
                f"""
                print("x" * {MAX_LINE_BYTES * 3})
                for number in range({MAX_LINES_PER_CALL + 10}):
                    print(number)
                print("10%\\r50%\\r100%")
                """
            )
        )
    )
    wait_until_ended(backend, external_id)

    first = backend.logs(external_id, {})
    rest, _ = all_logs(backend, external_id, first.cursor)

    assert len(first.lines) == MAX_LINES_PER_CALL
    assert first.lines[0] == "x" * MAX_LINE_BYTES + " … [line truncated]"
    assert first.lines[1:] == [str(number) for number in range(MAX_LINES_PER_CALL - 1)]
    assert rest == [str(number) for number in range(MAX_LINES_PER_CALL - 1, MAX_LINES_PER_CALL + 10)] + ["100%"]


def test_a_line_that_never_ends_is_given_truncated_while_the_job_runs(backend):
    external_id = backend.submit(
        job_spec(
            python_command(
                f"""
                import sys, time
                sys.stdout.write("y" * {MAX_LINE_BYTES * 2})
                sys.stdout.flush()
                time.sleep(1)
                print("tail of the long line")
                print("next")
                """
            )
        )
    )
    first = wait_for(lambda: (chunk := backend.logs(external_id, {})).lines and chunk, "the head of the long line")
    wait_until_ended(backend, external_id)
    rest, _ = all_logs(backend, external_id, first.cursor)

    assert first.lines == ["y" * MAX_LINE_BYTES + " … [line truncated]"]
    assert rest == ["next"]


def test_a_host_without_gpus_offers_only_cpu(backend, config):
    assert backend.hardware_map == {"cpu-basic": "cpu-basic"}
    with pytest.raises(BackendError, match="does not offer hardware 'h200'; it offers: cpu-basic"):
        backend.submit(JobSpec(7, "n", "", ["/bin/sleep", "12"], {}, "h200", 60))
    assert not list(Path(config["work_dir"]).glob("job-*"))


def test_a_host_offers_the_gpus_nvidia_smi_reports(tmp_path, config):
    smi = fake_nvidia_smi(
        tmp_path / "a100", "NVIDIA A100-SXM4-80GB, 81920\nNVIDIA A100-SXM4-80GB, 81920\nNVIDIA L40S, 46068\n"
    )
    smaller = fake_nvidia_smi(tmp_path / "a100-40", "NVIDIA A100-PCIE-40GB, 40960\n")

    def offered(**settings) -> list[str]:
        return list(LocalBackend(config={**config, **settings}, credentials={}).hardware_map)

    assert offered(nvidia_smi=str(smi)) == ["cpu-basic", "a100"]  # an L40S is no L4
    assert offered(nvidia_smi=str(smi), hardware=["cpu-basic"]) == ["cpu-basic"]  # the setting narrows
    assert offered(nvidia_smi=str(smi), hardware=["h100"]) == []  # and never adds
    assert offered(nvidia_smi=str(smaller)) == ["cpu-basic"]  # 40 GB is not the catalog's 80 GB a100


def test_validate_cleans_the_settings():
    config, credentials = LocalBackend.validate(
        {"work_dir": "/srv/agentops/jobs/", "nvidia_smi": "/usr/bin/nvidia-smi", "hardware": ["a100", "a100"]}, {}
    )

    assert config == {"work_dir": "/srv/agentops/jobs", "nvidia_smi": "/usr/bin/nvidia-smi", "hardware": ["a100"]}
    assert credentials == {}
    assert LocalBackend.validate({}, {}) == ({}, {})


@pytest.mark.parametrize(
    ("config", "credentials", "message"),
    [
        ({"work_dir": "relative/jobs"}, {}, "work_dir must be an absolute path"),
        ({"nvidia_smi": "nvidia-smi --loop=1"}, {}, "nvidia_smi must be a command name"),
        ({"nvidia_smi": "bin/nvidia-smi"}, {}, "nvidia_smi must be a command name"),
        ({"nvidia_smi": "nvidia-smi;rm"}, {}, "nvidia_smi must be a command name"),
        ({"hardware": ["a100", "tpu-v5"]}, {}, "unknown hardware: tpu-v5"),
        ({"gpu_sample_seconds": 0}, {}, "gpu_sample_seconds must be a number"),
        ({"inherit_env": ["NOT A NAME"]}, {}, "inherit_env must be a list"),
        ({"inherit_env": ["HF_HOME", "ENCRYPTION_KEYS"]}, {}, "cannot pass the platform's own settings"),
        ({"workdir": "/tmp"}, {}, "unknown setting"),
        ({}, {"token": "x"}, "takes no credentials"),
    ],
)
def test_validate_rejects_bad_settings(config, credentials, message):
    with pytest.raises(InvalidRequest, match=message):
        LocalBackend.validate(config, credentials)


def test_inherit_env_passes_named_worker_variables(config, monkeypatch):
    monkeypatch.setenv("SHARED_CACHE_FOR_TEST", "/cache")
    backend = LocalBackend(config={**config, "inherit_env": ["SHARED_CACHE_FOR_TEST"]}, credentials={})
    external_id = backend.submit(job_spec(python_command("import os; print(os.environ.get('SHARED_CACHE_FOR_TEST'))")))

    wait_until_ended(backend, external_id)

    assert all_logs(backend, external_id)[0] == ["/cache"]


def test_parse_nvidia_smi_reads_each_gpu():
    text = "0, 100, 80000, 81559\n1, [N/A], [Not Supported], 81559\n\nNVIDIA-SMI has failed\n"

    assert parse_nvidia_smi(text) == [
        {"gpu_index": 0, "utilization_percent": 100.0, "memory_used_mib": 80000.0, "memory_total_mib": 81559.0},
        {"gpu_index": 1, "utilization_percent": None, "memory_used_mib": None, "memory_total_mib": 81559.0},
    ]


def test_a_sigterm_that_is_not_a_cancel_fails_the_job(backend):
    external_id = backend.submit(job_spec(python_command("import time; print('up', flush=True); time.sleep(120)")))
    wait_for(lambda: backend.logs(external_id, {}).lines, "the job to start")

    os.kill(state_of(external_id)["pid"], signal.SIGTERM)  # as at the host's shutdown
    status = wait_until_ended(backend, external_id, timeout=5)

    assert status.state == "failed"
    assert "received SIGTERM" in status.message
