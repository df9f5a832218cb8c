"""The supervisor of a local job: ``launch`` (``python -m jobs.backends.local run <job
dir>``) forks it in a new session, so it is no child of the worker and outlives it, and
returns once the command started. The supervisor runs the command as the job's user in
its workspace, in its own process group, samples the GPUs, enforces the time limit and a
cancel (SIGTERM to the group, SIGKILL after a grace period), and writes the job's state
when the command ends. It runs without Django: this module and what it imports use only
the standard library and ``jobs.backends.base``. The process checks the backend uses to
find a supervisor that died (``process_alive``, ``kill_group``) are here too.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

from jobs.backends.local.hardware import parse_nvidia_smi
from jobs.backends.local.isolation import remove_workspace
from jobs.backends.local.jobdir import write_json

DEFAULT_GPU_SAMPLE_SECONDS = 5.0
DEFAULT_CANCEL_GRACE_SECONDS = 10.0
_SUPERVISOR_TICK_SECONDS = 0.2


def proc_stat(pid: int) -> tuple[str, str] | None:
    """(state letter, start time in clock ticks) of a process, from /proc on Linux."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text[text.rindex(")") + 2 :].split()
    return fields[0], fields[19]


def process_alive(pid: int | None, start_ticks: str | None) -> bool:
    """True while the process runs. A zombie is dead, and so is a process with the same
    pid but another start time (the pid was reused after the job's process ended)."""
    if not pid:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    stat = proc_stat(pid)
    if stat is None:
        return True
    state_letter, ticks = stat
    if state_letter in ("Z", "X"):
        return False
    return not (start_ticks and ticks != start_ticks)


def kill_group(pgid: int | None, sig: int) -> None:
    if pgid:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pgid, sig)


