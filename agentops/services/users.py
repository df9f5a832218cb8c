"""Users created by operators (commands and the demo), with a verified address."""

from __future__ import annotations

import secrets

from allauth.account.models import EmailAddress
from django.contrib.auth import get_user_model
from django.db import transaction


def user_get_or_create_verified(*, email: str, password: str | None = None) -> tuple[object, str | None]:
    """The user with ``email``, created if missing with a verified address (an
    operator vouches for it). Returns the user and the password set, if one was."""
    User = get_user_model()
    email = email.strip().lower()
    with transaction.atomic():
        user = User.objects.filter(email__iexact=email).first()
        created_password = None
        if user is None:
            username = email.split("@")[0][:100] + "-" + secrets.token_hex(3)
            user = User.objects.create(username=username, email=email)
            created_password = password or secrets.token_urlsafe(12)
        elif password:
            created_password = password
        if created_password:
            user.set_password(created_password)
            user.save(update_fields=["password"])
        address, _ = EmailAddress.objects.get_or_create(user=user, email=email, defaults={"primary": True})
        if not address.verified:
            address.verified = True
            address.save(update_fields=["verified"])
    return user, created_password
