"""The evaluator pages: the list with its create form (an example per kind), one
evaluator with its edit, archive and try-it forms; viewers read, members write; a
webhook's secret is shown once; another organization's evaluator is a 404."""

from __future__ import annotations

import json

import pytest

from agentops import crypto
from agentops.scoping import organization_scope
from evals.models import Evaluator
from tests.evals.factories import make_evaluator

BASE = "/o/acme/p/agent/evals/evaluators"


def text(response) -> str:
    return response.content.decode()


@pytest.fixture
def signed_in(client):
    def sign_in(user):
        client.force_login(user)
        return client

    return sign_in


def new_evaluator_form(**overrides) -> dict:
    return {
        "name": "correctness",
        "kind": "exact_match",
        "config": '{"case_sensitive": false}',
        "threshold": "1",
        "description": "The right answer",
        "secret": "",
        **overrides,
    }


def test_viewer_sees_the_evaluators_without_their_forms(signed_in, tenant):
    evaluator = make_evaluator(tenant.project, "correctness", "exact_match", {"strip": True})
    client = signed_in(tenant.viewer)

    listing = client.get(f"{BASE}/")
    assert listing.status_code == 200
    assert f'href="{BASE}/{evaluator.pk}/"' in text(listing) and 'id="new-evaluator"' not in text(listing)

    detail = client.get(f"{BASE}/{evaluator.pk}/")
    assert detail.status_code == 200 and "Exact match" in text(detail)
    assert 'id="edit-evaluator"' not in text(detail) and 'id="archive-form"' not in text(detail)
    assert "Members try evaluators" in text(detail)


def test_the_create_form_offers_every_kind_with_an_example(signed_in, tenant):
    page = text(signed_in(tenant.member).get(f"{BASE}/"))
    for kind in Evaluator.Kind.values:
        assert f'<option value="{kind}"' in page
    assert 'id="evaluator-examples"' in page and "lookup_order" in page and "rubric" in page
    assert "No evaluators yet" in page


def test_each_evaluators_page_says_what_its_kind_checks_and_what_trying_it_calls(signed_in, tenant):
    client = signed_in(tenant.member)
    judge = make_evaluator(tenant.project, "tone", "llm_judge", {"rubric": "Be polite."})
    rule = make_evaluator(tenant.project, "correctness", "exact_match", {"strip": True})
    judge_page, rule_page = text(client.get(f"{BASE}/{judge.pk}/")), text(client.get(f"{BASE}/{rule.pk}/"))
    assert "A model grades the output and the whole trajectory against your rubric" in judge_page
    assert "Nothing is stored; the judge model is really called (and billed)." in judge_page
    assert "The output (or one field of it) equals the item&#x27;s expected output." in rule_page
    assert "Nothing is stored." in rule_page and "Signing secret" not in rule_page
    assert 'id="webhook-signature"' not in rule_page


def test_viewer_cannot_create_edit_archive_or_try(signed_in, tenant):
    evaluator = make_evaluator(tenant.project, "correctness", "exact_match")
    client = signed_in(tenant.viewer)
    attempts = [
        (f"{BASE}/", new_evaluator_form(name="other")),
        (f"{BASE}/{evaluator.pk}/edit/", new_evaluator_form(threshold="0.1")),
        (f"{BASE}/{evaluator.pk}/archive/", {}),
        (f"{BASE}/{evaluator.pk}/try/", {"output": "x", "expected": "x"}),
    ]
    for url, data in attempts:
        response = client.post(url, data)
        assert response.status_code == 403, url
        assert "You can’t do that here" in text(response)
    evaluator.refresh_from_db()
    assert evaluator.pass_threshold == 0.5 and not evaluator.archived
    assert Evaluator.dangerously_unscoped_objects.filter(project=tenant.project).count() == 1


def test_member_creates_edits_tries_and_archives_an_evaluator(signed_in, tenant):
    client = signed_in(tenant.member)

    created = client.post(f"{BASE}/", new_evaluator_form())
    with organization_scope(tenant.organization):
        evaluator = Evaluator.objects.get(project=tenant.project, name="correctness")
    assert created.status_code == 302 and created["Location"] == f"{BASE}/{evaluator.pk}/"
    assert evaluator.config == {"case_sensitive": False, "strip": True} and evaluator.pass_threshold == 1.0
    assert evaluator.created_by == tenant.member

    page = text(client.get(created["Location"]))
    assert "was created" in page and "&quot;case_sensitive&quot;: false" in page

    tried = client.post(f"{BASE}/{evaluator.pk}/try/", {"input": "Capital?", "expected": "Paris", "output": "PARIS"})
    assert tried.status_code == 200 and 'id="try-outcome"' in text(tried) and "1 · passes" in text(tried)
    failed = text(client.post(f"{BASE}/{evaluator.pk}/try/", {"expected": "Paris", "output": "Lyon"}))
    assert "0 · fails" in failed and "got &quot;Lyon&quot;, expected &quot;Paris&quot;" in failed

    edited = client.post(
        f"{BASE}/{evaluator.pk}/edit/",
        {"name": "correct", "config": '{"field": "answer"}', "threshold": "0.5", "description": ""},
    )
    assert edited.status_code == 302
    evaluator.refresh_from_db()
    assert evaluator.name == "correct" and evaluator.config == {
        "field": "answer",
        "case_sensitive": True,
        "strip": True,
    }

    archived = client.post(f"{BASE}/{evaluator.pk}/archive/", {})
    assert archived.status_code == 302
    evaluator.refresh_from_db()
    assert evaluator.archived
    assert f'id="evaluator-{evaluator.pk}"' not in text(client.get(f"{BASE}/"))
    assert f'id="evaluator-{evaluator.pk}"' in text(client.get(f"{BASE}/?archived=1"))
    client.post(f"{BASE}/{evaluator.pk}/archive/", {"restore": "1"})
    evaluator.refresh_from_db()
    assert not evaluator.archived


