"""The API's JSON parser (agentops/api/parsers.py): no body, whatever its depth, size
or shape, makes a 500, and no query string either. Every write operation of the schema,
and every read one with query parameters, is walked (tests/api_walk.py)."""

from __future__ import annotations

import json

import pytest

from agentops.scoping import organization_scope
from runs.services.agents import agent_create
from tests.api_walk import OTLP_PREFIX, make_world, read_operations_with_query, write_operations

DEEP = "[" * 10_000 + "]" * 10_000


def message_of(response) -> str:
    """The error message of an API error body, or of an OTLP google.rpc.Status."""
    assert response["Content-Type"].startswith("application/json"), response.content[:200]
    body = response.json()
    return body["error"]["message"] if "error" in body else body["message"]


@pytest.fixture
def world(tenant, client_for, key_client):
    return make_world(tenant, client_for, key_client)


@pytest.mark.parametrize("operation", write_operations(), ids=str)
def test_a_body_nested_10000_levels_deep_is_a_400_naming_the_depth(world, operation):
    response = world.send(operation, '{"input": ' + DEEP + ', "metadata": {"a": ' + DEEP + "}}")
    assert response.status_code == 400, response.content[:300]
    assert "nested deeper than" in message_of(response)


# An OTLP/JSON receiver must ignore unknown fields: '{"": 1}' is an empty export there, not
# a wrong shape, so that pair is not generated.
SHAPES = ['"text"', "12", "null", "[[1]]", "true", '{"": 1}']


@pytest.mark.parametrize(
    ("operation", "body"),
    [
        (operation, body)
        for operation in write_operations()
        if operation.json_body
        for body in SHAPES
        if not (operation.path.startswith(OTLP_PREFIX) and body.startswith("{"))
    ],
    ids=str,
)
def test_a_body_of_any_other_shape_is_a_4xx_json_error(world, operation, body):
    response = world.send(operation, body)
    assert 400 <= response.status_code < 500, (response.status_code, response.content[:300])
    assert message_of(response)


@pytest.mark.parametrize("operation", read_operations_with_query(), ids=str)
def test_a_nul_character_in_any_query_parameter_is_a_400_naming_it(world, operation):
    for name in operation.query:
        response = world.read(operation, {name: "a\x00b"})
        assert response.status_code == 400, (name, response.status_code, response.content[:300])
        assert message_of(response) == f"{name}: contains a NUL character, which cannot be stored"


HOSTILE_QUERY_VALUES = ["abc", "-1", "99999999999999999999999", "NaN", "1e999", "2026-13-45", "", "x" * 5000]


@pytest.mark.parametrize("operation", read_operations_with_query(), ids=str)
def test_no_value_of_a_query_parameter_makes_a_500(world, operation):
    for name in operation.query:
        for value in HOSTILE_QUERY_VALUES:
            response = world.read(operation, {name: value})
            assert response.status_code < 500, (name, value[:20], response.status_code, response.content[:300])


RUNS = "/api/v1/projects/acme/agent/runs/"


def test_an_unknown_format_is_a_400_naming_the_formats_and_a_known_one_is_served(tenant, client_for):
    client = client_for(tenant.member)
    response = client.get(RUNS, {"format": "xml"})
    assert response.status_code == 400
    assert message_of(response) == "format: 'xml' is not a format of this endpoint; one of json, api"
    assert client.get(RUNS, {"format": "json"}).status_code == 200
    assert client.get(RUNS, {"format": "xml"}, HTTP_ACCEPT="text/html").status_code == 400


@pytest.mark.parametrize(
    ("body", "problem"),
    [
        ('{"agent": 1, "input": NaN}', "NaN is not a JSON number"),
        ('{"agent": 1, "input": -Infinity}', "-Infinity is not a JSON number"),
        ('{"agent": 1, "input": 1e999}', "1e999 is too large for a number"),
        ('{"agent": 1, "input": "a\\u0000b"}', "input: contains a NUL character, which cannot be stored"),
        ('{"agent": 1, "input": {"k\\u0000": 1}}', "input: a key contains a NUL character"),
        ('{"agent": 1, "input": ["\\ud800"]}', "input[0]: contains an unpaired surrogate (invalid Unicode)"),
        ('{"agent": 1, "input": ' + "[" * 64 + "]" * 64 + "}", "input" + "[0]" * 63 + ": nested deeper than 64 levels"),
        ('{"agent": 1, "input": "x"', "the body is not valid JSON: Expecting ',' delimiter (line 1, column 26)"),
    ],
    ids=["nan", "infinity", "overflow", "nul", "nul-key", "surrogate", "depth-65", "truncated"],
)
def test_what_postgresql_cannot_store_is_a_400_naming_field_and_problem(tenant, client_for, body, problem):
    response = client_for(tenant.member).post(RUNS, data=body, content_type="application/json")
    assert response.status_code == 400
    assert response.json()["error"]["code"] == "parse_error"
    assert problem in response.json()["error"]["message"]


def test_json_nested_64_levels_deep_is_accepted(tenant, client_for):
    with organization_scope(tenant.organization):
        agent = agent_create(project=tenant.project, actor=None, name="deep", model="offline")
    client = client_for(tenant.member)

    def start(levels: int):
        # The body is level 1: an input of n nested arrays reaches level n + 1.
        body = f'{{"agent": {agent.pk}, "input": ' + "[" * levels + "]" * levels + "}"
        return client.post(RUNS, data=body, content_type="application/json")

    assert start(63).status_code == 202
    assert start(64).status_code == 400


def test_a_body_over_the_limit_is_a_413_before_it_is_read(tenant, client_for, settings):
    settings.API_MAX_BODY_BYTES = 1000
    client = client_for(tenant.member)
    large = json.dumps({"name": "big", "description": "x" * 2000})
    response = client.post("/api/v1/projects/acme/agent/datasets/", data=large, content_type="application/json")
    assert response.status_code == 413
    assert response.json()["error"] == {"code": "too_large", "message": "the body is over 1000 bytes", "details": None}


def test_a_body_that_is_not_utf8_is_a_400(tenant, client_for):
    response = client_for(tenant.member).post(
        "/api/v1/projects/acme/agent/datasets/", data=b'{"name": "\xff"}', content_type="application/json"
    )
    assert response.status_code == 400
    assert response.json()["error"]["message"] == "the body is not valid UTF-8 (byte 10)"
