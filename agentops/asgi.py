"""ASGI entry point: HTTP through Django, WebSockets through Channels, and the paths an
app serves beside Django (the MCP server at /mcp): an installed app whose AppConfig has
``asgi_routes()`` mounts them here, so the core imports no app. Those apps' lifespans
(the MCP session manager) start with the ASGI lifespan: uvicorn must run with
``--lifespan on`` (``serve``, the Dockerfile and compose do)."""

import os

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "agentops.settings")

from agentops.bootstrap import check_external_services  # noqa: E402

check_external_services("asgi")

from contextlib import AsyncExitStack  # noqa: E402

from django.apps import apps  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.asgi import get_asgi_application  # noqa: E402
from django.core.handlers.asgi import ASGIHandler  # noqa: E402
from django.core.signals import request_finished  # noqa: E402
from django.db import connections  # noqa: E402
from django.http.request import split_domain_port, validate_host  # noqa: E402

django_asgi_app = get_asgi_application()

from channels.auth import AuthMiddlewareStack  # noqa: E402
from channels.routing import ProtocolTypeRouter, URLRouter  # noqa: E402
from channels.security.websocket import AllowedHostsOriginValidator  # noqa: E402

from agentops.heap import settle_heap  # noqa: E402
from agentops.rebalance import CloseWhenBusy  # noqa: E402
from agentops.routing import websocket_urlpatterns  # noqa: E402


class MountedApps:
    """Exact paths to other ASGI apps, the rest to Django; the ASGI lifespan starts and
    stops the mounted apps' lifespans. A mounted path checks the Host against
    ALLOWED_HOSTS as Django does for its own (400 otherwise)."""

    def __init__(self, default):
        self.default = default
        self.routes: dict = {}
        self.lifespans: list = []
        for config in apps.get_app_configs():
            if hasattr(config, "asgi_routes"):
                mounted = config.asgi_routes()
                self.routes.update(mounted["routes"])
                self.lifespans.append(mounted["lifespan"])

    async def __call__(self, scope, receive, send):
        if scope["type"] == "lifespan":
            await self._lifespan(receive, send)
            return
        app = self.routes.get(scope["path"].rstrip("/") or "/")
        if app is None:
            await self.default(scope, receive, send)
            return
        host = next((value.decode("latin-1") for key, value in scope["headers"] if key == b"host"), "")
        domain, _port = split_domain_port(host)
        if not domain or not validate_host(domain, settings.ALLOWED_HOSTS):
            await send({"type": "http.response.start", "status": 400, "headers": [(b"content-type", b"text/plain")]})
            await send({"type": "http.response.body", "body": b"Bad Request: this host is not allowed"})
            return
        await app(scope, receive, send)

    async def _lifespan(self, receive, send):
        await receive()  # lifespan.startup
        stack = AsyncExitStack()
        try:
            for lifespan in self.lifespans:
                await stack.enter_async_context(lifespan())
        except Exception as error:  # noqa: BLE001 - told to the server, which stops
            await send({"type": "lifespan.startup.failed", "message": str(error)})
            return
        await send({"type": "lifespan.startup.complete"})
        message = await receive()  # lifespan.shutdown
        assert message["type"] == "lifespan.shutdown"
        await stack.aclose()
        await send({"type": "lifespan.shutdown.complete"})


http_application = MountedApps(django_asgi_app)
if settings.WEB_PROCESSES > 1:
    http_application = CloseWhenBusy(http_application)

application = ProtocolTypeRouter(
    {
        "http": http_application,
        "websocket": AllowedHostsOriginValidator(AuthMiddlewareStack(URLRouter(websocket_urlpatterns))),
        "lifespan": http_application,
    }
)


def _settle_garbage_collector() -> None:
    """Load the URLconf (and with it every view) now, then settle the collector on what
    is loaded (``agentops.heap``): its share of ingestion fell from about 15 to under 5
    microseconds of CPU per span (docs/performance.md)."""
    from django.urls import get_resolver

    get_resolver().url_patterns  # noqa: B018 - loads the URLconf
    settle_heap()


def _close_request_connections(**_signal_args) -> None:
    """Close the database connections of the request that just ended. Under ASGI,
    Django runs each request's synchronous code in a thread of its own that ends with
    the request, so a connection kept open for reuse (``CONN_MAX_AGE``) can never serve
    another request: it stays open, idle, until the garbage collector (tuned above to
    run rarely) frees it, and a few hundred requests held PostgreSQL's
    ``max_connections`` (bench/scale_out.py: "too many clients"). Threads shared by
    requests (``thread_sensitive=False``, the SSE streams) are not this thread and keep
    theirs."""
    connections.close_all()


_settle_garbage_collector()
# After Django's own receiver (close_old_connections), in the thread of the request; for
# requests served through ASGI only (the test client's own handler keeps its connection).
request_finished.connect(
    _close_request_connections, sender=ASGIHandler, dispatch_uid="agentops.asgi.close_request_connections"
)
