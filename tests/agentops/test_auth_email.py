"""Email and password accounts through allauth's real forms: sign-up with mandatory
email verification, login, and password reset by email.

Assertions are on status codes, redirects, the session, the database and the outbox,
never on page wording (the templates change independently).
"""

from __future__ import annotations

import re

import pytest
import redis
from allauth.account.models import EmailAddress
from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.cache import cache
from django.test import Client
from django.urls import reverse

from tests.agentops.factories import PASSWORD, UserFactory

pytestmark = pytest.mark.django_db

User = get_user_model()

NEW_PASSWORD = "a-brand-new-passphrase-42"


@pytest.fixture(autouse=True)
def fresh_allauth_rate_limits():
    """allauth keeps its rate limits (one confirmation email per address every three
    minutes, sign-ups and logins per IP) in the Redis cache, which outlives a test;
    without this, one test's sign-up silently suppresses the next test's email. Only
    this run's keys are removed (the cache's key prefix is unique to the run)."""
    client = redis.Redis.from_url(settings.CACHES["default"]["LOCATION"])
    try:
        for key in client.scan_iter(match=cache.make_key("allauth:rl:*")):
            client.delete(key)
    finally:
        client.close()


def signed_in_user_id(client) -> int | None:
    user_id = client.session.get("_auth_user_id")
    return int(user_id) if user_id is not None else None


def link_in(message, path_prefix: str) -> str:
    """The path of the one link in ``message`` that starts with ``path_prefix``."""
    links = re.findall(r"https?://[^/\s]+(" + re.escape(path_prefix) + r"[^\s]*)", message.body)
    assert len(links) == 1, f"expected one {path_prefix} link in:\n{message.body}"
    return links[0]


def sign_up(client, email: str):
    return client.post(reverse("account_signup"), {"email": email, "password1": PASSWORD, "password2": PASSWORD})


def log_in(client, email: str, password: str = PASSWORD):
    return client.post(reverse("account_login"), {"login": email, "password": password})


def confirm_email(client, message) -> None:
    """Follow the confirmation link from ``message`` and confirm, as a browser would:
    the link shows a page whose form POSTs to the same URL."""
    path = link_in(message, "/accounts/confirm-email/")
    assert client.get(path).status_code == 200
    response = client.post(path)
    assert response.status_code == 302


def test_sign_up_does_not_log_in_until_email_is_confirmed(client, mailoutbox):
    response = sign_up(client, "erin@example.com")

    assert response.status_code == 302
    assert response["Location"] == reverse("account_email_verification_sent")
    assert signed_in_user_id(client) is None
    assert client.get("/api/v1/me/").status_code == 401
    user = User.objects.get(email="erin@example.com")
    assert EmailAddress.objects.get(user=user).verified is False
    assert [message.to for message in mailoutbox] == [["erin@example.com"]]


def test_following_the_confirmation_link_verifies_the_address_and_logs_in(client, mailoutbox):
    sign_up(client, "erin@example.com")

    confirm_email(client, mailoutbox[0])

    user = User.objects.get(email="erin@example.com")
    assert EmailAddress.objects.get(user=user).verified is True
    assert signed_in_user_id(client) == user.pk
    me = client.get("/api/v1/me/")
    assert me.status_code == 200
    assert me.json()["user"]["email"] == "erin@example.com"


def test_account_emails_name_the_platform_and_its_host_not_example_com(client, mailoutbox):
    # Django's default Site row is "example.com"; the emails must not say so.
    sign_up(client, "new@example.org")
    client.post(reverse("account_reset_password"), {"email": "new@example.org"})
    assert len(mailoutbox) == 2
    for message in mailoutbox:
        assert "example.com" not in message.body
        assert "AgentOps Studio" in message.body and "testserver" in message.body


def test_confirming_in_another_browser_verifies_but_does_not_log_in(client, mailoutbox):
    # Whoever holds the link (a mail scanner, a forwarded message) must not get a session
    # for the account: ACCOUNT_LOGIN_ON_EMAIL_CONFIRMATION only applies to the browser
    # that signed up.
    sign_up(client, "erin@example.com")
    other_browser = Client()

    confirm_email(other_browser, mailoutbox[0])

    user = User.objects.get(email="erin@example.com")
    assert EmailAddress.objects.get(user=user).verified is True
    assert signed_in_user_id(other_browser) is None


