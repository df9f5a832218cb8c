"""Who calls the MCP server, and how every tool, resource and prompt runs for them.

The caller is a project API key sent as a Bearer token; the ASGI wrapper
(``assistant.server``) resolves it once per HTTP request and puts it in
``current_key`` for the handlers of that request. ``run_for_caller`` is the one way
a handler reaches the database: in a worker thread, with the key's organization in
scope, after the key's scopes are checked against the permission the REST API asks
for the same thing (``work:read`` for reads, ``work:write`` for actions).

The analyst (``assistant.analyst``) calls the same tools from an executor's worker for
a member: ``current_access`` then holds that member's access to the project, and the
handler runs in the worker's own thread (``call_in_thread``), checked against the
member's role. Every error
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
current_access: contextvars.ContextVar[Access | None] = contextvars.ContextVar("assistant_access", default=None)

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


def _run(permission: str, what: str, body: Callable[..., Any], caller: ApiKey | Access | None, arguments: dict) -> Any:
    if caller is None:  # the ASGI wrapper lets no request through without a key
        raise ToolError("authentication required")
    if isinstance(caller, Access):
        access = caller
    else:
        access = Access(organization=caller.organization, api_key=caller, project=caller.project)
    try:
        access.require(permission, what)
        with organization_scope(access.organization):
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
    access = current_access.get()
    if access is not None:  # the analyst, in a worker's thread (call_in_thread): the body runs here
        return _run(permission, what, body, access, arguments)
    key = current_key.get()
    # Not thread-sensitive: one slow tool call must not hold up the process's others.
    return await database_sync_to_async(_run, thread_sensitive=False)(permission, what, body, key, arguments)


def call_in_thread(access: Access, coroutine_function: Callable[..., Any], **arguments) -> Any:
    """``coroutine_function(**arguments)`` (a tool of this app) for ``access``, run to its
    end in this (synchronous) thread: with ``current_access`` set, ``run_for_caller``
    never suspends, so the coroutine ends at its first step with no event loop (the ORM
    refuses to run inside one). Tool errors come out as ``ToolError``."""
    token = current_access.set(access)
    try:
        coroutine = coroutine_function(**arguments)
        try:
            coroutine.send(None)
        except StopIteration as done:
            return done.value
        coroutine.close()
        raise RuntimeError(f"{coroutine_function.__name__} waited on something; it cannot run in a thread")
    finally:
        current_access.reset(token)
