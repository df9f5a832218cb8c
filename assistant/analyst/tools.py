"""The analyst's tools: the MCP server's read tools (``assistant.read_tools``), offered to
the analyst's model as the executor's tools (the ``analyst`` tool set of
``runs.tools.registry``). A call is checked against the tool's own schema (the SDK's,
as over MCP), then runs for the member who asked: their access to the run's project,
their role checked as the REST API checks it. Whatever a tool refuses goes back to the
model as the tool's error."""

from __future__ import annotations

from functools import cache

from mcp.server.mcpserver.exceptions import ToolError as McpToolError
from mcp.server.mcpserver.tools.base import Tool as McpTool
from pydantic import ValidationError

from agentops.access import Access
from agentops.models import Membership
from assistant import read_tools
from assistant.caller import call_in_thread
from runs.models import Run, Session
from runs.tools.base import Tool, ToolContext, ToolError

TOOLSET = "analyst"
# How far up a chain of replays the asker of an analyst run is looked for.
MAX_REPLAY_HOPS = 20


def asker_access(run_id: int) -> Access:
    """The access of the member who asked the question run ``run_id`` answers (a replay's
    source's asker for a replay of an answer); refused when they are no longer a member."""
    run = Run.objects.select_related("project__organization").get(pk=run_id)
    project, asked_by, current = run.project, None, run
    for _hop in range(MAX_REPLAY_HOPS):
        asked_by = (current.metadata or {}).get("analyst", {}).get("asked_by")
        if asked_by is None and current.agent_session_id is not None:  # a turn of a chat with the analyst
            asked_by = Session.objects.filter(pk=current.agent_session_id).values_list("started_by", flat=True).first()
        if asked_by or current.replay_of_id is None:
            break
        current = Run.objects.get(pk=current.replay_of_id)
    membership = (
        Membership.objects.filter(user_id=asked_by).select_related("user").first() if asked_by is not None else None
    )
    if membership is None:
        raise ToolError("the analyst reads for the member who asked, and they are not a member of this organization")
    return Access(organization=project.organization, membership=membership, project=project)


def _as_tool(function) -> Tool:
    described = McpTool.from_function(function, structured_output=True)

    def call(arguments: dict, context: ToolContext):
        try:
            validated = described.fn_metadata.validate_arguments(arguments if isinstance(arguments, dict) else {})
        except ValidationError as error:
            problems = "; ".join(
                f"{'.'.join(str(part) for part in problem['loc']) or 'arguments'}: {problem['msg']}"
                for problem in error.errors()
            )
            raise ToolError(f"invalid arguments: {problems}") from None
        try:
            return call_in_thread(asker_access(context.run_id), function, **validated)
        except McpToolError as error:
            raise ToolError(str(error)) from None

    return Tool(
        name=described.name,
        description=described.description,
        parameters=described.parameters,
        call=call,
        builtin=False,
    )


@cache
def _tools() -> dict[str, Tool]:
    return {tool.name: tool for tool in map(_as_tool, read_tools.TOOLS)}


def analyst_tools(*, project) -> dict[str, Tool]:
    """The analyst's tools by name (the same for every project: each call reads the asker's)."""
    return _tools()