def test_login_with_unverified_email_is_refused_until_verified(client, mailoutbox):
    sign_up(client, "erin@example.com")
    confirmation = mailoutbox[0]
    browser = Client()

    response = log_in(browser, "erin@example.com")

    # The password is right, but the address is not confirmed: allauth answers with the
    # "confirmation email sent" page (it resends the email unless one went out in the
    # last three minutes, ACCOUNT_EMAIL_CONFIRMATION_COOLDOWN) and signs nobody in.
    assert response.status_code == 302
    assert response["Location"] == reverse("account_email_verification_sent")
    assert signed_in_user_id(browser) is None
    assert browser.get("/api/v1/me/").status_code == 401

    confirm_email(browser, confirmation)
    browser.post(reverse("account_logout"))
    assert signed_in_user_id(browser) is None
    response = log_in(browser, "erin@example.com")

    assert response.status_code == 302
    assert response["Location"] == reverse("home")
    assert signed_in_user_id(browser) == User.objects.get(email="erin@example.com").pk


def test_login_with_email_and_password_works_for_verified_user(client):
    user = UserFactory(email="frank@example.com")

    response = log_in(client, "frank@example.com")

    assert response.status_code == 302
    assert response["Location"] == reverse("home")
    assert signed_in_user_id(client) == user.pk
    assert client.get("/api/v1/me/").json()["user"]["email"] == "frank@example.com"


def test_login_with_wrong_password_is_refused(client):
    UserFactory(email="frank@example.com")

    response = log_in(client, "frank@example.com", password="not-the-password")

    assert response.status_code == 200  # the form again, with an error
    assert signed_in_user_id(client) is None


def test_password_reset_link_sets_a_new_password_that_logs_in(client, mailoutbox):
    user = UserFactory(email="grace@example.com")

    response = client.post(reverse("account_reset_password"), {"email": "grace@example.com"})

    assert response.status_code == 302
    assert response["Location"] == reverse("account_reset_password_done")
    assert [message.to for message in mailoutbox] == [["grace@example.com"]]
    # The link carries the key once; allauth moves it into the session and redirects to
    # a key-less URL, so the key does not leak through the Referer header.
    response = client.get(link_in(mailoutbox[0], "/accounts/password/reset/key/"))
    assert response.status_code == 302
    set_password_path = response["Location"]
    assert client.get(set_password_path).status_code == 200
    response = client.post(set_password_path, {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD})
    assert response.status_code == 302
    assert response["Location"] == reverse("account_reset_password_from_key_done")

    browser = Client()
    assert log_in(browser, "grace@example.com", password=PASSWORD).status_code == 200
    assert signed_in_user_id(browser) is None
    response = log_in(browser, "grace@example.com", password=NEW_PASSWORD)
    assert response.status_code == 302
    assert signed_in_user_id(browser) == user.pk


def test_password_reset_link_works_only_once(client, mailoutbox):
    UserFactory(email="grace@example.com")
    client.post(reverse("account_reset_password"), {"email": "grace@example.com"})
    link = link_in(mailoutbox[0], "/accounts/password/reset/key/")
    set_password_path = client.get(link)["Location"]
    client.post(set_password_path, {"password1": NEW_PASSWORD, "password2": NEW_PASSWORD})

    browser = Client()
    set_password_path = browser.get(link).get("Location", link)
    response = browser.post(
        set_password_path, {"password1": "another-passphrase-77", "password2": "another-passphrase-77"}
    )

    assert response.status_code == 200  # the "bad token" page, not a redirect to done
    assert User.objects.get(email="grace@example.com").check_password(NEW_PASSWORD)


def test_password_reset_for_unknown_address_answers_like_a_known_one(client, mailoutbox):
    # ACCOUNT_PREVENT_ENUMERATION: the form does not reveal whether an account exists.
    UserFactory(email="grace@example.com")

    known = client.post(reverse("account_reset_password"), {"email": "grace@example.com"})
    unknown = Client().post(reverse("account_reset_password"), {"email": "nobody@example.com"})

    assert (unknown.status_code, unknown["Location"]) == (known.status_code, known["Location"])
    reset_links = [message for message in mailoutbox if "/accounts/password/reset/key/" in message.body]
    assert [message.to for message in reset_links] == [["grace@example.com"]]
