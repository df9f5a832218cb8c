"""A scripted backend for the poller's own tests (each real backend is tested against
its real client in its own module), the job services building it, rows for job tests,
and the steps of the services' tests: submit a job, poll it once, read its timeline."""

from __future__ import annotations

from pathlib import Path

from agentops import crypto
from agentops.scoping import organization_scope
from jobs.backends.base import BackendError, JobNotFound, LogChunk, RemoteStatus
from jobs.models import ComputeBackend, Job, JobEvent, JobSecret
from jobs.services import backends, job_poll, job_submit, polling


class ScriptedBackend:
    """Answers from a script: ``states`` are returned by status() one after another
    (the last one repeats), ``log_batches`` by logs(); records every call."""

    hardware_map = {"cpu-basic": "cpu", "a100": "gpu", "t4": "gpu"}
    instances: list[ScriptedBackend] = []
    script: dict = {}

    def __init__(self, *, config, credentials):
        self.config, self.credentials = config, credentials
        self.calls: list[tuple] = []
        ScriptedBackend.instances.append(self)

    @staticmethod
    def validate(config, credentials):
        return config, credentials

    @classmethod
    def reset(cls, **script):
        cls.instances = []
        cls.script = {"states": ["running"], "log_batches": [], "submit_error": None, **script}

    @classmethod
    def all_calls(cls) -> list[tuple]:
        return [call for instance in cls.instances for call in instance.calls]

    def submit(self, spec):
        self.calls.append(("submit", spec))
        error = self.script.get("submit_error")
        if error is not None:
            raise error
        return f"remote-{spec.job_id}"

    def status(self, external_id):
        self.calls.append(("status", external_id))
        states = self.script["states"]
        state = states.pop(0) if len(states) > 1 else states[0]
        if state == "missing":
            raise JobNotFound("no such job")
        if state == "broken":
            raise BackendError("the backend is down", retryable=True)
        if isinstance(state, RemoteStatus):
            return state
        return RemoteStatus(state=state, exit_code=0 if state == "succeeded" else 1 if state == "failed" else None)

    def logs(self, external_id, cursor):
        self.calls.append(("logs", external_id, dict(cursor)))
        batches = self.script["log_batches"]
        lines = batches.pop(0) if batches else []
        return LogChunk(lines=lines, cursor={"n": cursor.get("n", 0) + len(lines)})

    def cancel(self, external_id):
        self.calls.append(("cancel", external_id))


def build_backends_with(monkeypatch, *, backend_for=None, backend_class=None) -> None:
    """Make the job services build backends with ``backend_for`` (a row -> a backend)
    and ``backend_class`` (a kind -> its class): every place that builds one."""
    if backend_for is not None:
        monkeypatch.setattr(backends, "backend_for", backend_for)
        monkeypatch.setattr(polling, "backend_for", backend_for)
    if backend_class is not None:
        monkeypatch.setattr(backends, "backend_class", backend_class)


def submit_job(tenant, backend, **fields):
    """``job_submit`` by the tenant's member, with defaults for what a test leaves out."""
    fields = {"hardware": "a100", "command": ["python", "train.py"], "time_limit_seconds": 3600, **fields}
    with organization_scope(tenant.organization):
        return job_submit(project=tenant.project, actor=tenant.member, backend=backend, **fields)


def poll_once(tenant, job):
    """One ``job_poll`` of ``job`` (refreshed after): the seconds until the next look, or None."""
    with organization_scope(tenant.organization):
        following = job_poll(job_id=job.pk)
        job.refresh_from_db()
    return following[0] if following else None


def timeline(tenant, job):
    """The statuses of the job's timeline, in order."""
    with organization_scope(tenant.organization):
        return list(JobEvent.objects.filter(job=job).values_list("status", flat=True))


def make_backend(organization, *, name="box", kind="local", config=None) -> ComputeBackend:
    return ComputeBackend.dangerously_unscoped_objects.create(
        organization=organization, name=name, kind=kind, config=config or {}
    )


def fake_nvidia_smi(folder: Path, gpus: str) -> Path:
    """An executable that answers the hardware query as nvidia-smi does (name, MiB)."""
    folder.mkdir(parents=True, exist_ok=True)
    script = folder / "nvidia-smi"
    script.write_text(
        "#!/bin/sh\n"
        'case "$*" in\n'
        f"  *--query-gpu=name,memory.total*) cat <<'GPUS'\n{gpus}GPUS\n  ;;\n"
        "  *) exit 9 ;;\n"
        "esac\n"
    )
    script.chmod(0o755)
    return script


def make_job(project, backend: ComputeBackend, *, name="train", **fields) -> Job:
    """A command job of ``project`` on ``backend``, as submitted (queued)."""
    return Job.dangerously_unscoped_objects.create(
        organization=project.organization,
        project=project,
        name=name,
        backend=backend,
        backend_kind=backend.kind,
        hardware="a100",
        command=["python", "train.py"],
        **fields,
    )


def make_job_secret(organization, *, name="HF_TOKEN", value="hf_0123456789abcdef") -> JobSecret:
    return JobSecret.dangerously_unscoped_objects.create(
        organization=organization, name=name, value_ciphertext=crypto.encrypt(value), hint=value[-4:]
    )