@pytest.mark.parametrize(
    ("form", "message"),
    [
        ({"config": "{not json"}, "This is not valid JSON"),
        ({"config": '{"a": ' + "[" * 10_000 + "]" * 10_000 + "}"}, "This JSON cannot be used: nested deeper than 64"),
        ({"config": '{"a": NaN}'}, "This JSON cannot be used: NaN is not a JSON number"),
        ({"config": "[1]"}, "The configuration must be a JSON object"),
        ({"kind": "regex", "config": '{"pattern": "(a+)+$"}'}, "catastrophic backtracking"),
        ({"kind": "llm_judge", "config": "{}"}, "evaluators need rubric"),
        ({"threshold": "1.5"}, "Ensure this value is less than or equal to 1"),
    ],
)
def test_bad_forms_are_shown_with_the_reason(signed_in, tenant, form, message):
    response = signed_in(tenant.member).post(f"{BASE}/", new_evaluator_form(**form))
    assert response.status_code == 400 and message in text(response)
    assert not Evaluator.dangerously_unscoped_objects.filter(project=tenant.project).exists()


def test_a_taken_name_is_a_conflict_on_the_form(signed_in, tenant):
    make_evaluator(tenant.project, "correctness", "exact_match")
    response = signed_in(tenant.member).post(f"{BASE}/", new_evaluator_form())
    assert response.status_code == 409 and "already exists in this project" in text(response)


def test_a_webhook_evaluators_secret_is_shown_once(signed_in, tenant):
    client = signed_in(tenant.member)
    config = json.dumps({"url": "http://127.0.0.1:9/score"})
    response = client.post(f"{BASE}/", new_evaluator_form(name="policy", kind="webhook", config=config))
    assert response.status_code == 200 and response["Cache-Control"] == "no-store"
    with organization_scope(tenant.organization):
        evaluator = Evaluator.objects.get(project=tenant.project, name="policy")
    secret = crypto.decrypt(evaluator.secret_ciphertext)
    assert secret in text(response) and 'id="evaluator-created"' in text(response)
    detail = text(client.get(f"{BASE}/{evaluator.pk}/"))
    assert secret not in detail and 'id="webhook-signature"' in detail and "X-AgentOps-Signature" in detail


def test_the_edit_form_refuses_a_new_webhook_url_without_the_secret(signed_in, tenant):
    client = signed_in(tenant.member)
    client.post(f"{BASE}/", new_evaluator_form(name="policy", kind="webhook", config='{"url": "http://127.0.0.1:9/a"}'))
    with organization_scope(tenant.organization):
        evaluator = Evaluator.objects.get(project=tenant.project, name="policy")
    form = {"name": "policy", "config": '{"url": "http://127.0.0.1:10/b"}', "threshold": "0.5", "description": ""}

    refused = client.post(f"{BASE}/{evaluator.pk}/edit/", {**form, "secret": ""})
    evaluator.refresh_from_db()
    assert refused.status_code == 400
    assert "changing url requires re-entering the signing secret" in " ".join(text(refused).split()).lower()
    assert evaluator.config["url"] == "http://127.0.0.1:9/a"
    accepted = client.post(f"{BASE}/{evaluator.pk}/edit/", {**form, "secret": "whsec_typed-again-0123456789"})
    evaluator.refresh_from_db()
    assert accepted.status_code == 302 and evaluator.config["url"] == "http://127.0.0.1:10/b"


def test_other_organizations_evaluator_pages_are_not_found(signed_in, tenant, other_tenant):
    foreign = make_evaluator(other_tenant.project, "correctness", "exact_match")
    client = signed_in(tenant.owner)
    assert client.get(f"{BASE}/{foreign.pk}/").status_code == 404
    for action in ("edit", "archive", "try"):
        assert client.post(f"{BASE}/{foreign.pk}/{action}/", new_evaluator_form()).status_code == 404
    assert client.get(f"/o/globex/p/agent/evals/evaluators/{foreign.pk}/").status_code == 404
    foreign.refresh_from_db()
    assert foreign.name == "correctness" and not foreign.archived
