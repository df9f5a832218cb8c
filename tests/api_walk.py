"""Every write operation of the API, and every read one that takes query parameters, read
from its OpenAPI schema (so a new endpoint is walked without anyone listing it), and a
world of real objects to name in their URLs.

The checks every request body must pass (tests/agentops/test_api_parsers.py: any depth,
size or shape of JSON is a 4xx JSON naming the problem; test_api_serializers.py: an
unknown field is a 400 naming it) walk these.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from functools import cache

from drf_spectacular.generators import SchemaGenerator
from rest_framework.test import APIClient

from agentops.models import Membership
from agentops.scoping import organization_scope
from evals.services.annotations import queue_create
from evals.services.experiments import experiment_start
from evals.services.online import rule_create
from jobs.models import Job
from jobs.services.tokens import new_token
from runs.events import RunEvent
from runs.ingest import ingest
from runs.models import Run
from runs.services.agents import agent_create
from runs.services.sessions import session_create
from tests.evals.factories import make_dataset, make_evaluator
from tests.jobs.factories import make_backend

WRITE_METHODS = ("post", "put", "patch", "delete")
READ_METHOD = "get"
# OTLP/JSON receivers must ignore unknown fields (opentelemetry-proto specification), and
# their attributes are free-form: the unknown-field rule is not theirs.
OTLP_PREFIX = "/api/v1/otlp/"


@dataclass(frozen=True)
class Operation:
    method: str
    path: str  # with {placeholders}
    json_body: bool  # the schema documents a JSON request body

    def __str__(self) -> str:
        return f"{self.method.upper()} {self.path}"


@cache
def write_operations() -> tuple[Operation, ...]:
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = []
    for path, items in schema["paths"].items():
        for method, operation in items.items():
            if method in WRITE_METHODS:
                content = (operation.get("requestBody") or {}).get("content", {})
                operations.append(Operation(method, path, "application/json" in content))
    return tuple(sorted(operations, key=str))


@dataclass(frozen=True)
class ReadOperation(Operation):
    query: tuple[str, ...] = ()  # the query parameters the schema documents


@cache
def read_operations_with_query() -> tuple[ReadOperation, ...]:
    """Every GET operation of the schema that documents query parameters."""
    schema = SchemaGenerator().get_schema(request=None, public=True)
    operations = []
    for path, items in schema["paths"].items():
        operation = items.get(READ_METHOD)
        query = tuple(
            parameter["name"] for parameter in (operation or {}).get("parameters", ()) if parameter["in"] == "query"
        )
        if query:
            operations.append(ReadOperation(READ_METHOD, path, False, query))
    return tuple(sorted(operations, key=str))


@dataclass
class World:
    """A tenant with one object of every kind a write URL names, and a client per caller."""

    values: dict[str, object]
    session: APIClient  # the organization's owner, signed in
    key: APIClient  # an API key of the project with every scope
    job_token: APIClient  # the token of a running evaluation job

    def url(self, operation: Operation) -> str:
        return re.sub(r"\{(\w+)\}", lambda match: str(self.values[match[1]]), operation.path)

    def client_for(self, operation: Operation) -> APIClient:
        if operation.path.startswith("/api/v1/jobs/"):
            return self.job_token
        if operation.path == "/api/v1/ingest" or operation.path.startswith(OTLP_PREFIX):
            return self.key
        return self.session

    def read(self, operation: ReadOperation, query: dict[str, str]):
        return self.client_for(operation).get(self.url(operation), query)

    def send(self, operation: Operation, body: bytes | str, content_type: str = "application/json"):
        client = self.client_for(operation)
        return getattr(client, operation.method)(self.url(operation), data=body, content_type=content_type)


def make_world(tenant, client_for, key_client) -> World:
    project, organization = tenant.project, tenant.organization
    with organization_scope(organization):
        agent = agent_create(project=project, actor=tenant.owner, name="walker", model="offline")
        dataset = make_dataset(project, [{"key": "a", "input": "hi", "expected": "hi"}], name="walk")
        evaluator = make_evaluator(project, "exact", "exact_match")
        make_evaluator(project, "helpful", "human", {"scale": "pass-fail"})
        queue = queue_create(project=project, actor=tenant.owner, name="review", evaluator_ids=["helpful"])
        rule = rule_create(project=project, actor=tenant.owner, evaluator="exact")
        experiment = experiment_start(
            project=project, actor=tenant.owner, dataset=dataset, agent=agent, evaluators=[evaluator]
        )
        ingest(project=project, runs=[RunEvent("walk-run", {"name": "walked"})], announce=False)
        run = Run.objects.get(project=project, trace_id="walk-run")
        backend = make_backend(organization, name="walk-box")
        job = Job.objects.create(
            organization=organization,
            project=project,
            name="walk job",
            kind=Job.Kind.EVALUATION,
            backend=backend,
            backend_kind=backend.kind,
            hardware="cpu",
            status=Job.Status.RUNNING,
            experiment=experiment,
        )
        token = new_token(job)
        job.save()
        session = session_create(project=project, agent=agent, actor=tenant.owner)
    job_token = APIClient()
    job_token.credentials(HTTP_AUTHORIZATION=f"Bearer {token}")
    values = {
        "org_slug": organization.slug,
        "project_slug": project.slug,
        "agent_id": agent.pk,
        "dataset_id": dataset.pk,
        "evaluator_id": evaluator.pk,
        "queue_id": queue.pk,
        "rule_id": rule.pk,
        "experiment_id": experiment.pk,
        "run_id": run.pk,
        "session_id": session.pk,
        "backend_id": backend.pk,
        "job_id": job.pk,
        "membership_id": Membership.dangerously_unscoped_objects.get(organization=organization, user=tenant.member).pk,
        "provider": "mistral",
        "name": "WALK_SECRET",
        # Ids of rows the walks never need to exist: a body is checked before any lookup.
        "invitation_id": 999_999,
        "key_id": 999_999,
        "tool_id": 999_999,
        "export_id": 999_999,
        "destination_id": 999_999,
        "schedule_id": 999_999,
        "budget_id": 999_999,
        "wandb_export_id": 999_999,
    }
    return World(values=values, session=client_for(tenant.owner), key=key_client(project), job_token=job_token)
