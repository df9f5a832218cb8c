"""Tasks of the core: invitation emails, and periodic housekeeping (scheduled by beat,
see CELERY_BEAT_SCHEDULE)."""

import smtplib
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from agentops import crypto
from agentops.models import Invitation
from agentops.scoping import dangerously_unscoped

# 6 attempts over about 5 minutes (settings.INVITATION_EMAIL_RETRY_SECONDS, 10 s, doubling:
# 10, 20, 40, 80, 160 s apart): a mail server that is restarting is waited for; one that
# stays away fails the email, recorded on the invitation.
INVITATION_EMAIL_RETRIES = 5


@shared_task(bind=True, acks_late=True, reject_on_worker_lost=True, max_retries=INVITATION_EMAIL_RETRIES)
def send_invitation_email(self, organization_id: int, invitation_id: int, encrypted_link: str) -> bool:
    """Email an invitation's link; retried with backoff while the mail server fails."""
    from agentops.services.invitations import invitation_email_failed, invitation_email_send

    try:
        return invitation_email_send(invitation_id=invitation_id, link=crypto.decrypt(encrypted_link))
    except (OSError, smtplib.SMTPException) as exc:  # refused, timed out, or the server said no
        error = f"the mail server failed: {exc}" if str(exc) else f"the mail server failed: {type(exc).__name__}"
        final = self.request.retries >= self.max_retries
        invitation_email_failed(invitation_id=invitation_id, error=error, final=final)
        if final:
            return False
        raise self.retry(countdown=settings.INVITATION_EMAIL_RETRY_SECONDS * 2**self.request.retries) from exc


@shared_task
def purge_expired_idempotency_keys() -> int:
    from agentops.services.idempotency import idempotency_purge_expired

    return idempotency_purge_expired()


@shared_task
def purge_old_invitations() -> int:
    """Delete invitations that expired unanswered more than 30 days ago (an expired
    invitation already refuses acceptance; this keeps the table small)."""
    cutoff = timezone.now() - timedelta(days=30)
    with dangerously_unscoped("periodic clean-up of long-expired invitations"):
        deleted, _ = Invitation.objects.filter(accepted_at__isnull=True, expires_at__lte=cutoff).delete()
    return deleted
