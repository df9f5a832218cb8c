"""Helpers of the executor's tests (tests/runs/test_execution_*.py)."""

from runs.execution import run_start
from runs.services.agents import agent_create


def start_run(tenant, django_capture_on_commit_callbacks=None, **agent_fields):
    fields = {"name": "calc", "model": "offline", "tools": ["calculator"], **agent_fields}
    agent = agent_create(project=tenant.project, actor=tenant.member, **fields)
    return run_start(project=tenant.project, agent=agent, actor=tenant.member, input="What is (6 * 7) + 0?")


def use_fake_mistral(tenant, fake_mistral):
    """The organization's Mistral key, with the local Mistral-speaking server as base URL."""
    fake_mistral.serve(tenant.organization)
