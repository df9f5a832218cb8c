"""Shared by the Hub kinds' tests: an hf_hub destination on the fake Hub, and a job
created and run here as the worker's task does."""

from __future__ import annotations

import json

from agentops.scoping import organization_scope
from evals.bulk_export import services
from evals.bulk_export.runner import export_run
from evals.models import ExportDestination, ExportJob
from tests.fake_hf_hub import ORG, TOKEN


def hub_destination(tenant, hub, *, token: str = TOKEN, name: str = "hub") -> ExportDestination:
    with organization_scope(tenant.organization):
        return services.destination_create(
            organization=tenant.organization,
            actor=tenant.admin,
            name=name,
            kind="hf_hub",
            config={"endpoint": hub.url, "namespace": ORG},
            credentials={"token": token},
        )


def run_job(tenant, destination, kind: str, options: dict) -> ExportJob:
    """Create the job and run it here, as the worker's task does."""
    with organization_scope(tenant.organization):
        job = services.export_create(
            project=tenant.project, actor=tenant.admin, destination_id=destination.pk, kind=kind, options=options
        )
        export_run(export_id=job.pk, worker="test")
        job.refresh_from_db()
    return job


def jsonl(data: bytes) -> list[dict]:
    return [json.loads(line) for line in data.decode().splitlines()]
