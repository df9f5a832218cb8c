"""Webhook evaluators, against a local HTTP server: the request is signed as webhook
tools' are and carries the item, output and trajectory; anything but a JSON score from
0 to 1 leaves no score, with the reason; the URL is checked again before each call."""

from __future__ import annotations

import hashlib
import hmac
import json
import threading
import time
from decimal import Decimal
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from agentops.errors import InvalidRequest
from agentops.scoping import organization_scope
from evals.scoring.registry import evaluate, spec_of, validate_config
from evals.scoring.subject import StepView, Subject, ToolCallView
from evals.services.evaluators import evaluator_create


class _Scorer(BaseHTTPRequestHandler):
    received: list = []
    # (status, body bytes, delay in seconds)
    reply: tuple = (200, b'{"score": 0.75, "reasoning": "mostly right"}', 0.0)
    trickle: float = 0.0  # seconds between the body's bytes (0: all at once)

    def do_POST(self):  # noqa: N802 - http.server's name
        body = self.rfile.read(int(self.headers["Content-Length"]))
        type(self).received.append((dict(self.headers), body))
        status, payload, delay = type(self).reply
        time.sleep(delay)
        try:
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(payload)))
            self.end_headers()
            if not type(self).trickle:
                self.wfile.write(payload)
            for byte in payload if type(self).trickle else b"":
                self.wfile.write(bytes([byte]))
                self.wfile.flush()
                time.sleep(type(self).trickle)
        except (BrokenPipeError, ConnectionResetError):
            pass  # The evaluator gave up waiting.

    def log_message(self, *args):
        pass


@pytest.fixture
def scorer_url():
    _Scorer.received = []
    _Scorer.reply = (200, b'{"score": 0.75, "reasoning": "mostly right"}', 0.0)
    _Scorer.trickle = 0.0
    server = ThreadingHTTPServer(("127.0.0.1", 0), _Scorer)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}/score"
    server.shutdown()


def make_webhook(tenant, url: str, **config):
    with organization_scope(tenant.organization):
        return evaluator_create(
            project=tenant.project,
            actor=tenant.member,
            name="policy",
            kind="webhook",
            config={"url": url, **config},
        )


def subject() -> Subject:
    return Subject(
        input={"question": "Refund ORD-1?"},
        expected="yes",
        metadata={"split": "test"},
        output="Refunded.",
        cost=Decimal("0.0042"),
        latency_ms=900,
        tokens=120,
        steps=[StepView("tool", "lookup_order", "ok", "", {"id": "ORD-1"}, {"paid": True}, "", 12)],
        tool_calls=[ToolCallView("lookup_order", {"id": "ORD-1"}, {"paid": True}, "")],
        run_id=31,
        run_status="succeeded",
    )


def score(tenant, evaluator):
    with organization_scope(tenant.organization):
        return evaluate(spec_of(evaluator), subject(), organization=tenant.organization)


def test_webhook_gets_a_signed_request_and_its_score_is_kept(tenant, scorer_url):
    evaluator, secret = make_webhook(tenant, scorer_url)
    assert secret.startswith("whsec_")

    outcome = score(tenant, evaluator)

    assert (outcome.value, outcome.reasoning, outcome.error) == (0.75, "mostly right", "")
    assert outcome.details["status_code"] == 200
    headers, body = _Scorer.received[0]
    expected = hmac.new(secret.encode(), headers["X-AgentOps-Timestamp"].encode() + b"." + body, hashlib.sha256)
    assert headers["X-AgentOps-Signature"] == f"sha256={expected.hexdigest()}"
    assert abs(int(headers["X-AgentOps-Timestamp"]) - time.time()) < 60
    payload = json.loads(body)
    assert payload["evaluator"] == "policy" and payload["output"] == "Refunded."
    assert payload["item"] == {"input": {"question": "Refund ORD-1?"}, "expected": "yes", "metadata": {"split": "test"}}
    run = payload["run"]
    assert (run["id"], run["status"], run["cost"], run["latency_ms"], run["tokens"]) == (
        31,
        "succeeded",
        "0.0042",
        900,
        120,
    )
    assert run["steps"][0]["name"] == "lookup_order" and run["steps"][0]["output"] == {"paid": True}
    assert run["tool_calls"] == [
        {"name": "lookup_order", "arguments": {"id": "ORD-1"}, "result": {"paid": True}, "error": ""}
    ]


def test_a_given_secret_signs_instead_of_a_generated_one(tenant, scorer_url):
    with organization_scope(tenant.organization):
        evaluator, secret = evaluator_create(
            project=tenant.project,
            actor=None,
            name="mine",
            kind="webhook",
            config={"url": scorer_url},
            secret="my-own-secret-0123456789",
        )
    assert secret == "my-own-secret-0123456789"
    score(tenant, evaluator)
    headers, body = _Scorer.received[0]
    expected = hmac.new(secret.encode(), headers["X-AgentOps-Timestamp"].encode() + b"." + body, hashlib.sha256)
    assert headers["X-AgentOps-Signature"] == f"sha256={expected.hexdigest()}"


