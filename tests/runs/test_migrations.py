"""Data migrations of runs, run on data as it was before them."""

from importlib import import_module

from django.apps import apps

from agentops.models import Project
from agentops.scoping import organization_scope
from runs.models import Agent, AgentVersion
from runs.services.agents import agent_create


def test_0018_marks_the_analyst_the_platform_made_and_leaves_a_members_agent_of_that_name(tenant):
    mark_analysts = import_module("runs.migrations.0018_agent_platform").mark_analysts
    with organization_scope(tenant.organization):
        # Before 0018 the chat found its agent by name: a member's agent so named got
        # analyst versions added to it; one the platform made has only analyst versions.
        members = agent_create(project=tenant.project, actor=tenant.member, name="AgentOps analyst", model="offline")
        AgentVersion.objects.create(
            organization_id=tenant.organization.pk,
            project=tenant.project,
            agent=members,
            number=2,
            model="offline-analyst",
            toolset="analyst",
        )
        other = Project.objects.create(organization=tenant.organization, name="other", slug="other")
        made = Agent.objects.create(organization_id=tenant.organization.pk, project=other, name="AgentOps analyst")
        AgentVersion.objects.create(
            organization_id=tenant.organization.pk, project=other, agent=made, number=1, toolset="analyst"
        )
        mark_analysts(apps, None)
        assert Agent.objects.get(pk=members.pk).platform == ""
        assert Agent.objects.get(pk=made.pk).platform == "analyst"
