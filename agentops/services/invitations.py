"""Invitations: create (email with a one-time link), revoke, accept."""

from __future__ import annotations

import hashlib
import secrets
from datetime import timedelta

from allauth.account.models import EmailAddress
from django.conf import settings
from django.core.mail import send_mail
from django.db import IntegrityError, transaction
from django.urls import reverse
from django.utils import timezone

from agentops.errors import Conflict, Forbidden, InvalidRequest, NotFound
from agentops.models import Invitation, Membership, Organization
from agentops.roles import Role
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.audit import audit_record
from agentops.services.organizations import role_can_assign

INVITATION_LIFETIME = timedelta(days=7)


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
    # Sent after commit so a rolled-back invitation never reaches an inbox.
    transaction.on_commit(lambda: _send_invitation_email(invitation, organization, link))
    return invitation, token


def _send_invitation_email(invitation: Invitation, organization: Organization, link: str) -> None:
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
