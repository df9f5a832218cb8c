"""The local backend: a job is a subprocess on the worker's host, for development and
for teams with their own GPU box.

Every job gets a directory, ``<work_dir>/job-<id>-<random>``, and that directory is the
job's whole state, so any worker process on the host (including one started after a
restart) finds it again from its path, the job's ``external_id``:

- ``spec.json``      what to run (never the environment: it holds secrets);
- ``state.json``     written by the job's supervisor: its pid, the command's process
                     group, when it started and, once it ended, its state and exit code;
- ``output.log``     the command's stdout and stderr, as written;
- ``gpu.jsonl``      one sample per GPU every few seconds, when ``nvidia-smi`` exists;
- ``gpu.offset``     how far ``status`` has read ``gpu.jsonl``;
- ``cancel``         present once a cancel was asked for;
- ``supervisor.log`` the supervisor's own errors, if any.

``submit`` starts ``python -m jobs.backends.local run <job dir>``, which forks a
*supervisor* in a new session (so it is no child of the worker and outlives it) and
returns once the command is started. The supervisor runs the command in its own
process group, samples the GPUs, enforces the time limit and a cancel (SIGTERM to the
group, SIGKILL after a grace period), and writes the exit code when the command ends.
The modules of this package import at their top only the standard library and
``jobs.backends.base``, so the supervisor starts without Django.

Isolation (docs/jobs.md says what it covers and what it does not): the command runs as
``JOBS_LOCAL_USER``, a separate unprivileged user, never as root and never as the
worker's own user in production, in a *workspace* of its own
(``<tmp>/agentops-jobs-<worker uid>/job-...``, 0700, that user's, removed when the job
ends), with a clean environment: a fixed PATH, HOME = the workspace, the job's own
variables and secrets, and nothing of the worker's but the GPU selection
(``CUDA_VISIBLE_DEVICES``, ``NVIDIA_VISIBLE_DEVICES``) and what the backend's
``inherit_env`` names. The job's directory above stays the worker's (0700): the
command writes its output through the file descriptor it was given, and reads none of
the backend's files. The supervisor itself runs as the worker's user.

The hardware a local backend offers is what the host has: the CPU catalog entries, and
a GPU entry when ``nvidia-smi`` reports that GPU (its name, and at least nine tenths of
the catalog's memory); a backend's ``hardware`` setting can only narrow that.

POSIX only (process groups, signals, users). The image is ignored: the command runs on
the host.

The parts, each opening with its contract (none imports one that imports it: ``jobdir``,
``hardware`` and ``isolation`` at the bottom, then ``supervisor``, then ``backend``):

- ``backend``: ``LocalBackend``, the four calls, its settings and the hardware it offers;
- ``supervisor``: the process that runs one job, and the checks of a process's life;
- ``isolation``: the job's user, workspace and environment, and the host's policy;
- ``hardware``: what the host has (``nvidia-smi``), and the GPU samples it reports;
- ``jobdir``: the job's directory: its JSON files, its output read as lines, its samples;
- ``__main__``: ``python -m jobs.backends.local run <job dir>``.
"""

from jobs.backends.local.backend import LocalBackend
from jobs.backends.local.hardware import detect_hardware, parse_nvidia_smi, query_gpus
from jobs.backends.local.isolation import HostPolicy, default_workspace_root
from jobs.backends.local.jobdir import MAX_LINE_BYTES, MAX_LINES_PER_CALL

__all__ = [
    "MAX_LINES_PER_CALL",
    "MAX_LINE_BYTES",
    "HostPolicy",
    "LocalBackend",
    "default_workspace_root",
    "detect_hardware",
    "parse_nvidia_smi",
    "query_gpus",
]
