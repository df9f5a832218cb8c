"""Evaluators over the API: create (a webhook's secret once), list, change, archive,
try one on an output; who may do what; another organization's evaluator is a 404."""

from __future__ import annotations

import pytest

from agentops import crypto
from agentops.models import AuditEvent
from agentops.scoping import organization_scope
from evals.models import Evaluator, OnlineRule
from tests.evals.factories import make_evaluator
from tests.isolation import TenantIsolationChecks

BASE = "/api/v1/projects/acme/agent"


def project_url(tenant) -> str:
    return f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}"


def test_member_creates_lists_changes_and_archives_an_evaluator(tenant, client_for):
    client = client_for(tenant.member)
    created = client.post(
        f"{BASE}/evaluators/",
        {"name": "correctness", "kind": "exact_match", "config": {"case_sensitive": False}, "threshold": 1},
        format="json",
    )
    assert created.status_code == 201, created.content
    body = created.json()
    assert body["config"] == {"case_sensitive": False, "strip": True} and body["threshold"] == 1.0
    assert "secret" not in body and body["has_secret"] is False and body["archived"] is False

    evaluator_id = body["id"]
    assert [e["name"] for e in client.get(f"{BASE}/evaluators/").json()] == ["correctness"]
    changed = client.patch(
        f"{BASE}/evaluators/{evaluator_id}/", {"threshold": 0.5, "description": "Right answer"}, format="json"
    )
    assert changed.status_code == 200 and changed.json()["threshold"] == 0.5
    assert changed.json()["config"] == {"case_sensitive": False, "strip": True}  # untouched

    assert client.delete(f"{BASE}/evaluators/{evaluator_id}/").status_code == 204
    assert client.get(f"{BASE}/evaluators/").json() == []
    archived = client.get(f"{BASE}/evaluators/?archived=true").json()
    assert archived[0]["archived"] is True and client.get(f"{BASE}/evaluators/{evaluator_id}/").status_code == 200
    restored = client.patch(f"{BASE}/evaluators/{evaluator_id}/", {"archived": False}, format="json")
    assert restored.json()["archived"] is False

    with organization_scope(tenant.organization):
        actions = list(AuditEvent.objects.filter(target_id=str(evaluator_id)).values_list("action", flat=True))
    assert sorted(actions) == ["evaluator.archive", "evaluator.create", "evaluator.update", "evaluator.update"]


def test_webhook_secret_is_shown_once_and_stored_encrypted(tenant, client_for):
    client = client_for(tenant.member)
    created = client.post(
        f"{BASE}/evaluators/",
        {"name": "policy", "kind": "webhook", "config": {"url": "http://127.0.0.1:9/score"}},
        format="json",
    )
    assert created.status_code == 201
    secret = created.json()["secret"]
    assert secret.startswith("whsec_") and created.json()["has_secret"] is True
    detail = client.get(f"{BASE}/evaluators/{created.json()['id']}/").json()
    assert "secret" not in detail and detail["config"] == {"url": "http://127.0.0.1:9/score", "timeout_seconds": 10}
    with organization_scope(tenant.organization):
        stored = Evaluator.objects.get(pk=created.json()["id"])
    assert secret not in stored.secret_ciphertext and crypto.decrypt(stored.secret_ciphertext) == secret


@pytest.mark.parametrize(
    ("body", "status", "message"),
    [
        ({"name": "x", "kind": "regex", "config": {"pattern": "("}}, 400, "invalid regular expression"),
        ({"name": "x", "kind": "llm_judge", "config": {}}, 400, "llm_judge evaluators need rubric"),
        ({"name": "x", "kind": "exact_match", "threshold": 2}, 400, "the pass threshold is a number from 0 to 1"),
        ({"name": "has space", "kind": "exact_match"}, 400, "an evaluator's name is 1 to 64 letters"),
        ({"name": "pass_rate", "kind": "exact_match"}, 400, "experiment-wide metric"),
        ({"name": "x", "kind": "sentiment"}, 400, "kind"),
        ({"name": "x", "kind": "exact_match", "secret": "0123456789abcdefgh"}, 400, "only webhook evaluators"),
        ({"name": "correctness", "kind": "contains"}, 409, "an evaluator named 'correctness' already exists"),
    ],
)
def test_bad_evaluators_are_refused_with_the_reason(tenant, client_for, body, status, message):
    make_evaluator(tenant.project, "correctness", "exact_match")
    response = client_for(tenant.member).post(f"{BASE}/evaluators/", body, format="json")
    assert response.status_code == status, response.content
    assert message in response.json()["error"]["message"]


