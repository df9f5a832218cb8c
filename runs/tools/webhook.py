"""Webhook tools: the platform POSTs the call to the team's URL, signed with HMAC.

Request: ``POST <url>`` with JSON ``{"tool", "arguments", "run_id", "call_id"}`` and headers
``X-AgentOps-Timestamp: <unix seconds>`` and
``X-AgentOps-Signature: sha256=<hex HMAC-SHA256 of "<timestamp>.<body>" with the tool's secret>``.
The receiver checks the signature and that the timestamp is recent, then answers with
JSON (the tool's result) or text. The URL is checked against private addresses when the
tool is saved and again before every call.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import time

import requests

from agentops import crypto, jsonsafe
from agentops.netguard import UnsafeUrlError, check_outbound_url, outbound_session, read_within
from runs.models import WebhookTool
from runs.tools.base import Tool, ToolContext, ToolError

RESPONSE_MAX_BYTES = 200_000


def signature(secret: str, timestamp: str, body: bytes) -> str:
    """The value of the X-AgentOps-Signature header (receivers compute the same)."""
    digest = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256).hexdigest()
    return f"sha256={digest}"


def call_webhook(tool: WebhookTool, arguments: dict, context: ToolContext) -> object:
    try:
        check_outbound_url(tool.url)
    except UnsafeUrlError as exc:
        raise ToolError(f"the tool's URL is refused: {exc}") from None
    body = json.dumps(
        {"tool": tool.name, "arguments": arguments, "run_id": context.run_id, "call_id": context.call_id},
        separators=(",", ":"),
    ).encode()
    timestamp = str(int(time.time()))
    headers = {
        "Content-Type": "application/json",
        "User-Agent": "AgentOps-Studio-Webhook/1",
        "X-AgentOps-Timestamp": timestamp,
        "X-AgentOps-Signature": signature(crypto.decrypt(tool.secret_ciphertext), timestamp, body),
    }
    deadline = time.monotonic() + tool.timeout_seconds
    try:
        with (
            outbound_session() as session,
            session.post(
                tool.url, data=body, headers=headers, timeout=tool.timeout_seconds, stream=True, allow_redirects=False
            ) as response,
        ):
            raw = read_within(response, max_bytes=RESPONSE_MAX_BYTES, deadline=deadline)
    except UnsafeUrlError as exc:  # the name now resolves to a private address
        raise ToolError(f"the tool's URL is refused: {exc}") from None
    except requests.Timeout:
        raise ToolError(f"the tool did not answer within {tool.timeout_seconds:g} s") from None
    except requests.RequestException as exc:
        raise ToolError(f"calling the tool failed: {type(exc).__name__}") from None
    if len(raw) > RESPONSE_MAX_BYTES:
        raise ToolError(f"the tool answered more than {RESPONSE_MAX_BYTES} bytes")
    text = raw.decode(response.encoding or "utf-8", errors="replace")
    # A redirect is an answer too, never followed: the signed call goes to the checked URL only.
    if response.status_code >= 300:
        raise ToolError(f"the tool answered HTTP {response.status_code}: {text[:500]}")
    try:
        return jsonsafe.loads(text, strict=False)
    except ValueError:  # not JSON, or nested too deeply to hand to the model as JSON
        return text


def as_tool(webhook: WebhookTool) -> Tool:
    return Tool(
        name=webhook.name,
        description=webhook.description,
        parameters=webhook.parameters or {"type": "object", "properties": {}},
        call=lambda arguments, context: call_webhook(webhook, arguments, context),
        builtin=False,
    )
