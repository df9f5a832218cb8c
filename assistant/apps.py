from django.apps import AppConfig


class AssistantConfig(AppConfig):
    """The platform over the Model Context Protocol (docs/mcp.md). The top layer: it
    reads and acts through the other apps' selectors and services only."""

    name = "assistant"
    verbose_name = "Assistant"

    def ready(self):
        # The analyst's tools and its offline model, registered with the lower layers
        # (runs and agentops never import this app).
        from agentops.llm.providers import register_offline_model
        from assistant.analyst.offline import OFFLINE_ANALYST_MODEL, OfflineAnalyst
        from assistant.analyst.tools import TOOLSET, analyst_tools
        from runs.tools.registry import register_toolset

        register_toolset(TOOLSET, analyst_tools)
        register_offline_model(OFFLINE_ANALYST_MODEL, OfflineAnalyst, context_window=128_000)

    def asgi_routes(self):
        """What this app serves beside Django in the ASGI application
        (``agentops.asgi`` asks every app for it, so the core imports no app)."""
        from assistant.server import asgi_routes

        return asgi_routes()