def test_the_kind_cannot_change_and_configs_are_checked_on_update(tenant, client_for):
    evaluator = make_evaluator(tenant.project, "format", "json_valid")
    client = client_for(tenant.member)
    response = client.patch(f"{BASE}/evaluators/{evaluator.pk}/", {"config": {"strict": True}}, format="json")
    assert response.status_code == 400 and "unknown setting 'strict'" in response.json()["error"]["message"]
    response = client.patch(f"{BASE}/evaluators/{evaluator.pk}/", {"kind": "regex"}, format="json")
    assert response.status_code == 400 and "kind cannot change" in response.json()["error"]["message"]
    make_evaluator(tenant.project, "other", "json_valid")
    response = client.patch(f"{BASE}/evaluators/{evaluator.pk}/", {"name": "other"}, format="json")
    assert response.status_code == 409


def test_archiving_stops_the_evaluators_online_rules(tenant, client_for):
    evaluator = make_evaluator(tenant.project, "format", "json_valid")
    rule = OnlineRule.dangerously_unscoped_objects.create(
        organization=tenant.organization, project=tenant.project, evaluator=evaluator
    )
    assert client_for(tenant.member).delete(f"{BASE}/evaluators/{evaluator.pk}/").status_code == 204
    rule.refresh_from_db()
    assert rule.enabled is False


def test_try_an_evaluator_on_a_given_output(tenant, client_for):
    evaluator = make_evaluator(tenant.project, "correctness", "exact_match", {"case_sensitive": False}, threshold=1)
    client = client_for(tenant.member)
    url = f"{BASE}/evaluators/{evaluator.pk}/test/"
    good = client.post(url, {"input": "Capital of France?", "expected": "Paris", "output": "paris"}, format="json")
    assert good.status_code == 200
    assert good.json() == {
        "value": 1.0,
        "passed": True,
        "reasoning": "matches the expected output",
        "details": {},
        "error": "",
    }
    bad = client.post(url, {"expected": "Paris", "output": "Lyon"}, format="json").json()
    assert bad["value"] == 0.0 and bad["passed"] is False
    no_expected = client.post(url, {"output": "Lyon"}, format="json").json()
    assert (
        no_expected["value"] is None and no_expected["passed"] is None and "nothing to compare" in no_expected["error"]
    )


def test_try_a_trajectory_rule_with_tool_calls(tenant, client_for):
    evaluator = make_evaluator(tenant.project, "tools", "trajectory", {"tool": "search", "forbidden_tools": ["rm"]})
    response = client_for(tenant.member).post(
        f"{BASE}/evaluators/{evaluator.pk}/test/",
        {"output": "done", "tool_calls": [{"name": "search", "arguments": {"q": "x"}}, {"name": "rm"}]},
        format="json",
    )
    assert response.json()["value"] == 0.5 and response.json()["details"]["failed"] == ["forbidden_tools"]


def test_viewer_reads_but_cannot_write_or_try(tenant, client_for):
    evaluator = make_evaluator(tenant.project, "correctness", "exact_match")
    client = client_for(tenant.viewer)
    assert client.get(f"{BASE}/evaluators/").status_code == 200
    assert client.get(f"{BASE}/evaluators/{evaluator.pk}/").status_code == 200
    attempts = [
        client.post(f"{BASE}/evaluators/", {"name": "x", "kind": "json_valid"}, format="json"),
        client.patch(f"{BASE}/evaluators/{evaluator.pk}/", {"threshold": 0.1}, format="json"),
        client.delete(f"{BASE}/evaluators/{evaluator.pk}/"),
        client.post(f"{BASE}/evaluators/{evaluator.pk}/test/", {"output": "x"}, format="json"),
    ]
    assert [response.status_code for response in attempts] == [403, 403, 403, 403]
    evaluator.refresh_from_db()
    assert evaluator.pass_threshold == 0.5 and not evaluator.archived


