"""Login with a generic OpenID Connect provider, end to end.

Each test drives the whole authorization-code flow against a real provider on
127.0.0.1 (tests/oidc_provider.py): the Django test client starts the login at allauth,
the provider's authorization form is submitted as a chosen subject with chosen claims,
and the browser comes back to allauth's callback, which then fetches the token and the
userinfo from the provider over HTTP. Nothing in allauth or the app is mocked.
"""

from __future__ import annotations

import pytest
from allauth.account.models import EmailAddress
from allauth.socialaccount.models import SocialAccount
from django.contrib.auth import get_user_model
from django.test import Client
from django.urls import reverse

from tests import oidc_provider as local_idp
from tests.agentops.factories import PASSWORD, UserFactory
from tests.oidc_provider import LOGIN_PATH, PROVIDER_ID, OidcProvider

# The provider's fixtures, assigned here so that pytest finds them for these tests.
oidc_provider = local_idp.oidc_provider
mock_idp = local_idp.mock_idp

pytestmark = [pytest.mark.django_db, local_idp.IGNORE_PROVIDER_WARNINGS]

User = get_user_model()


def start_login(client, idp: OidcProvider) -> str:
    """Press "Sign in with Mock IdP"; return the provider's authorization URL."""
    response = client.post(LOGIN_PATH)
    assert response.status_code == 302
    assert response["Location"].startswith(f"{idp.url}/oauth2/authorize?")
    return response["Location"]


def log_in_with_provider(client, idp: OidcProvider, sub: str, **claims):
    """Sign in at the provider as ``sub`` with ``claims``; return allauth's answer to
    the callback."""
    idp.set_user(sub, **claims)
    callback = idp.authorize(start_login(client, idp), sub)
    return client.get(callback)


def signed_in_user_id(client) -> int | None:
    user_id = client.session.get("_auth_user_id")
    return int(user_id) if user_id is not None else None


def test_oidc_login_with_verified_email_creates_and_signs_in_user(client, mock_idp):
    response = log_in_with_provider(client, mock_idp, "sub-new", email="new@example.com", email_verified=True)

    assert response.status_code == 302
    assert response["Location"] == reverse("home")
    user = User.objects.get(email="new@example.com")
    assert signed_in_user_id(client) == user.pk
    me = client.get("/api/v1/me/")
    assert me.status_code == 200
    assert me.json()["user"]["email"] == "new@example.com"
    account = SocialAccount.objects.get(user=user)
    assert (account.provider, account.uid) == (PROVIDER_ID, "sub-new")
    assert EmailAddress.objects.get(user=user, email="new@example.com").verified is True
    # A user who signed up through the provider has no password to steal or guess.
    assert not user.has_usable_password()


def test_oidc_login_again_signs_in_same_user(client, mock_idp):
    log_in_with_provider(client, mock_idp, "sub-returning", email="back@example.com", email_verified=True)
    first_user_id = signed_in_user_id(client)
    assert first_user_id is not None
    client.post(reverse("account_logout"))
    assert signed_in_user_id(client) is None

    response = log_in_with_provider(client, mock_idp, "sub-returning", email="back@example.com", email_verified=True)

    assert response.status_code == 302
    assert response["Location"] == reverse("home")
    assert signed_in_user_id(client) == first_user_id
    assert User.objects.count() == 1
    assert SocialAccount.objects.filter(provider=PROVIDER_ID, uid="sub-returning").count() == 1


def test_unverified_oidc_email_cannot_take_over_existing_account(client, mock_idp):
    alice = UserFactory(email="alice@example.com")

    response = log_in_with_provider(client, mock_idp, "sub-attacker", email="alice@example.com", email_verified=False)

    # allauth does not sign up from an unverified address (agentops.auth): it asks for
    # an email address on its social sign-up form instead, signed in as nobody.
    assert response.status_code == 302
    assert response["Location"] == reverse("socialaccount_signup")
    assert signed_in_user_id(client) is None
    assert SocialAccount.objects.filter(user=alice).count() == 0

    # Completing that form with alice's address still gets no further: with enumeration
    # prevention allauth answers as if it sent a confirmation email (it tells alice
    # instead), and creates no account.
    response = client.post(reverse("socialaccount_signup"), {"email": "alice@example.com"})

    assert response.status_code == 302
    assert response["Location"] == reverse("account_email_verification_sent")
    assert signed_in_user_id(client) is None
    assert SocialAccount.objects.filter(user=alice).count() == 0
    assert SocialAccount.objects.count() == 0
    assert list(User.objects.filter(email__iexact="alice@example.com")) == [alice]
    alice.refresh_from_db()
    assert alice.check_password(PASSWORD)


