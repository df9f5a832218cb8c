"""The MCP server's resources, by URI template: a run, a dataset, a leaderboard, an
experiment, a session of the caller's project, as JSON. The same reads as the tools; an
unknown or another tenant's id is a "not found" MCP error (-32002), a bad one -32602."""

from __future__ import annotations

import json

from mcp.server.mcpserver.exceptions import ToolError
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_PARAMS

from assistant.caller import run_for_caller
from assistant.read_tools import dataset_data, experiment_data, leaderboard_data, run_page, session_data

READ = "work:read"
RESOURCE_NOT_FOUND = -32002


def _number(value: str, what: str) -> int:
    if not value.isdecimal() or int(value) < 1:
        raise MCPError(code=INVALID_PARAMS, message=f"{what}: expected a positive number, got {value!r}")
    return int(value)


def _name_or_id(value: str):
    return int(value) if value.isdecimal() else value


async def _read(what: str, body, **arguments) -> str:
    try:
        answer = await run_for_caller(READ, what, body, **arguments)
    except ToolError as error:
        message = str(error)
        code = RESOURCE_NOT_FOUND if message.startswith("not_found") else INVALID_PARAMS
        raise MCPError(code=code, message=message) from None
    return json.dumps(answer)


async def run_resource(run_id: str) -> str:
    """A run: its summary, step tree and transcript (the first page of get_run)."""
    return await _read("read runs", run_page, run_id=_number(run_id, "run id"))


async def dataset_resource(dataset: str) -> str:
    """A dataset (by name or id): its description, latest version and item count."""
    return await _read("read evaluations", dataset_data, dataset=_name_or_id(dataset))


async def leaderboard_resource(dataset: str) -> str:
    """A dataset's leaderboard (by the dataset's name or id)."""
    return await _read("read evaluations", leaderboard_data, dataset=_name_or_id(dataset))


async def experiment_resource(experiment_id: str) -> str:
    """An experiment: status, progress and, once ended, its summary."""
    return await _read("read evaluations", experiment_data, experiment_id=_number(experiment_id, "experiment id"))


async def session_resource(session_id: str) -> str:
    """An interactive session: its turns, queued messages and pending approvals (get_session)."""
    return await _read("read sessions", session_data, session_id=_number(session_id, "session id"))


# (URI template, name, function)
RESOURCES = [
    ("agentops://runs/{run_id}", "run", run_resource),
    ("agentops://datasets/{dataset}", "dataset", dataset_resource),
    ("agentops://datasets/{dataset}/leaderboard", "leaderboard", leaderboard_resource),
    ("agentops://experiments/{experiment_id}", "experiment", experiment_resource),
    ("agentops://sessions/{session_id}", "session", session_resource),
]
