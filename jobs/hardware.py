"""The hardware catalog: the machine types a job can ask for, whatever the backend.
Each backend maps a type to its own flavor or resources; the hourly rate comes from
billing's price catalog (``kind = gpu``), a backend's own price first."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime


@dataclass(frozen=True)
class Hardware:
    name: str
    label: str
    gpus: int
    gpu_memory_gib: int
    cpus: int
    memory_gib: int


CATALOG: dict[str, Hardware] = {
    hardware.name: hardware
    for hardware in (
        Hardware("cpu-basic", "CPU basic (2 vCPU, 16 GiB)", 0, 0, 2, 16),
        Hardware("t4", "NVIDIA T4 (16 GB)", 1, 16, 4, 15),
        Hardware("l4", "NVIDIA L4 (24 GB)", 1, 24, 8, 30),
        Hardware("a10g", "NVIDIA A10G (24 GB)", 1, 24, 4, 15),
        Hardware("a100", "NVIDIA A100 (80 GB)", 1, 80, 12, 142),
        Hardware("h100", "NVIDIA H100 (80 GB)", 1, 80, 23, 240),
        Hardware("h200", "NVIDIA H200 (141 GB)", 1, 141, 23, 256),
    )
}

# The name a backend's prices carry in the price catalog (its `provider`).
PRICE_PROVIDER = {"hf_jobs": "huggingface"}


def hardware_get(name: str) -> Hardware | None:
    return CATALOG.get(name)


def hourly_rate(*, hardware: str, backend_kind: str, organization_id: int, at: datetime | None = None):
    """The price row (billing.services.PublishedPrice) of an hour of ``hardware`` on a backend of
    ``backend_kind``, or None when the catalog has no price for it."""
    # Imported here: the catalog itself is read without Django (the local backend's
    # supervisor and hardware detection).
    from billing.services import gpu_hourly_rate

    return gpu_hourly_rate(
        hardware=hardware,
        backend=PRICE_PROVIDER.get(backend_kind, backend_kind),
        at=at,
        organization_id=organization_id,
    )