@pytest.mark.parametrize(
    ("status", "body", "error"),
    [
        (500, b"boom", "the webhook answered HTTP 500: boom"),
        (200, b"great job", 'the webhook\'s answer is not JSON: "great job"'),
        (200, b'{"grade": 1}', 'the webhook must answer a JSON object with "score" from 0 to 1'),
        (200, b"[1]", 'the webhook must answer a JSON object with "score" from 0 to 1'),
        (200, b'{"score": 7}', 'the webhook\'s "score" must be a number from 0 to 1, not 7'),
        (200, b'{"score": true}', 'the webhook\'s "score" must be a number from 0 to 1, not true'),
        (200, b'{"score": "0.5"}', 'the webhook\'s "score" must be a number from 0 to 1, not "0.5"'),
        (200, b'{"score": 0.5, "reasoning": ["a"]}', 'the webhook\'s "reasoning" must be text'),
    ],
)
def test_a_bad_answer_leaves_no_score_and_says_what_was_wrong(tenant, scorer_url, status, body, error):
    evaluator, _secret = make_webhook(tenant, scorer_url)
    _Scorer.reply = (status, body, 0.0)
    outcome = score(tenant, evaluator)
    assert outcome.value is None and outcome.error.startswith(error), outcome.error


def test_a_slow_webhook_times_out(tenant, scorer_url):
    evaluator, _secret = make_webhook(tenant, scorer_url, timeout_seconds=1)
    _Scorer.reply = (200, b'{"score": 1}', 1.5)
    outcome = score(tenant, evaluator)
    assert outcome.value is None and outcome.error == "the webhook did not answer within 1 s"


def test_a_webhook_trickling_its_answer_times_out_on_the_whole_answer(tenant, scorer_url):
    # Each byte comes well inside the timeout; the whole answer (40 bytes, 10 s) does not.
    evaluator, _secret = make_webhook(tenant, scorer_url, timeout_seconds=1)
    _Scorer.reply = (200, b'{"score": 1' + b" " * 28 + b"}", 0.0)
    _Scorer.trickle = 0.25
    outcome = score(tenant, evaluator)
    assert outcome.value is None and outcome.error == "the webhook did not answer within 1 s"


def test_an_unreachable_webhook_leaves_no_score(tenant):
    evaluator, _secret = make_webhook(tenant, "http://127.0.0.1:9/score")
    outcome = score(tenant, evaluator)
    assert outcome.value is None and outcome.error == "calling the webhook failed: ConnectionError"


@pytest.mark.parametrize("status", [302, 307])
def test_a_webhook_that_redirects_is_not_followed(tenant, redirect_trap, status):
    redirect_trap.status = status
    evaluator, _secret = make_webhook(tenant, f"{redirect_trap.url}/score")
    outcome = score(tenant, evaluator)
    assert outcome.value is None and outcome.error.startswith(f"the webhook answered HTTP {status}")
    assert len(redirect_trap.redirected) == 1 and redirect_trap.elsewhere == []


def test_the_url_is_checked_again_before_each_call(tenant, scorer_url, settings):
    evaluator, _secret = make_webhook(tenant, scorer_url)
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    outcome = score(tenant, evaluator)
    assert outcome.value is None and "the webhook's URL is refused" in outcome.error
    assert "private or reserved" in outcome.error and _Scorer.received == []


def test_a_webhook_whose_host_rebinds_to_a_private_address_is_not_called(tenant, rebinding, settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = True  # saved while the name still answers a public address
    evaluator, _secret = make_webhook(tenant, f"{rebinding.url}/score")
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    outcome = score(tenant, evaluator)
    assert outcome.value is None and "the webhook's URL is refused" in outcome.error
    assert "private or reserved" in outcome.error and rebinding.received == []


def test_an_unsaved_webhook_spec_has_no_secret_to_sign_with(tenant, scorer_url):
    spec = {"id": None, "name": "x", "kind": "webhook", "config": {"url": scorer_url}, "threshold": 0.5}
    with organization_scope(tenant.organization):
        outcome = evaluate(spec, subject(), organization=tenant.organization)
    assert outcome.value is None and "no signing secret" in outcome.error and _Scorer.received == []


def test_webhook_url_is_checked_against_private_addresses(settings):
    settings.ALLOW_PRIVATE_PROVIDER_URLS = False
    with pytest.raises(InvalidRequest, match="private or reserved"):
        validate_config("webhook", {"url": "http://169.254.169.254/latest/meta-data"})
