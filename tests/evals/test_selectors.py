"""Reads of evaluations: one experiment or dataset of the project, or the core's
NotFound (which the API and the pages both answer 404), another tenant's included."""

from __future__ import annotations

import pytest

from agentops.errors import NotFound
from agentops.scoping import organization_scope
from evals import selectors
from tests.evals.factories import make_dataset


def test_dataset_detail_of_another_tenants_dataset_raises_the_cores_not_found(tenant, other_tenant):
    theirs = make_dataset(other_tenant.project, [{"input": {"q": "1+1"}}])

    with organization_scope(tenant.organization), pytest.raises(NotFound, match="dataset not found"):
        selectors.dataset_detail(project=tenant.project, dataset_id=theirs.pk)


def test_experiment_detail_of_a_missing_experiment_raises_the_cores_not_found(tenant):
    with organization_scope(tenant.organization), pytest.raises(NotFound, match="experiment not found"):
        selectors.experiment_detail(project=tenant.project, experiment_id=987654)