def test_verified_oidc_email_does_not_auto_connect_to_existing_account(client, mock_idp):
    """SOCIALACCOUNT_EMAIL_AUTHENTICATION is off: a generic OIDC provider is not trusted
    to say who owns a local account, even when it claims the address is verified
    (anyone can run a provider that says so). The login ends on the "confirmation email
    sent" page, as a sign-up with a taken address does, and nobody is signed in."""
    alice = UserFactory(email="alice@example.com")

    response = log_in_with_provider(client, mock_idp, "sub-other", email="alice@example.com", email_verified=True)

    assert response.status_code == 302
    assert response["Location"] == reverse("account_email_verification_sent")
    assert signed_in_user_id(client) is None
    assert client.get("/api/v1/me/").status_code == 401
    assert SocialAccount.objects.filter(user=alice).count() == 0
    assert SocialAccount.objects.count() == 0
    assert list(User.objects.filter(email__iexact="alice@example.com")) == [alice]


def test_unverified_oidc_email_for_new_address_must_be_confirmed_before_login(client, mailoutbox, mock_idp):
    response = log_in_with_provider(client, mock_idp, "sub-unverified", email="carol@example.com", email_verified=False)
    assert response["Location"] == reverse("socialaccount_signup")

    response = client.post(reverse("socialaccount_signup"), {"email": "carol@example.com"})

    assert response.status_code == 302
    assert response["Location"] == reverse("account_email_verification_sent")
    assert signed_in_user_id(client) is None
    carol = User.objects.get(email="carol@example.com")
    assert EmailAddress.objects.get(user=carol).verified is False
    assert [message.to for message in mailoutbox] == [["carol@example.com"]]
    assert SocialAccount.objects.get(provider=PROVIDER_ID, uid="sub-unverified").user == carol


def test_oidc_email_verified_sent_as_string_is_not_trusted(client, mock_idp):
    # The OIDC claim is a boolean; a provider that sends the string "false" (truthy in
    # Python) must not get its address treated as verified.
    response = log_in_with_provider(client, mock_idp, "sub-string", email="dave@example.com", email_verified="false")

    assert response.status_code == 302
    assert response["Location"] == reverse("socialaccount_signup")
    assert signed_in_user_id(client) is None
    assert not User.objects.filter(email="dave@example.com").exists()


def test_denied_oidc_authorization_leaves_user_signed_out(client, mock_idp):
    callback = mock_idp.deny(start_login(client, mock_idp))
    assert "error=access_denied" in callback

    response = client.get(callback)

    assert response.status_code == 302
    assert response["Location"] == reverse("socialaccount_login_cancelled")
    assert signed_in_user_id(client) is None
    assert User.objects.count() == 0
    assert SocialAccount.objects.count() == 0


def test_oidc_callback_is_refused_in_a_session_that_did_not_start_the_login(client, django_user_model, mock_idp):
    """Login CSRF: an attacker's authorization code planted in a victim's browser must
    not sign the victim into the attacker's account. allauth ties the callback's
    `state` to the session that started the login."""
    mock_idp.set_user("sub-attacker", email="mallory@example.com", email_verified=True)
    callback = mock_idp.authorize(start_login(client, mock_idp), "sub-attacker")
    victim = Client()

    response = victim.get(callback)

    assert response.status_code == 401  # allauth's "login failure" page
    assert signed_in_user_id(victim) is None
    assert django_user_model.objects.count() == 0


def test_oidc_login_is_not_started_by_a_get_request(client, mock_idp):
    # SOCIALACCOUNT_LOGIN_ON_GET is off: a link or image on another site cannot send a
    # visitor off to the provider; the GET only shows a page with a button that POSTs.
    response = client.get(LOGIN_PATH)

    assert response.status_code == 200
    assert signed_in_user_id(client) is None
