"""Built-in tools: safe by construction (no eval, no open network, bounded work)."""

from __future__ import annotations

import ast
import json
import math
import operator
import time
from datetime import UTC, datetime
from urllib.parse import urlsplit
from zoneinfo import ZoneInfo, ZoneInfoNotFoundError

import requests
from django.conf import settings

from agentops.netguard import UnsafeUrlError, check_outbound_url, outbound_session, read_within
from runs.tools.base import Tool, ToolContext, ToolError

# --- calculator ---------------------------------------------------------------------

_BINARY = {
    ast.Add: operator.add,
    ast.Sub: operator.sub,
    ast.Mult: operator.mul,
    ast.Div: operator.truediv,
    ast.FloorDiv: operator.floordiv,
    ast.Mod: operator.mod,
    ast.Pow: operator.pow,
}
_UNARY = {ast.UAdd: operator.pos, ast.USub: operator.neg}
_FUNCTIONS = {"sqrt": math.sqrt, "abs": abs, "round": round, "floor": math.floor, "ceil": math.ceil}
_CONSTANTS = {"pi": math.pi, "e": math.e}
MAX_EXPRESSION_LENGTH = 500
MAX_EXPONENT = 1000
MAX_MAGNITUDE = 1e300


def _evaluate(node: ast.AST) -> float | int:
    if isinstance(node, ast.Expression):
        return _evaluate(node.body)
    if isinstance(node, ast.Constant) and type(node.value) in (int, float):
        return node.value
    if isinstance(node, ast.Name) and node.id in _CONSTANTS:
        return _CONSTANTS[node.id]
    if isinstance(node, ast.UnaryOp) and type(node.op) in _UNARY:
        return _UNARY[type(node.op)](_evaluate(node.operand))
    if isinstance(node, ast.BinOp) and type(node.op) in _BINARY:
        left, right = _evaluate(node.left), _evaluate(node.right)
        if isinstance(node.op, ast.Pow) and abs(right) > MAX_EXPONENT:
            raise ToolError(f"exponents above {MAX_EXPONENT} are not allowed")
        try:
            value = _BINARY[type(node.op)](left, right)
        except ZeroDivisionError:
            raise ToolError("division by zero") from None
        if isinstance(value, complex):
            raise ToolError("the result is not a real number")
        if abs(value) > MAX_MAGNITUDE:
            raise ToolError("the result is too large")
        return value
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Name)
        and node.func.id in _FUNCTIONS
        and not node.keywords
        and 1 <= len(node.args) <= 2
    ):
        try:
            return _FUNCTIONS[node.func.id](*(_evaluate(arg) for arg in node.args))
        except (ValueError, TypeError) as exc:
            raise ToolError(f"{node.func.id}: {exc}") from None
    raise ToolError("only numbers, + - * / // % **, parentheses, pi, e and sqrt/abs/round/floor/ceil are allowed")


def calculate(arguments: dict, context: ToolContext) -> dict:
    expression = arguments.get("expression")
    if not isinstance(expression, str) or not expression.strip():
        raise ToolError("give the expression to evaluate as a string")
    if len(expression) > MAX_EXPRESSION_LENGTH:
        raise ToolError(f"the expression is longer than {MAX_EXPRESSION_LENGTH} characters")
    try:
        tree = ast.parse(expression, mode="eval")
    except SyntaxError:
        raise ToolError(f"not an arithmetic expression: {expression!r}") from None
    return {"expression": expression, "result": _evaluate(tree)}


CALCULATOR = Tool(
    name="calculator",
    description="Evaluate an arithmetic expression, e.g. '(3 + 4) * 2 / sqrt(16)'.",
    parameters={
        "type": "object",
        "properties": {"expression": {"type": "string", "description": "The arithmetic expression."}},
        "required": ["expression"],
    },
    call=calculate,
)


# --- current time ---------------------------------------------------------------------


def current_time(arguments: dict, context: ToolContext) -> dict:
    name = arguments.get("timezone") or "UTC"
    try:
        zone = ZoneInfo(name)
    except (ZoneInfoNotFoundError, ValueError):
        raise ToolError(f"unknown time zone {name!r}; use an IANA name such as Europe/Paris") from None
    now = datetime.now(UTC).astimezone(zone)
    return {"timezone": name, "iso": now.isoformat(timespec="seconds"), "weekday": now.strftime("%A")}


