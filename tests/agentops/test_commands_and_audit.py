"""Operator commands, demo data and the append-only audit log."""

from datetime import date
from decimal import Decimal

import pytest
from django.contrib.auth import get_user_model
from django.core.management import call_command
from django.core.management.base import CommandError
from django.db import DatabaseError, transaction
from django.db.models import Sum

from agentops.models import ApiKey, AuditEvent, Membership, Organization, Project
from agentops.scoping import dangerously_unscoped, organization_scope
from agentops.services.audit import audit_record
from agentops.services.demo import demo_seed
from billing.models import UsageDaily


def test_create_organization_creates_owner_with_one_time_password(db, capsys, client):
    call_command("create_organization", "initech", "--owner", "Peter@Initech.example")
    out = capsys.readouterr().out
    assert "Created organization initech owned by peter@initech.example" in out
    password = out.split("one-time password (change it after logging in): ")[1].strip()
    organization = Organization.objects.get(slug="initech")
    with organization_scope(organization):
        assert Membership.objects.get().role == "owner"
    response = client.post("/accounts/login/", {"login": "peter@initech.example", "password": password})
    assert response.status_code == 302
    assert client.get("/api/v1/me/").json()["organizations"] == [
        {"slug": "initech", "name": "Initech", "role": "owner"}
    ]


def test_create_organization_for_existing_user_prints_no_password(tenant, capsys):
    call_command("create_organization", "second", "--owner", tenant.viewer.email)
    assert "password" not in capsys.readouterr().out


def test_create_project_and_errors_are_one_line(tenant, capsys):
    call_command("create_project", "acme/support-bot")
    assert "Created project acme/support-bot" in capsys.readouterr().out
    with organization_scope(tenant.organization):
        assert Project.objects.filter(slug="support-bot", name="Support Bot").exists()
    with pytest.raises(CommandError, match="already exists"):
        call_command("create_project", "acme/support-bot")
    with pytest.raises(CommandError, match="no organization with the slug 'nope'"):
        call_command("create_project", "nope/x")
    with pytest.raises(CommandError, match="expected <org_slug>/<project_slug>"):
        call_command("create_project", "just-a-slug")


def test_create_organization_with_a_taken_slug_leaves_no_new_user_behind(tenant):
    with pytest.raises(CommandError, match="the slug 'acme' is taken"):
        call_command("create_organization", "acme", "--owner", "newcomer@example.com")
    # The user would have had a one-time password nobody was shown.
    assert not get_user_model().objects.filter(email="newcomer@example.com").exists()


@pytest.mark.parametrize(
    ("arguments", "message"),
    [
        (["create_organization", "initech", "--owner", "not-an-email"], "owner: Enter a valid email address."),
        (
            ["create_organization", "initech", "--owner", "a\x00@example.com"],
            "owner: Enter a valid email address. Null characters are not allowed.",
        ),
        (["create_organization", "x" * 300, "--owner", "peter@example.com"], "name: Ensure this value has at most 100"),
        (
            ["create_organization", "initech", "--owner", "peter@example.com", "--name", "a\x00b"],
            "name: Null characters",
        ),
        (["create_project", "acme/" + "x" * 300], "name: Ensure this value has at most 100 characters (it has 300)."),
        (["create_project", "acme/bot", "--name", "a\x00b"], "name: Null characters are not allowed."),
        (["create_project", "a\x00b/bot"], "no organization with the slug 'a\\x00b'"),
        (["create_api_key", "acme/a\x00b"], "no project 'a\\x00b' in organization 'acme'"),
        (["create_api_key", "acme/agent", "--name", "x" * 5000], "name: Ensure this value has at most 100"),
        (["create_api_key", "acme/agent", "--name", "a\x00b"], "name: Null characters are not allowed."),
        (["create_api_key", "acme/agent", "--scopes", "read,admin"], "scopes: Select a valid choice. admin is not"),
        (["create_api_key", "acme/agent", "--expires-in-days", "999999999"], "must be between 1 and 36500 days"),
        (["create_api_key", "acme/agent", "--expires-in-days", "0"], "must be between 1 and 36500 days, got 0"),
    ],
)
def test_commands_refuse_bad_arguments_in_one_line_and_create_nothing(tenant, arguments, message):
    User = get_user_model()
    users, organizations = User.objects.count(), Organization.objects.count()
    with dangerously_unscoped("counting every organization's rows"):
        projects, keys = Project.objects.count(), ApiKey.objects.count()
    with pytest.raises(CommandError) as refused:
        call_command(*arguments)
    assert message in str(refused.value)
    assert (User.objects.count(), Organization.objects.count()) == (users, organizations)
    with dangerously_unscoped("counting every organization's rows"):
        assert (Project.objects.count(), ApiKey.objects.count()) == (projects, keys)


