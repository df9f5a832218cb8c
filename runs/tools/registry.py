"""The tools of a project: the built-ins and its webhook tools, by name."""

from __future__ import annotations

from runs.models import WebhookTool
from runs.tools.base import Tool
from runs.tools.builtins import BUILTIN_TOOLS
from runs.tools.webhook import as_tool


def available_tools(*, project) -> dict[str, Tool]:
    """Every tool an agent of ``project`` may use (a webhook tool may not shadow a built-in)."""
    tools = dict(BUILTIN_TOOLS)
    for webhook in WebhookTool.objects.filter(project=project):
        tools.setdefault(webhook.name, as_tool(webhook))
    return tools


def tools_for(*, project, names: list[str]) -> dict[str, Tool]:
    """The named tools; names the project no longer has are left out (the caller reports them)."""
    if not names:  # an agent without tools: nothing to look up
        return {}
    available = available_tools(project=project)
    return {name: available[name] for name in names if name in available}
