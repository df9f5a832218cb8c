"""Per-project settings of the data: redaction rules, retention, W&B logging."""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from agentops.errors import InvalidRequest
from agentops.services.audit import audit_record
from runs.models import IngestSettings
from runs.services.redaction import validate_custom_pattern


def ingest_settings_get(*, project) -> IngestSettings:
    """The project's settings (defaults when never saved)."""
    return IngestSettings.objects.filter(project=project).first() or IngestSettings(
        organization_id=project.organization_id, project=project
    )


def ingest_settings_update(
    *,
    project,
    actor,
    redact: list[str],
    custom_patterns: list[str],
    retention_days: int | None,
    wandb_logging: str | None = None,
    ip: str | None = None,
) -> IngestSettings:
    """Save the project's redaction rules and retention (applies to data stored from now on),
    and what it logs to W&B (``None`` keeps the current choice)."""
    unknown = [name for name in redact if name not in IngestSettings.Redaction.values]
    if unknown:
        raise InvalidRequest(
            f"unknown redaction rule {unknown[0]!r}; choose from {', '.join(IngestSettings.Redaction.values)}"
        )
    try:
        custom_patterns = [validate_custom_pattern(p) for p in custom_patterns if p]
    except ValueError as exc:
        raise InvalidRequest(str(exc)) from None
    if retention_days is not None and not 1 <= retention_days <= 3650:
        raise InvalidRequest("retention must be between 1 and 3650 days, or empty to keep runs")
    if wandb_logging is not None and wandb_logging not in IngestSettings.WandbLogging.values:
        raise InvalidRequest(
            f"unknown W&B logging {wandb_logging!r}; choose from {', '.join(IngestSettings.WandbLogging.values)}"
        )
    with transaction.atomic():
        settings, _ = IngestSettings.objects.select_for_update().get_or_create(
            project=project, defaults={"organization_id": project.organization_id}
        )
        settings.redact = sorted(set(redact))
        settings.custom_patterns = custom_patterns
        settings.retention_days = retention_days
        if wandb_logging is not None:
            settings.wandb_logging = wandb_logging
        settings.updated_at = timezone.now()
        settings.save()
        audit_record(
            organization=project.organization,
            actor=actor,
            action="project.ingest_settings",
            target=project,
            data={
                "redact": settings.redact,
                "custom_patterns": len(custom_patterns),
                "retention_days": retention_days,
                "wandb_logging": settings.wandb_logging,
            },
            ip=ip,
        )
    return settings