def launch(job_dir: Path) -> int:
    """Fork the supervisor and wait until it has started the command (or failed to)."""
    ready_read, ready_write = os.pipe()
    pid = os.fork()
    if pid:
        os.close(ready_write)
        with os.fdopen(ready_read, "rb") as ready:
            answer = ready.read()
        if answer == b"ok":
            return 0
        sys.stderr.write(f"the supervisor did not start; see {job_dir / 'supervisor.log'}\n")
        return 1
    os.close(ready_read)
    exit_code = 1
    try:
        os.setsid()
        # Nothing may hold submit's pipes open, and the supervisor's own errors need a home.
        log = os.open(job_dir / "supervisor.log", os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
        os.dup2(log, 2)
        os.close(log)
        null = os.open(os.devnull, os.O_RDWR)
        os.dup2(null, 0)
        os.dup2(null, 1)
        os.close(null)
        exit_code = _Supervisor(job_dir, ready_write).run()
    except BaseException:  # noqa: BLE001 - the forked child must never return into the launcher
        import traceback

        traceback.print_exc()
    finally:
        sys.stderr.flush()
        os._exit(exit_code)


class _Supervisor:
    def __init__(self, job_dir: Path, ready_fd: int):
        self.job_dir = job_dir
        self.ready_fd = ready_fd
        self.spec = json.loads((job_dir / "spec.json").read_text())
        self.stop_reason: str | None = None  # "cancelled", "time_limit" or "terminated"
        self.signal_received = False
        stat = proc_stat(os.getpid())
        self.state = {
            "host": socket.gethostname(),
            "pid": os.getpid(),
            "pid_start": stat[1] if stat else None,
            "state": "running",
            "started_at": time.time(),
        }

    def run(self) -> int:
        signal.signal(signal.SIGTERM, self._on_signal)
        output = open(self.job_dir / "output.log", "ab", buffering=0)  # open for the job's life
        run_as = self.spec.get("run_as") or {}
        workspace = Path(self.spec.get("workspace") or self.job_dir)
        try:
            # As the job's user (no supplementary groups), in its workspace, with the
            # environment submit built (this process's own). Its output goes through the
            # descriptor: the job's directory stays closed to it.
            command = subprocess.Popen(
                self.spec["command"],
                stdin=subprocess.DEVNULL,
                stdout=output,
                stderr=subprocess.STDOUT,
                cwd=workspace,
                env=dict(os.environ),
                process_group=0,
                umask=0o077,
                **({"user": run_as["uid"], "group": run_as["gid"], "extra_groups": []} if run_as else {}),
            )
        except OSError as error:
            exit_code = 126 if isinstance(error, PermissionError) else 127
            message = f"could not start the command: {error.strerror or error}"
            output.write(f"[local backend] {message}\n".encode())
            remove_workspace(self.job_dir, str(workspace))
            self._end("failed", exit_code, message)
            self._ready()
            return 0
        self.state["command_pid"] = command.pid
        write_json(self.job_dir / "state.json", self.state)
        self._ready()

        sampler_stop = threading.Event()
        sampler = threading.Thread(target=self._sample_gpus, args=(sampler_stop,), daemon=True)
        sampler.start()
        returncode = self._wait(command)
        kill_group(command.pid, signal.SIGKILL)  # whatever the command left running in its group
        sampler_stop.set()
        sampler.join(timeout=15)
        remove_workspace(self.job_dir, str(workspace))

        exit_code = returncode if returncode >= 0 else 128 - returncode
        if self.stop_reason == "cancelled":
            state, message = "cancelled", "cancelled"
        elif self.stop_reason == "time_limit":
            state, message = "failed", f"the time limit of {self.spec['time_limit_seconds']} s was reached"
        elif self.stop_reason == "terminated":
            state, message = "failed", "stopped: the job's supervisor received SIGTERM (the host shutting down?)"
        elif returncode == 0:
            state, message = "succeeded", ""
        elif returncode < 0:
            state, message = "failed", f"killed by {signal.Signals(-returncode).name}"
        else:
            state, message = "failed", f"exited with code {returncode}"
        if self.stop_reason:
            output.write(f"\n[local backend] {message}\n".encode())
        output.close()
        self._end(state, exit_code, message)
        return 0

    def _on_signal(self, signum, frame) -> None:
        self.signal_received = True

    def _ready(self) -> None:
        os.write(self.ready_fd, b"ok")
        os.close(self.ready_fd)

    def _end(self, state: str, exit_code: int | None, message: str) -> None:
        self.state.update(state=state, exit_code=exit_code, message=message, ended_at=time.time())
        write_json(self.job_dir / "state.json", self.state)

    def _wait(self, command: subprocess.Popen) -> int:
        time_limit = self.spec.get("time_limit_seconds") or 0
        deadline = self.state["started_at"] + time_limit if time_limit > 0 else None
        grace = float(self.spec.get("cancel_grace_seconds", DEFAULT_CANCEL_GRACE_SECONDS))
        kill_at: float | None = None
        while True:
            try:
                return command.wait(timeout=_SUPERVISOR_TICK_SECONDS)
            except subprocess.TimeoutExpired:
                pass
            now = time.time()
            if self.stop_reason is None:
                if (self.job_dir / "cancel").exists():
                    self.stop_reason = "cancelled"
                elif self.signal_received:
                    # Not a cancel (cancel leaves its marker first): the host is shutting down.
                    self.stop_reason = "terminated"
                elif deadline is not None and now >= deadline:
                    self.stop_reason = "time_limit"
                if self.stop_reason:
                    kill_group(command.pid, signal.SIGTERM)
                    kill_at = now + grace
            elif kill_at is not None and now >= kill_at:
                kill_group(command.pid, signal.SIGKILL)
                kill_at = None

    def _sample_gpus(self, stop: threading.Event) -> None:
        executable = shutil.which(self.spec.get("nvidia_smi") or "nvidia-smi")
        if executable is None:
            return
        arguments = [
            executable,
            "--query-gpu=index,utilization.gpu,memory.used,memory.total",
            "--format=csv,noheader,nounits",
        ]
        visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        if re.fullmatch(r"\d+(,\d+)*", visible):
            arguments.append(f"--id={visible}")
        interval = float(self.spec.get("gpu_sample_seconds") or DEFAULT_GPU_SAMPLE_SECONDS)
        failures = 0
        while not stop.is_set() and failures < 3:
            try:
                result = subprocess.run(arguments, capture_output=True, timeout=10, check=False, env=os.environ)
            except (OSError, subprocess.TimeoutExpired):
                result = None
            samples = parse_nvidia_smi(result.stdout.decode("utf-8", "replace")) if result else []
            if result is None or result.returncode != 0 or not samples:
                failures += 1  # no driver, or a broken one: give up after a few tries
            else:
                failures = 0
                at = time.time()
                text = "".join(json.dumps({"at": at, **sample}) + "\n" for sample in samples)
                with open(self.job_dir / "gpu.jsonl", "a") as samples_file:
                    samples_file.write(text)
            stop.wait(interval)
