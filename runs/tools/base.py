"""What every tool is: a name, a JSON schema of its arguments, and a call."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any


class ToolError(Exception):
    """The tool refused or failed; the message goes back to the model as the tool's result."""


@dataclass
class ToolContext:
    """What a call may use besides its arguments: the run's scratch memory, which the
    memory tools read and write and the executor records as snapshots."""

    memory: dict[str, Any] = field(default_factory=dict)
    run_id: int | None = None
    call_id: str = ""


@dataclass(frozen=True)
class Tool:
    name: str
    description: str
    parameters: dict
    call: Callable[[dict, ToolContext], Any]
    builtin: bool = True

    def definition(self) -> dict:
        """The tool as the chat-completions API describes it to the model."""
        return {
            "type": "function",
            "function": {"name": self.name, "description": self.description, "parameters": self.parameters},
        }