def test_api_keys_read_with_the_read_scope_and_write_with_execute(tenant, key_client):
    evaluator = make_evaluator(tenant.project, "correctness", "exact_match")
    reader = key_client(tenant.project, ["read"])
    assert reader.get(f"{BASE}/evaluators/").status_code == 200
    assert reader.post(f"{BASE}/evaluators/", {"name": "x", "kind": "json_valid"}, format="json").status_code == 403
    assert key_client(tenant.project, ["ingest"]).get(f"{BASE}/evaluators/").status_code == 403
    writer = key_client(tenant.project, ["execute"])
    created = writer.post(f"{BASE}/evaluators/", {"name": "x", "kind": "json_valid"}, format="json")
    assert created.status_code == 201
    assert writer.post(f"{BASE}/evaluators/{evaluator.pk}/test/", {"output": "x"}, format="json").status_code == 200
    with organization_scope(tenant.organization):
        made = Evaluator.objects.get(pk=created.json()["id"])
        event = AuditEvent.objects.get(action="evaluator.create", target_id=str(made.pk))
    assert made.created_by is None and event.actor_label.startswith("API key")


class TestEvaluatorIsolation(TenantIsolationChecks):
    update_body = {"threshold": 0.1}
    create_body = {"name": "fresh", "kind": "json_valid"}

    def make_object(self, tenant):
        return make_evaluator(tenant.project, "correctness", "exact_match")

    def detail_url(self, url_tenant, evaluator):
        return f"{project_url(url_tenant)}/evaluators/{evaluator.pk}/"

    def list_url(self, tenant):
        return f"{project_url(tenant)}/evaluators/"

    def created_organization_id(self, response):
        return Evaluator.dangerously_unscoped_objects.get(pk=response.json()["id"]).organization_id

    def test_other_organizations_evaluator_cannot_be_tried(self, caller, tenant, other_tenant):
        foreign = self.make_object(other_tenant)
        for url_tenant in (tenant, other_tenant):
            response = caller.post(f"{self.detail_url(url_tenant, foreign)}test/", {"output": "x"}, format="json")
            assert response.status_code == 404


class TestEvaluatorIsolationWithApiKey(TestEvaluatorIsolation):
    as_key = True


def test_a_webhooks_signing_secret_does_not_follow_a_new_url_unless_given_again(tenant, client_for):
    client = client_for(tenant.member)
    created = client.post(
        f"{BASE}/evaluators/",
        {"name": "policy", "kind": "webhook", "config": {"url": "http://127.0.0.1:9/score"}},
        format="json",
    ).json()
    url = f"{BASE}/evaluators/{created['id']}/"

    moved = client.patch(url, {"config": {"url": "http://127.0.0.1:10/steal"}}, format="json")

    assert moved.status_code == 400
    assert moved.json()["error"]["message"].startswith(
        "changing url requires re-entering the signing secret (secret) in the same request"
    )
    with organization_scope(tenant.organization):
        stored = Evaluator.objects.get(pk=created["id"])
    assert stored.config["url"] == "http://127.0.0.1:9/score"
    assert crypto.decrypt(stored.secret_ciphertext) == created["secret"]
    # The timeout changes alone; the URL with a secret in the same request.
    assert (
        client.patch(
            url, {"config": {"url": "http://127.0.0.1:9/score", "timeout_seconds": 5}}, format="json"
        ).status_code
        == 200
    )
    resent = client.patch(
        url, {"config": {"url": "http://127.0.0.1:10/new"}, "secret": "whsec_a-new-secret-of-32-chars"}, format="json"
    )
    assert resent.status_code == 200, resent.content
    stored.refresh_from_db()
    assert stored.config["url"] == "http://127.0.0.1:10/new"
    assert crypto.decrypt(stored.secret_ciphertext) == "whsec_a-new-secret-of-32-chars"
