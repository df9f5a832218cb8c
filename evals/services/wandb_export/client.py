"""Opening a W&B run with an organization's credentials, and recording how logging went.

The one place that imports the ``wandb`` SDK (slow to import: only when something is
logged) and that reads the W&B key. A W&B run id is derived from our id
(``agentops-run-<id>``, ``agentops-experiment-<id>``) and opened with ``resume="allow"``,
so logging the same thing again updates the same W&B run instead of adding one.
"""

from __future__ import annotations

from typing import Any

from django.conf import settings
from django.utils import timezone

from agentops.netguard import UnsafeUrlError
from agentops.services.secrets import provider_credentials
from evals.models import WandbExport
from runs.models import IngestSettings

Mode = IngestSettings.WandbLogging


class WandbRefused(Exception):
    """Logging cannot work until someone changes a setting (retrying will not help)."""


def logging_mode(project) -> str:
    """What the project sends to W&B (its settings; experiments only when never saved)."""
    mode = IngestSettings.objects.filter(project=project).values_list("wandb_logging", flat=True).first()
    return mode or Mode.EXPERIMENTS


def credentials(organization) -> tuple[str, str] | None:
    """The W&B key and base URL, ``None`` when no key is saved; ``WandbRefused`` when the
    saved base URL is no longer allowed (WANDB_ALLOWED_BASE_URLS) or not public."""
    try:
        return provider_credentials(organization=organization, provider="wandb")
    except UnsafeUrlError as exc:
        raise WandbRefused(f"the saved W&B base URL is refused: {exc}; save the W&B key again") from None


def start_run(*, credentials: tuple[str, str], run_id: str, **init: Any):
    """``wandb.init`` for one W&B run, resumed when it exists (idempotent)."""
    import wandb

    api_key, base_url = credentials
    options = {"mode": settings.WANDB_MODE, "api_key": api_key, "silent": True}
    if base_url:
        options["base_url"] = base_url
    try:
        return wandb.init(
            id=run_id,
            resume="allow",
            dir=str(settings.WANDB_DIR),
            settings=wandb.Settings(**options),
            reinit="create_new",
            **init,
        )
    except Exception:
        # A failed init leaves the run id taken in wandb's service process, so the retry
        # would fail with "run ID ... is in use": start the service afresh. Safe because a
        # worker process runs one task at a time (Celery's prefork pool, `serve` and compose).
        wandb.teardown()
        raise


def record(*, project, status: str, error: str = "", logged_at=None, attempt: bool = True, **target) -> None:
    """Store the outcome of logging a run or experiment (``target``: ``run_id=`` or
    ``experiment_id=``) on its ``WandbExport`` row."""
    now = timezone.now()
    export, _ = WandbExport.objects.get_or_create(
        **target, defaults={"organization_id": project.organization_id, "project": project}
    )
    export.status = status
    export.error = error[:2000]
    export.attempts = export.attempts + 1 if attempt else export.attempts
    if logged_at is not None:
        export.logged_at = logged_at
    export.updated_at = now
    export.save(update_fields=["status", "error", "attempts", "logged_at", "updated_at"])
