"""Submitting a job (jobs/services/submission.py): bad submissions refused with a reason,
and the hard budget. The backend here is scripted."""

from decimal import Decimal

import pytest

from agentops.errors import InvalidRequest, PaymentRequired
from agentops.scoping import organization_scope
from billing.budgets import budget_create, utc_today
from billing.models import UsageDaily
from jobs.models import Job
from tests.jobs.factories import submit_job


def test_bad_submissions_are_refused_with_a_reason(tenant, backend, scripted):
    cases = [
        ({"hardware": "tpu"}, "unknown hardware 'tpu'"),
        ({"hardware": "h200"}, "does not offer h200; it offers: cpu-basic, t4, a100"),
        ({"command": []}, "command must be"),
        ({"env": {"1BAD": "x"}}, "not an environment variable name"),
        ({"env": {"AGENTOPS_URL": "x"}}, "set by the platform"),
        ({"secret_names": ["NOPE"]}, "no secret named NOPE"),
        ({"time_limit_seconds": 5}, "time_limit_seconds"),
    ]
    for fields, message in cases:
        with pytest.raises(InvalidRequest, match=message):
            submit_job(tenant, backend, **fields)
    with organization_scope(tenant.organization):
        assert not Job.objects.exists()


def test_a_spent_hard_budget_refuses_a_job(tenant, backend, scripted):
    with organization_scope(tenant.organization):
        budget_create(organization=tenant.organization, actor=tenant.owner, name="cap", amount="1", hard_limit=True)
    UsageDaily.dangerously_unscoped_objects.create(
        organization=tenant.organization, project=tenant.project, day=utc_today(), model="m", cost=Decimal("1")
    )
    with pytest.raises(PaymentRequired):
        submit_job(tenant, backend)
