"""Invitations: create (email with a one-time link), revoke, accept.

The email leaves from a Celery task (agentops.tasks.send_invitation_email) that retries
with backoff, so an unreachable mail server never fails the request that stored the
invitation: the answer is 201 and the members page says the email is queued, sent, or
failed (after the last retry, with the reason). The link holds the one-time token, so
it travels to the task encrypted (agentops.crypto), never in plain text in the broker."""

from __future__ import annotations

import hashlib
import logging
import secrets
from datetime import timedelta

from allauth.account.models import EmailAddress
from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, models, transaction
from django.urls import reverse
from django.utils import timezone

from agentops import crypto
from agentops.errors import Conflict, Forbidden, InvalidRequest, NotFound
from agentops.models import Invitation, Membership
from agentops.roles import Role
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.audit import audit_record
from agentops.services.organizations import role_can_assign
from agentops.tasks import send_invitation_email

INVITATION_LIFETIME = timedelta(days=7)
logger = logging.getLogger(__name__)


def hash_token(token: str) -> str:
    return hashlib.sha256(token.encode()).hexdigest()


def invitation_create(
    *, actor_membership: Membership, email: str, role: str, base_url: str, ip: str | None = None
) -> tuple[Invitation, str]:
    """Invite ``email`` with ``role``; return the invitation and its one-time token."""
    email = email.strip().lower()
    if "@" not in email:
        raise InvalidRequest("enter a valid email address")
    if role not in Role.values:
        raise InvalidRequest(f"unknown role '{role}'; choose one of {', '.join(Role.values)}")
    if not role_can_assign(actor_membership.role, role):
        raise Forbidden(f"your role ({actor_membership.role}) cannot invite someone as {role}")
    organization = actor_membership.organization
    if Membership.objects.filter(organization=organization, user__email__iexact=email).exists():
        raise Conflict(f"{email} is already a member of this organization")
    token = secrets.token_urlsafe(32)
    try:
        with transaction.atomic():
            # An expired invitation no longer blocks the address: close it (its status
            # stays "expired", since it is closed after its expiry).
            Invitation.objects.filter(
                organization=organization,
                email__iexact=email,
                accepted_at__isnull=True,
                revoked_at__isnull=True,
                expires_at__lte=timezone.now(),
            ).update(revoked_at=timezone.now())
            invitation = Invitation.objects.create(
                organization=organization,
                email=email,
                role=role,
                token_hash=hash_token(token),
                invited_by=actor_membership.user,
                expires_at=timezone.now() + INVITATION_LIFETIME,
            )
            audit_record(
                organization=organization,
                actor=actor_membership.user,
                action="invitation.create",
                target=invitation,
                data={"email": email, "role": role},
                ip=ip,
            )
    except IntegrityError:
        raise Conflict(f"{email} already has an open invitation; revoke it to send a new one") from None
    link = base_url.rstrip("/") + reverse("invitation_accept", kwargs={"token": token})
    # Queued after commit so a rolled-back invitation never reaches an inbox.
    transaction.on_commit(lambda: _queue_invitation_email(invitation, link))
    return invitation, token


def _queue_invitation_email(invitation: Invitation, link: str) -> None:
    try:
        send_invitation_email.delay(invitation.organization_id, invitation.pk, crypto.encrypt(link))
    except Exception as exc:  # noqa: BLE001 - the invitation is stored; say why no email will come
        logger.warning("invitation %s: the email could not be queued: %s", invitation.pk, exc)
        invitation_email_failed(invitation_id=invitation.pk, error=f"the email could not be queued: {exc}", final=True)


