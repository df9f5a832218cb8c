from django.apps import AppConfig


class AgentopsConfig(AppConfig):
    name = "agentops"
    verbose_name = "AgentOps core"
