"""The MCP server (docs/mcp.md): the SDK's ``MCPServer`` with the platform's tools,
resources and prompts, served over streamable HTTP at ``/mcp``, stateless (any web
process answers any request; nothing is kept between requests), JSON answers.

Authorization is a project API key as a Bearer token, resolved here once per HTTP
request (``agentops.services.api_keys.api_key_authenticate``, as the REST API does).
Without a valid one the answer is 401 with ``WWW-Authenticate: Bearer
resource_metadata="<origin>/.well-known/oauth-protected-resource/mcp"``, and that
address serves the RFC 9728 protected-resource metadata. Both are built from the
request's own host (checked against ALLOWED_HOSTS), so one process serves every name
the platform answers to; the SDK's own auth would fix one URL at start-up. A key over
``MCP_RATE_LIMIT_PER_KEY`` is answered 429 with ``Retry-After`` (assistant.rate_limit).

``asgi_routes`` is what ``agentops.asgi`` mounts (through ``AssistantConfig``): path
prefix -> ASGI application, and the lifespan that starts the SDK's session manager.
"""

from __future__ import annotations

import json
from contextlib import asynccontextmanager
from typing import Any

from channels.db import database_sync_to_async
from django.conf import settings
from mcp.server.mcpserver import MCPServer
from mcp.server.transport_security import TransportSecuritySettings

from agentops.services.api_keys import KeyRejected, api_key_authenticate
from assistant import action_tools, prompts, read_tools, resources
from assistant.caller import current_key
from assistant.rate_limit import KeyRateLimit

MCP_PATH = "/mcp"
METADATA_PATH = "/.well-known/oauth-protected-resource/mcp"
SCOPES = ["read", "execute"]

INSTRUCTIONS = (
    "AgentOps Studio: the runs, evaluations, spend and GPU jobs of the project your API key belongs to. "
    "Read tools need the key's read scope; actions (replay_run, start_run, start_experiment, run_gate, "
    "submit_job, add_run_to_dataset) need execute and are refused when a hard budget is spent. Long answers "
    "are cut and give next_cursor to read on."
)


def build_server() -> MCPServer:
    server = MCPServer("agentops", title="AgentOps Studio", instructions=INSTRUCTIONS, version="1")
    for tool in read_tools.TOOLS:
        server.add_tool(tool, structured_output=True)
    for tool in action_tools.TOOLS:
        server.add_tool(tool, structured_output=True)
    for uri, name, function in resources.RESOURCES:
        server.resource(uri, name=name, description=function.__doc__, mime_type="application/json")(function)
    for name, function in prompts.PROMPTS:
        server.prompt(name=name, description=function.__doc__)(function)
    return server


def transport_security() -> TransportSecuritySettings:
    """The SDK's DNS-rebinding check, from ALLOWED_HOSTS: each host with any port; a
    ``.example.com`` entry allows example.com itself (the SDK has no subdomain pattern;
    ``agentops.asgi`` has already checked the host with Django's own rule); ``*`` turns it off."""
    hosts = list(settings.ALLOWED_HOSTS)
    if "*" in hosts:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    names = [host.lstrip(".") for host in hosts]
    return TransportSecuritySettings(
        enable_dns_rebinding_protection=True,
        allowed_hosts=[pattern for name in names for pattern in (name, f"{name}:*")],
        allowed_origins=[
            f"{scheme}://{name}{port}" for name in names for scheme in ("http", "https") for port in ("", ":*")
        ],
    )


