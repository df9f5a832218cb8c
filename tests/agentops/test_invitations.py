"""Invitation emails go out from a task that retries: no mail server answering never
fails the request that stored the invitation, and the members page says what happened."""

from __future__ import annotations

import socket
import time

import pytest
from django.core import mail

from agentops.models import Invitation
from tests.agentops.test_api_core import wait_for_mail

URL = "/api/v1/organizations/acme/invitations/"


def closed_port() -> int:
    """A loopback port nothing listens on: connecting is refused, as with a stopped mail server."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.fixture
def no_mail_server(settings):
    settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
    settings.EMAIL_HOST, settings.EMAIL_PORT, settings.EMAIL_USE_TLS = "127.0.0.1", closed_port(), False
    settings.EMAIL_TIMEOUT = 5
    settings.INVITATION_EMAIL_RETRY_SECONDS = 0
    return settings


def wait_for_invitation(pk: int, condition, what: str, timeout: float = 60) -> Invitation:
    deadline = time.monotonic() + timeout
    while True:
        invitation = Invitation.dangerously_unscoped_objects.get(pk=pk)
        if condition(invitation):
            return invitation
        assert time.monotonic() < deadline, f"{what} within {timeout} s: {invitation.__dict__}"
        time.sleep(0.05)


def test_an_invitation_is_created_while_no_mail_server_answers_and_its_failure_shown(
    tenant, client_for, celery_worker, no_mail_server
):
    response = client_for(tenant.admin).post(URL, {"email": "newbie@example.com", "role": "member"}, format="json")

    assert response.status_code == 201
    assert response.json()["status"] == "pending" and response.json()["email_status"] == "queued"
    failed = wait_for_invitation(response.json()["id"], lambda i: i.email_failed_at, "the email failing for good")
    assert failed.email_attempts == 6  # the first try and 5 retries
    assert "Connection refused" in failed.email_error
    listed = client_for(tenant.admin).get(URL).json()["results"][0]
    assert listed["email_status"] == "failed" and "Connection refused" in listed["email_error"]
    page = client_for(tenant.admin).get("/o/acme/members/").content.decode()
    assert "Email not sent:" in page and "Connection refused" in page


def test_the_email_goes_out_when_the_mail_server_comes_back(tenant, client_for, celery_worker, no_mail_server):
    no_mail_server.INVITATION_EMAIL_RETRY_SECONDS = 1
    response = client_for(tenant.admin).post(URL, {"email": "later@example.com", "role": "viewer"}, format="json")
    assert response.status_code == 201
    pk = response.json()["id"]
    retrying = wait_for_invitation(pk, lambda i: i.email_attempts >= 1 and i.email_error, "a first failure")
    assert retrying.email_status == "queued"
    page = client_for(tenant.admin).get("/o/acme/members/").content.decode()
    assert "Email queued (retrying: the mail server failed" in page

    no_mail_server.EMAIL_BACKEND = "django.core.mail.backends.locmem.EmailBackend"  # the server is back

    wait_for_mail(1)
    assert mail.outbox[0].to == ["later@example.com"]
    sent = wait_for_invitation(pk, lambda i: i.email_sent_at, "the invitation recording the email as sent")
    assert sent.email_status == "sent" and sent.email_error == "" and sent.email_failed_at is None
    assert "Email sent" in client_for(tenant.admin).get("/o/acme/members/").content.decode()
