from django.apps import AppConfig


class AssistantConfig(AppConfig):
    """The platform over the Model Context Protocol (docs/mcp.md). The top layer: it
    reads and acts through the other apps' selectors and services only."""

    name = "assistant"
    verbose_name = "Assistant"

    def asgi_routes(self):
        """What this app serves beside Django in the ASGI application
        (``agentops.asgi`` asks every app for it, so the core imports no app)."""
        from assistant.server import asgi_routes

        return asgi_routes()
