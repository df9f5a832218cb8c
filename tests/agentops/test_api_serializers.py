"""One rule for every request body (agentops/api/serializers.py): a field the endpoint
does not have is a 400 naming it, never dropped silently. Every write operation of the
schema with a JSON body is walked (tests/api_walk.py)."""

from __future__ import annotations

import json

import pytest

from jobs.models import Job
from tests.api_walk import OTLP_PREFIX, make_world, write_operations


@pytest.fixture
def world(tenant, client_for, key_client):
    return make_world(tenant, client_for, key_client)


@pytest.mark.parametrize(
    "operation",
    [op for op in write_operations() if op.json_body and not op.path.startswith(OTLP_PREFIX)],
    ids=str,
)
def test_an_unknown_field_is_a_400_naming_it_on_every_endpoint(world, operation):
    response = world.send(operation, json.dumps({"zz_not_a_field": 1}))
    assert response.status_code == 400, response.content[:300]
    assert "unknown field 'zz_not_a_field'" in response.json()["error"]["message"]


def test_an_unknown_field_of_a_nested_object_is_a_400_naming_it(world):
    body = {
        "backend": "walk-box",
        "hardware": "cpu",
        "evaluation": {"dataset": "walk", "evaluators": ["exact"], "model": "m", "dataset_versoin": 1},
    }
    response = world.session.post("/api/v1/projects/acme/agent/jobs/", body, format="json")
    assert response.status_code == 400
    assert response.json()["error"]["message"] == (
        "evaluation: unknown field 'dataset_versoin': the fields are dataset, dataset_version, evaluators, "
        "model, seconds_per_item"
    )
    assert not Job.dangerously_unscoped_objects.filter(name="").exists()


def test_a_read_only_field_is_refused_like_an_unknown_one(tenant, client_for):
    response = client_for(tenant.owner).patch(
        "/api/v1/organizations/acme/", {"name": "Acme 2", "id": 5, "slug": "other"}, format="json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "unknown fields 'id', 'slug': the fields are name"