def invitation_email_send(*, invitation_id: int, link: str) -> bool:
    """Send the invitation's email unless it was sent already or the invitation is no
    longer open; True when it was sent now. Errors of the mail server propagate (the
    task retries them)."""
    with dangerously_unscoped("the email task re-enters by id; the invitation names its organization"):
        invitation = Invitation.objects.select_related("organization").filter(pk=invitation_id).first()
    if invitation is None or invitation.email_sent_at or invitation.status != "pending":
        return False
    organization = invitation.organization
    with organization_scope(organization):
        Invitation.objects.filter(pk=invitation.pk).update(email_attempts=models.F("email_attempts") + 1)
        send_mail(
            subject=f"{settings.ACCOUNT_EMAIL_SUBJECT_PREFIX}You are invited to {organization.name}",
            message=(
                f"You have been invited to join {organization.name} on AgentOps Studio as {invitation.role}.\n\n"
                f"Accept the invitation: {link}\n\n"
                f"The link expires on {invitation.expires_at:%Y-%m-%d %H:%M} UTC."
            ),
            from_email=None,
            recipient_list=[invitation.email],
        )
        Invitation.objects.filter(pk=invitation.pk).update(
            email_sent_at=timezone.now(), email_error="", email_failed_at=None
        )
    return True


def invitation_email_failed(*, invitation_id: int, error: str, final: bool) -> None:
    """Record why the invitation's email did not leave; ``final`` once no retry is left
    (the members page then shows it as failed, with the reason)."""
    changes = {"email_error": error[:1000]}
    if final:
        changes["email_failed_at"] = timezone.now()
    with dangerously_unscoped("the email task re-enters by id"):
        Invitation.objects.filter(pk=invitation_id, email_sent_at__isnull=True).update(**changes)


def invitation_revoke(*, actor_membership: Membership, invitation: Invitation, ip: str | None = None) -> Invitation:
    """Revoke an open invitation so its link stops working."""
    if not role_can_assign(actor_membership.role, invitation.role):
        raise Forbidden(f"your role ({actor_membership.role}) cannot revoke an invitation as {invitation.role}")
    with transaction.atomic():
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if invitation.status != "pending":
            raise Conflict(f"this invitation is already {invitation.status}")
        invitation.revoked_at = timezone.now()
        invitation.save(update_fields=["revoked_at"])
        audit_record(
            organization=invitation.organization,
            actor=actor_membership.user,
            action="invitation.revoke",
            target=invitation,
            ip=ip,
        )
    return invitation


def invitation_for_token(token: str) -> Invitation:
    """The invitation a link's token names, across organizations (the token is the
    credential, the organization is not known yet)."""
    with dangerously_unscoped("an invitation link names its organization only by token"):
        invitation = Invitation.objects.select_related("organization").filter(token_hash=hash_token(token)).first()
    if invitation is None:
        raise NotFound("this invitation link is not valid")
    return invitation


def invitation_accept(*, token: str, user, ip: str | None = None) -> Membership:
    """Join the organization with the invited role. The user's verified email must be
    the invited address, so a forwarded link cannot be used by someone else."""
    invitation = invitation_for_token(token)
    organization = invitation.organization
    with organization_scope(organization), transaction.atomic():
        invitation = Invitation.objects.select_for_update().get(pk=invitation.pk)
        if invitation.status != "pending":
            raise Conflict(f"this invitation is {invitation.status}; ask for a new one")
        verified = EmailAddress.objects.filter(user=user, email__iexact=invitation.email, verified=True).exists()
        if not verified:
            raise Forbidden(
                f"this invitation is for {invitation.email}; sign in with that address (verified) to accept it"
            )
        if Membership.objects.filter(organization=organization, user=user).exists():
            raise Conflict("you are already a member of this organization")
        membership = Membership.objects.create(organization=organization, user=user, role=invitation.role)
        invitation.accepted_at = timezone.now()
        invitation.accepted_by = user
        invitation.save(update_fields=["accepted_at", "accepted_by"])
        audit_record(
            organization=organization,
            actor=user,
            action="invitation.accept",
            target=invitation,
            data={"role": invitation.role},
            ip=ip,
        )
    return membership
