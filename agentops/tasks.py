"""Periodic housekeeping of the core (scheduled by beat, see CELERY_BEAT_SCHEDULE)."""

from datetime import timedelta

from celery import shared_task
from django.utils import timezone

from agentops.models import Invitation
from agentops.scoping import dangerously_unscoped
from agentops.services.idempotency import idempotency_purge_expired


@shared_task
def purge_expired_idempotency_keys() -> int:
    return idempotency_purge_expired()


@shared_task
def purge_old_invitations() -> int:
    """Delete invitations that expired unanswered more than 30 days ago (an expired
    invitation already refuses acceptance; this keeps the table small)."""
    cutoff = timezone.now() - timedelta(days=30)
    with dangerously_unscoped("periodic clean-up of long-expired invitations"):
        deleted, _ = Invitation.objects.filter(accepted_at__isnull=True, expires_at__lte=cutoff).delete()
    return deleted
