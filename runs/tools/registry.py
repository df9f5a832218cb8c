"""The tools of a project: the built-ins and its webhook tools, by name; and the tool
sets of the platform's own agents (the assistant app's analyst), registered at start-up
so runs never imports them. A run names its tool set in its spec (``Spec.toolset``);
users' agents have none, and are never offered a tool set's tools."""

from __future__ import annotations

from collections.abc import Callable

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


# name -> the tools of that set for a project.
TOOLSETS: dict[str, Callable[..., dict[str, Tool]]] = {}


def register_toolset(name: str, tools: Callable[..., dict[str, Tool]]) -> None:
    """Register a platform tool set: ``tools(project=...)`` answers its tools by name."""
    TOOLSETS[name] = tools


def tools_for(*, project, names: list[str], toolset: str = "") -> dict[str, Tool]:
    """The named tools (of ``toolset`` when one is named, else the project's); names that
    are not there are left out (the caller reports them)."""
    if not names:  # an agent without tools: nothing to look up
        return {}
    if toolset:
        source = TOOLSETS.get(toolset)
        available = source(project=project) if source else {}
    else:
        available = available_tools(project=project)
    return {name: available[name] for name in names if name in available}
