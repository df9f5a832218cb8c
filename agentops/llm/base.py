"""The chat interface every provider implements."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any, Protocol

# Called with each piece of the answer's text as the model writes it.
OnText = Callable[[str], None]


class ProviderError(Exception):
    """A model call failed for good (after the provider's own retries); the message says why."""

    def __init__(self, message: str, *, retryable: bool = False):
        super().__init__(message)
        self.retryable = retryable


class CallAbandoned(Exception):
    """Raised by an ``on_text`` callback to stop reading an answer (its run was
    cancelled). Providers let it through as it is: it is not a failed call."""


@dataclass
class ChatResult:
    """One model answer, in the shapes the executor stores."""

    content: str
    tool_calls: list[dict[str, Any]]  # [{"id", "name", "arguments": dict}]
    finish_reason: str
    model: str
    input_tokens: int = 0
    output_tokens: int = 0
    # Parts of the counts above: cache reads and writes are input tokens, reasoning
    # tokens output tokens (as OpenTelemetry counts them).
    cached_input_tokens: int = 0
    cache_write_input_tokens: int = 0
    reasoning_output_tokens: int = 0
    raw: dict[str, Any] = field(default_factory=dict)


class ChatProvider(Protocol):
    name: str

    def chat(
        self,
        *,
        model: str,
        messages: list[dict],
        tools: list[dict],
        parameters: dict,
        timeout_ms: int,
        on_text: OnText | None = None,
    ) -> ChatResult:
        """One model call. With ``on_text``, the answer is streamed and each piece of
        its text handed to ``on_text`` as it arrives; the result is the whole answer
        either way. ``timeout_ms`` bounds the whole call, streaming included."""
        ...
