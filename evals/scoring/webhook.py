"""The webhook evaluator kind: the organization's own service scores. It gets a signed
``POST`` (``webhook_payload``; the headers and signature of webhook tools, keyed with the
evaluator's secret) and answers ``{"score": 0..1, "reasoning": "...", "details": {...}}``.

The URL is checked against private addresses when saved and again before each call;
redirects are not followed, the answer is read up to ``WEBHOOK_RESPONSE_MAX_BYTES``, and
anything else than a score from 0 to 1 gives no score, with the reason.
"""

from __future__ import annotations

import json
import secrets as secret_tokens
import time
from dataclasses import asdict

import requests

from agentops.errors import InvalidRequest
from agentops.netguard import UnsafeUrlError, check_outbound_url, outbound_session, read_within
from evals.scoring.config import ConfigReader
from evals.scoring.registry import EvaluatorKind, register
from evals.scoring.subject import Outcome, Subject
from evals.scoring.values import loads, short

WEBHOOK_RESPONSE_MAX_BYTES = 200_000


def webhook_payload(spec: dict, subject: Subject) -> dict:
    """What a webhook evaluator receives (docs/evaluations.md shows it)."""
    return {
        "evaluator": spec.get("name", ""),
        "item": {"input": subject.input, "expected": subject.expected, "metadata": subject.metadata},
        "output": subject.output,
        "run": {
            "id": subject.run_id,
            "status": subject.run_status,
            "cost": str(subject.cost) if subject.cost is not None else None,
            "latency_ms": subject.latency_ms,
            "tokens": subject.tokens,
            "steps": [asdict(step) for step in subject.steps],
            "tool_calls": [asdict(call) for call in subject.tool_calls],
        },
    }


def new_webhook_secret() -> str:
    return "whsec_" + secret_tokens.token_urlsafe(32)


def _webhook_secret(spec: dict, organization) -> str | None:
    from agentops import crypto
    from evals.models import Evaluator

    if spec.get("id") is None:
        return None
    ciphertext = (
        Evaluator.objects.filter(pk=spec["id"], organization=organization)
        .values_list("secret_ciphertext", flat=True)
        .first()
    )
    return crypto.decrypt(ciphertext) if ciphertext else None


@register
class Webhook(EvaluatorKind):
    name = "webhook"
    settings = ("url", "timeout_seconds")
    help = 'Your service scores it: a signed POST that answers {"score": 0..1, "reasoning": "..."}.'
    example = {"url": "https://evals.example.com/score", "timeout_seconds": 10}
    try_note = "your webhook is really called"
    signing_secret = True

    def clean(self, c: ConfigReader) -> None:
        url = c.text("url", required=True, max_length=500).strip()
        try:
            check_outbound_url(url)
        except UnsafeUrlError as exc:
            raise InvalidRequest(f"URL refused: {exc}") from None
        c.cleaned["url"] = url
        c.number("timeout_seconds", default=10, low=1, high=60)

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        from runs.tools.webhook import signature

        url = config.get("url", "")
        timeout = float(config.get("timeout_seconds", 10))
        try:
            check_outbound_url(url)
        except UnsafeUrlError as exc:
            return Outcome(value=None, error=f"the webhook's URL is refused: {exc}")
        secret = _webhook_secret(spec, organization)
        if not secret:
            return Outcome(value=None, error="the webhook evaluator has no signing secret (save it first)")
        body = json.dumps(webhook_payload(spec, subject), separators=(",", ":"), default=str).encode()
        timestamp = str(int(time.time()))
        headers = {
            "Content-Type": "application/json",
            "User-Agent": "AgentOps-Studio-Evaluator/1",
            "X-AgentOps-Timestamp": timestamp,
            "X-AgentOps-Signature": signature(secret, timestamp, body),
        }
        started = time.monotonic()
        try:
            with (
                outbound_session() as session,
                session.post(
                    url, data=body, headers=headers, timeout=timeout, stream=True, allow_redirects=False
                ) as response,
            ):
                raw = read_within(response, max_bytes=WEBHOOK_RESPONSE_MAX_BYTES, deadline=started + timeout)
        except UnsafeUrlError as exc:  # the name now resolves to a private address
            return Outcome(value=None, error=f"the webhook's URL is refused: {exc}")
        except requests.Timeout:
            return Outcome(value=None, error=f"the webhook did not answer within {timeout:g} s")
        except requests.RequestException as exc:
            return Outcome(value=None, error=f"calling the webhook failed: {type(exc).__name__}")
        details = {"status_code": response.status_code, "elapsed_ms": round((time.monotonic() - started) * 1000)}
        if len(raw) > WEBHOOK_RESPONSE_MAX_BYTES:
            return Outcome(value=None, error=f"the webhook answered more than {WEBHOOK_RESPONSE_MAX_BYTES} bytes")
        text = raw.decode(response.encoding or "utf-8", errors="replace")
        if response.status_code >= 300:
            return Outcome(
                value=None, error=f"the webhook answered HTTP {response.status_code}: {text[:300]}", details=details
            )
        ok, answer = loads(text)
        if not ok:
            return Outcome(value=None, error=f"the webhook's answer is not JSON: {short(text, 200)}", details=details)
        if not isinstance(answer, dict) or "score" not in answer:
            return Outcome(
                value=None,
                error=f'the webhook must answer a JSON object with "score" from 0 to 1, not {short(answer, 200)}',
                details=details,
            )
        score = answer["score"]
        if isinstance(score, bool) or not isinstance(score, int | float) or not 0 <= score <= 1:
            return Outcome(
                value=None,
                error=f'the webhook\'s "score" must be a number from 0 to 1, not {short(score, 40)}',
                details=details,
            )
        reasoning = answer.get("reasoning", "")
        if not isinstance(reasoning, str):
            return Outcome(value=None, error='the webhook\'s "reasoning" must be text', details=details)
        if isinstance(answer.get("details"), dict):
            details["details"] = answer["details"]
        return Outcome(value=float(score), reasoning=reasoning, details=details)
