"""Agents and their immutable versions."""

import pytest

from agentops.errors import Conflict, InvalidRequest
from agentops.scoping import organization_scope
from runs.models import AgentVersion
from runs.services.agents import agent_create, agent_version_create


def test_every_edit_makes_a_new_version_and_old_ones_stay(tenant):
    with organization_scope(tenant.organization):
        agent = agent_create(
            project=tenant.project,
            actor=tenant.member,
            name="support",
            model="mistral-small-latest",
            system_prompt="Be brief.",
            tools=["calculator"],
            parameters={"temperature": 0.2},
        )
        agent_version_create(
            agent=agent, actor=tenant.member, model="mistral-large-latest", approval_tools=["calculator"]
        )
        versions = list(AgentVersion.objects.filter(agent=agent).order_by("number"))
        agent.refresh_from_db()
    assert [(v.number, v.model) for v in versions] == [(1, "mistral-small-latest"), (2, "mistral-large-latest")]
    assert versions[1].system_prompt == "Be brief." and versions[1].parameters == {"temperature": 0.2}
    assert versions[1].approval_tools == ["calculator"] and agent.latest_version == 2


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"tools": ["rm_rf"]}, "unknown tool 'rm_rf'"),
        ({"approval_tools": ["http_fetch"]}, "not one of the agent's tools"),
        ({"parameters": {"temperature": 3}}, "temperature must be between"),
        ({"parameters": {"max_tokens": 1.5}}, "max_tokens must be a whole number"),
        ({"parameters": {"frequency": 1}}, "unknown parameter"),
        ({"step_limit": 0}, "step limit"),
        ({"model": " "}, "needs a model"),
    ],
)
def test_invalid_configuration_is_refused_with_the_reason(tenant, changes, message):
    fields = {"name": "a", "model": "offline", **changes}
    with organization_scope(tenant.organization), pytest.raises(InvalidRequest, match=message):
        agent_create(project=tenant.project, actor=None, **fields)


def test_agent_names_are_unique_per_project(tenant):
    with organization_scope(tenant.organization):
        agent_create(project=tenant.project, actor=None, name="support", model="offline")
        with pytest.raises(Conflict):
            agent_create(project=tenant.project, actor=None, name="support", model="offline")
