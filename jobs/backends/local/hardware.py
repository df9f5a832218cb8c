"""The hardware a local backend's host has: ``detect_hardware`` (the catalog's CPU
entries, and each GPU entry ``nvidia-smi`` reports by name with enough memory, kept for
a minute) and ``parse_nvidia_smi`` (the GPU samples the supervisor takes while a job
runs). Standard library only at the top: the catalog is read when hardware is detected,
never in the supervisor.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import time

# nvidia-smi's answer (the host's GPUs) is kept this long per executable.
HARDWARE_CACHE_SECONDS = 60.0
# A GPU is the catalog's when its name says so and it has at least this share of the
# catalog's memory (an A100 40GB is no "a100", which is the 80 GB one).
_GPU_MEMORY_SHARE = 0.9


_detected: dict[str, tuple[float, tuple[str, ...]]] = {}


def detect_hardware(nvidia_smi: str = "nvidia-smi") -> tuple[str, ...]:
    """The catalog hardware this host has, in catalog order: every CPU entry, and each
    GPU entry ``nvidia-smi`` reports (by name, with enough memory). Asked again after
    HARDWARE_CACHE_SECONDS."""
    from jobs.hardware import CATALOG

    now = time.monotonic()
    cached = _detected.get(nvidia_smi)
    if cached is not None and now - cached[0] < HARDWARE_CACHE_SECONDS:
        return cached[1]
    gpus = query_gpus(nvidia_smi)
    offered = []
    for name, hardware in CATALOG.items():
        if hardware.gpus == 0:
            offered.append(name)
            continue
        pattern = re.compile(rf"(?<![A-Z0-9]){re.escape(name.upper())}(?![A-Z0-9])")
        needed_mib = hardware.gpu_memory_gib * 1024 * _GPU_MEMORY_SHARE
        if any(pattern.search(gpu_name.upper()) and memory >= needed_mib for gpu_name, memory in gpus):
            offered.append(name)
    _detected[nvidia_smi] = (now, tuple(offered))
    return tuple(offered)


def query_gpus(nvidia_smi: str = "nvidia-smi") -> list[tuple[str, float]]:
    """(name, memory in MiB) of each GPU ``nvidia-smi`` lists; [] without one."""
    executable = shutil.which(nvidia_smi)
    if executable is None:
        return []
    try:
        result = subprocess.run(
            [executable, "--query-gpu=name,memory.total", "--format=csv,noheader,nounits"],
            capture_output=True,
            timeout=10,
            check=False,
        )
    except (OSError, subprocess.TimeoutExpired):
        return []
    if result.returncode != 0:
        return []
    gpus = []
    for line in result.stdout.decode("utf-8", "replace").splitlines():
        name, _, memory = line.rpartition(",")
        try:
            gpus.append((name.strip(), float(memory)))
        except ValueError:
            continue
    return gpus


def parse_nvidia_smi(text: str) -> list[dict]:
    """Samples from ``nvidia-smi --query-gpu=index,utilization.gpu,memory.used,
    memory.total --format=csv,noheader,nounits`` ("[N/A]" becomes None)."""

    def number(value: str) -> float | None:
        try:
            return float(value)
        except ValueError:
            return None

    samples = []
    for line in text.splitlines():
        fields = [field.strip() for field in line.split(",")]
        if len(fields) != 4 or not fields[0].isdigit():
            continue
        samples.append(
            {
                "gpu_index": int(fields[0]),
                "utilization_percent": number(fields[1]),
                "memory_used_mib": number(fields[2]),
                "memory_total_mib": number(fields[3]),
            }
        )
    return samples