def test_create_api_key_expires_in_the_days_asked(tenant, capsys):
    call_command("create_api_key", "acme/agent", "--name", "nightly", "--expires-in-days", "30")
    with organization_scope(tenant.organization):
        key = ApiKey.objects.get(name="nightly")
    assert 29 < (key.expires_at - key.created_at).total_seconds() / 86400 <= 30


def test_demo_seed_is_repeatable_and_its_key_works(db, client):
    first = demo_seed()
    second = demo_seed()
    assert first.api_key != second.api_key
    assert client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {first.api_key}").status_code == 401
    me = client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {second.api_key}").json()
    assert (me["organization"], me["project"]) == ("demo", "demo-agent")
    assert client.post("/accounts/login/", {"login": second.email, "password": second.password}).status_code == 302


def test_demo_seed_again_after_the_demo_key_spent_keeps_its_usage_and_revokes_it(db, client):
    """The second `make run` after trying the README's snippets with the demo key: its
    usage shares the day, agent and model with the seeded (unkeyed) usage. Deleting the
    key would null its ledger rows into those (usage_daily_unique) and stop the start."""
    first = demo_seed()
    assert client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {first.api_key}").status_code == 200
    organization = Organization.objects.get(slug="demo")
    with organization_scope(organization):
        project = Project.objects.get(slug="demo-agent")
        used = ApiKey.objects.get(project=project, name="demo")
        for api_key in (used, None):
            UsageDaily.objects.create(
                organization=organization, project=project, day=date(2026, 11, 29), agent_name="demo",
                model="offline", api_key=api_key, category="llm", unit="token", cost=Decimal("0.5"), steps=1,
            )  # fmt: skip

    second = demo_seed()
    third = demo_seed()  # the second key was never used: it goes

    with organization_scope(organization):
        keys = {key.prefix: key for key in ApiKey.objects.filter(project=project)}
        assert set(keys) == {first.api_key[:11], third.api_key[:11]}
        assert keys[first.api_key[:11]].revoked_at is not None
        assert UsageDaily.objects.filter(api_key=used).count() == 1
        assert UsageDaily.objects.filter(project=project).aggregate(total=Sum("cost"))["total"] == Decimal("1")
    assert client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {first.api_key}").status_code == 401
    assert client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {second.api_key}").status_code == 401
    assert client.get("/api/v1/me/", HTTP_AUTHORIZATION=f"Bearer {third.api_key}").status_code == 200


def test_audit_log_refuses_updates_and_deletes(tenant):
    event = audit_record(organization=tenant.organization, actor=tenant.owner, action="test.event")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.dangerously_unscoped_objects.filter(pk=event.pk).update(action="forged")
    with pytest.raises(DatabaseError, match="append-only"), transaction.atomic():
        AuditEvent.dangerously_unscoped_objects.filter(pk=event.pk).delete()
    assert AuditEvent.dangerously_unscoped_objects.get(pk=event.pk).action == "test.event"


def test_audit_events_outlive_their_organization(tenant, client_for):
    response = client_for(tenant.owner).delete("/api/v1/organizations/acme/", {"confirm": "acme"}, format="json")
    assert response.status_code == 204
    assert not Organization.objects.filter(slug="acme").exists()
    with dangerously_unscoped("staff reads the log of a deleted organization"):
        actions = set(AuditEvent.objects.filter(organization_slug="acme").values_list("action", flat=True))
    assert "organization.delete" in actions


def test_deleting_organization_needs_its_slug_as_confirmation(tenant, client_for):
    response = client_for(tenant.owner).delete("/api/v1/organizations/acme/", {"confirm": "ACME"}, format="json")
    assert response.status_code == 400
    assert Organization.objects.filter(slug="acme").exists()
