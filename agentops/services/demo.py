"""Demo data for `make run`: an organization, a project, a user and an API key."""

from __future__ import annotations

from dataclasses import dataclass

from django.db import transaction

from agentops.models import ApiKey, Membership, Organization, Project
from agentops.roles import Role
from agentops.scoping import organization_scope
from agentops.services.api_keys import api_key_create, api_key_revoke
from agentops.services.organizations import organization_create, project_create
from agentops.services.users import user_get_or_create_verified

DEMO_EMAIL = "demo@example.com"
DEMO_PASSWORD = "agentops-demo"
DEMO_ORG = "demo"
DEMO_PROJECT = "demo-agent"


@dataclass
class DemoCredentials:
    email: str
    password: str
    organization: str
    project: str
    api_key: str


def demo_seed() -> DemoCredentials:
    """Create (or refresh) the demo data; safe to run at every start. The demo key is
    replaced each time, because a key is shown only when it is created."""
    with transaction.atomic():
        user, _ = user_get_or_create_verified(email=DEMO_EMAIL, password=DEMO_PASSWORD)
        organization = Organization.objects.filter(slug=DEMO_ORG).first()
        if organization is None:
            organization = organization_create(name="Demo", slug=DEMO_ORG, owner=user)
        with organization_scope(organization):
            Membership.objects.get_or_create(organization=organization, user=user, defaults={"role": Role.OWNER})
            project = Project.objects.filter(slug=DEMO_PROJECT).first()
            if project is None:
                project = project_create(organization=organization, actor=user, name="Demo agent", slug=DEMO_PROJECT)
            for previous in ApiKey.objects.filter(project=project, name="demo", revoked_at__isnull=True):
                if previous.last_used_at is None:
                    previous.delete()  # nothing was done with it: no list of dead keys
                else:
                    # Revoked, not deleted: the ledger keeps naming the key that spent what
                    # it spent (deleting it would null those rows, which then collide with
                    # the same day's unkeyed usage: usage_daily_unique).
                    api_key_revoke(key=previous, actor=user)
            _key, raw_key = api_key_create(
                project=project, actor=user, name="demo", scopes=["ingest", "read", "execute"]
            )
    return DemoCredentials(DEMO_EMAIL, DEMO_PASSWORD, organization.slug, project.slug, raw_key)
