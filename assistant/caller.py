"""Who calls the MCP server, and how every tool, resource and prompt runs for them.

The caller is a project API key sent as a Bearer token; the ASGI wrapper
(``assistant.server``) resolves it once per HTTP request and puts it in
``current_key`` for the handlers of that request. ``run_for_caller`` is the one way
a handler reaches the database: in a worker thread, with the key's organization in
scope, after the key's scopes are checked against the permission the REST API asks
for the same thing (``work:read`` for reads, ``work:write`` for actions). Every error
becomes a ``ToolError`` with a message for the person (or model) that asked: another
tenant's object reads "not found" exactly as a missing one; nothing unexpected ever
shows its traceback, only that it failed and was logged.
"""

from __future__ import annotations

import contextvars
import json
import logging
from collections.abc import Callable
from typing import Any

from channels.db import database_sync_to_async
from django.core.serializers.json import DjangoJSONEncoder
from django.http import Http404
from mcp.server.mcpserver.exceptions import ToolError
from rest_framework.exceptions import ValidationError

from agentops.access import Access
from agentops.errors import ServiceError
from agentops.models import ApiKey
from agentops.scoping import organization_scope

logger = logging.getLogger(__name__)

current_key: contextvars.ContextVar[ApiKey | None] = contextvars.ContextVar("assistant_api_key", default=None)

# The largest answer a handler gives, in characters of JSON; a larger one is refused
# with a message that says how to ask for less (the paging tools stay under it).
MAX_RESULT_CHARS = 200_000


def as_json_data(value: Any) -> Any:
    """``value`` with decimals, dates and the like as the REST API writes them (text)."""
    return json.loads(json.dumps(value, cls=DjangoJSONEncoder))


def validation_message(detail: Any, prefix: str = "") -> str:
    """A DRF validation error as one line: ``field: problem; other: problem``."""
    if isinstance(detail, dict):
        return "; ".join(validation_message(value, f"{prefix}{key}.") for key, value in detail.items())
    if isinstance(detail, list):
        return "; ".join(validation_message(value, prefix) for value in detail)
    return f"{prefix.rstrip('.')}: {detail}" if prefix else str(detail)


def _run(permission: str, what: str, body: Callable[..., Any], key: ApiKey | None, arguments: dict) -> Any:
    if key is None:  # the ASGI wrapper lets no request through without a key
        raise ToolError("authentication required")
    access = Access(organization=key.organization, api_key=key, project=key.project)
    try:
        access.require(permission, what)
        with organization_scope(key.organization):
            answer = as_json_data(body(access, **arguments))
    except ServiceError as error:
        raise ToolError(f"{error.code}: {error.message}") from None
    except Http404 as error:
        raise ToolError(f"not_found: {error}") from None
    except ValidationError as error:
        raise ToolError(f"invalid: {validation_message(error.detail)}") from None
    except ToolError:
        raise
    except Exception:
        logger.exception("MCP handler %s failed", getattr(body, "__name__", body))
        raise ToolError("internal_error: the server could not answer this; the failure has been logged") from None
    size = len(json.dumps(answer))
    if size > MAX_RESULT_CHARS:
        raise ToolError(
            f"too_large: the answer is {size} characters, over the limit of {MAX_RESULT_CHARS}; "
            "ask for fewer items (limit) and page with the cursor"
        )
    return answer


async def run_for_caller(permission: str, what: str, body: Callable[..., Any], **arguments) -> Any:
    """``body(access, **arguments)`` for the current caller, in a worker thread (the ORM is
    synchronous), with its organization in scope; its answer as JSON-ready data."""
    key = current_key.get()
    # Not thread-sensitive: one slow tool call must not hold up the process's others.
    return await database_sync_to_async(_run, thread_sensitive=False)(permission, what, body, key, arguments)