CURRENT_TIME = Tool(
    name="current_time",
    description="The current date and time, in UTC or an IANA time zone.",
    parameters={
        "type": "object",
        "properties": {"timezone": {"type": "string", "description": "IANA time zone, e.g. Europe/Paris."}},
    },
    call=current_time,
)


# --- HTTP fetch -------------------------------------------------------------------------

FETCH_MAX_BYTES = 200_000
FETCH_TIMEOUT_SECONDS = 10.0


def _host_allowed(host: str, allowed: list[str]) -> bool:
    host = host.lower().rstrip(".")
    return any(host == entry or (entry.startswith(".") and host.endswith(entry)) for entry in allowed)


def http_fetch(arguments: dict, context: ToolContext) -> dict:
    url = arguments.get("url")
    if not isinstance(url, str):
        raise ToolError("give the URL to fetch as a string")
    allowed = [host.lower() for host in settings.HTTP_FETCH_ALLOWED_HOSTS]
    host = urlsplit(url).hostname or ""
    if not allowed or not _host_allowed(host, allowed):
        raise ToolError(f"{host or url!r} is not in the allowed hosts ({', '.join(allowed) or 'none configured'})")
    try:
        check_outbound_url(url, allow_private=settings.ALLOW_PRIVATE_PROVIDER_URLS)
    except UnsafeUrlError as exc:
        raise ToolError(str(exc)) from None
    try:
        deadline = time.monotonic() + FETCH_TIMEOUT_SECONDS
        with (
            outbound_session() as session,
            session.get(url, timeout=FETCH_TIMEOUT_SECONDS, stream=True, allow_redirects=False) as response,
        ):
            body = read_within(response, max_bytes=FETCH_MAX_BYTES, deadline=deadline)
    except UnsafeUrlError as exc:  # the name now resolves to a private address
        raise ToolError(str(exc)) from None
    except requests.RequestException as exc:
        raise ToolError(f"fetching {url} failed: {type(exc).__name__}") from None
    truncated = len(body) > FETCH_MAX_BYTES
    text = body[:FETCH_MAX_BYTES].decode(response.encoding or "utf-8", errors="replace")
    return {
        "url": url,
        "status": response.status_code,
        "content_type": response.headers.get("Content-Type", ""),
        "body": text,
        "truncated": truncated,
    }


HTTP_FETCH = Tool(
    name="http_fetch",
    description="Fetch a web page or API response (GET) from an allowed host; the body is cut at 200 kB.",
    parameters={
        "type": "object",
        "properties": {"url": {"type": "string", "description": "http(s) URL on an allowed host."}},
        "required": ["url"],
    },
    call=http_fetch,
)


# --- scratch memory ---------------------------------------------------------------------

MEMORY_MAX_KEYS = 100
MEMORY_MAX_VALUE_BYTES = 10_000


def memory_set(arguments: dict, context: ToolContext) -> dict:
    key, value = arguments.get("key"), arguments.get("value")
    if not isinstance(key, str) or not key or len(key) > 100:
        raise ToolError("give a key of 1 to 100 characters")
    if len(json.dumps(value, default=str)) > MEMORY_MAX_VALUE_BYTES:
        raise ToolError(f"values are limited to {MEMORY_MAX_VALUE_BYTES} bytes of JSON")
    if key not in context.memory and len(context.memory) >= MEMORY_MAX_KEYS:
        raise ToolError(f"the memory holds at most {MEMORY_MAX_KEYS} keys; delete one first")
    if value is None:
        context.memory.pop(key, None)
        return {"deleted": key}
    context.memory[key] = value
    return {"stored": key}


def memory_get(arguments: dict, context: ToolContext) -> dict:
    key = arguments.get("key")
    if key in (None, ""):
        return {"keys": sorted(context.memory)}
    return {"key": key, "value": context.memory.get(key), "found": key in context.memory}


MEMORY_SET = Tool(
    name="memory_set",
    description="Remember a value under a key for the rest of the run (a null value forgets the key).",
    parameters={
        "type": "object",
        "properties": {"key": {"type": "string"}, "value": {"description": "Any JSON value."}},
        "required": ["key", "value"],
    },
    call=memory_set,
)
MEMORY_GET = Tool(
    name="memory_get",
    description="Read a remembered value by key; without a key, list the keys.",
    parameters={"type": "object", "properties": {"key": {"type": "string"}}},
    call=memory_get,
)

BUILTIN_TOOLS = {tool.name: tool for tool in (CALCULATOR, CURRENT_TIME, HTTP_FETCH, MEMORY_SET, MEMORY_GET)}