def _header(scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return value.decode("latin-1")
    return None


def _origin(scope) -> str:
    host = _header(scope, b"host") or "localhost"
    scheme = "https" if scope.get("scheme") == "https" else "http"
    return f"{scheme}://{host}"


async def _send_json(send, status: int, body: dict, headers: list[tuple[bytes, bytes]] = ()) -> None:
    payload = json.dumps(body).encode()
    await send(
        {
            "type": "http.response.start",
            "status": status,
            "headers": [
                (b"content-type", b"application/json"),
                (b"content-length", str(len(payload)).encode()),
                *headers,
            ],
        }
    )
    await send({"type": "http.response.body", "body": payload})


def protected_resource_metadata(origin: str) -> dict[str, Any]:
    """RFC 9728: what this resource is and how to present a token to it. No
    authorization server is listed: the tokens are project API keys made in the
    project's settings (or over the REST API), not OAuth grants."""
    return {
        "resource": f"{origin}{MCP_PATH}",
        "authorization_servers": [],
        "scopes_supported": SCOPES,
        "bearer_methods_supported": ["header"],
        "resource_name": "AgentOps Studio MCP server",
    }


@database_sync_to_async
def _authenticate(raw_key: str):
    return api_key_authenticate(raw_key)


class MetadataApp:
    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http" or scope["method"] not in ("GET", "HEAD"):
            await _send_json(send, 405, {"error": "method_not_allowed"}, [(b"allow", b"GET")])
            return
        await _send_json(send, 200, protected_resource_metadata(_origin(scope)))


class AuthorizedMcpApp:
    """The SDK's streamable-HTTP app behind the platform's API keys."""

    def __init__(self, server: MCPServer):
        self.server = server
        self.app = None
        self.rate_limit: KeyRateLimit | None = None

    def _build_app(self):
        return self.server.streamable_http_app(
            streamable_http_path=MCP_PATH,
            stateless_http=True,
            json_response=True,
            transport_security=transport_security(),
        )

    async def _refuse(self, scope, send, description: str) -> None:
        metadata = f"{_origin(scope)}{METADATA_PATH}"
        challenge = f'Bearer error="invalid_token", error_description="{description}", resource_metadata="{metadata}"'
        await _send_json(
            send,
            401,
            {"error": "invalid_token", "error_description": description},
            [(b"www-authenticate", challenge.encode())],
        )

    async def __call__(self, scope, receive, send) -> None:
        if scope["type"] != "http":
            return
        header = _header(scope, b"authorization") or ""
        scheme, _, raw_key = header.partition(" ")
        if scheme.lower() != "bearer" or not raw_key.strip():
            await self._refuse(scope, send, "a project API key is required as a Bearer token")
            return
        try:
            key = await _authenticate(raw_key.strip())
        except KeyRejected as rejected:
            await self._refuse(scope, send, str(rejected))
            return
        if self.app is None:
            message = "the MCP server starts with the ASGI lifespan (uvicorn --lifespan on)"
            await _send_json(send, 503, {"error": message})
            return
        verdict = await self.rate_limit.check(key.pk)
        if not verdict.allowed:
            message = (
                f"this API key made more than {verdict.limit} requests to the MCP server in {verdict.period} "
                f"seconds (MCP_RATE_LIMIT_PER_KEY); retry in {verdict.retry_after} seconds"
            )
            await _send_json(
                send,
                429,
                {"error": {"code": "throttled", "message": message, "details": {"retry_after": verdict.retry_after}}},
                [(b"retry-after", str(verdict.retry_after).encode())],
            )
            return
        token = current_key.set(key)
        try:
            await self.app(scope, receive, send)
        finally:
            current_key.reset(token)

    @asynccontextmanager
    async def lifespan(self):
        # A session manager runs once; each start of the lifespan (a test's server
        # after another's) gets its own app and manager.
        self.app = self._build_app()
        self.rate_limit = KeyRateLimit()
        try:
            async with self.server.session_manager.run():
                yield
        finally:
            await self.rate_limit.close()


def asgi_routes() -> dict[str, Any]:
    """``{"routes": {path: app}, "lifespan": async context manager factory}``."""
    app = AuthorizedMcpApp(build_server())
    return {"routes": {MCP_PATH: app, METADATA_PATH: MetadataApp()}, "lifespan": app.lifespan}
