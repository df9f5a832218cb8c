"""Mistral through its official SDK (``mistralai``), with the organization's key."""

from __future__ import annotations

import json
from typing import Any

from agentops.llm.base import ChatResult, ProviderError

# Retries on 429 and 5xx with exponential backoff, honouring Retry-After (the SDK does
# both); connection errors are retried too.
RETRY_INITIAL_MS = 500
RETRY_MAX_INTERVAL_MS = 20_000
RETRY_EXPONENT = 2.0
RETRY_MAX_ELAPSED_MS = 60_000


def _arguments(raw: Any) -> dict:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_value": value}


class MistralProvider:
    name = "mistral_ai"

    def __init__(self, *, api_key: str, base_url: str = "", retry_max_elapsed_ms: int = RETRY_MAX_ELAPSED_MS):
        from mistralai.client import Mistral
        from mistralai.client.utils import BackoffStrategy, RetryConfig

        self.client = Mistral(
            api_key=api_key,
            server_url=base_url or None,
            retry_config=RetryConfig(
                "backoff",
                BackoffStrategy(RETRY_INITIAL_MS, RETRY_MAX_INTERVAL_MS, RETRY_EXPONENT, retry_max_elapsed_ms),
                True,
            ),
        )

    def chat(self, *, model: str, messages: list[dict], tools: list[dict], parameters: dict, timeout_ms: int):
        from mistralai.client import errors

        try:
            response = self.client.chat.complete(
                model=model,
                messages=messages,
                tools=tools or None,
                timeout_ms=timeout_ms,
                **{key: value for key, value in parameters.items() if value is not None},
            )
        except errors.SDKError as exc:
            status = getattr(exc, "status_code", None)
            raise ProviderError(
                f"Mistral answered HTTP {status}: {str(exc)[:300]}", retryable=status in (429, 500, 502, 503, 504)
            ) from None
        except Exception as exc:  # noqa: BLE001 - timeouts, connection errors, invalid responses
            raise ProviderError(
                f"calling Mistral failed: {type(exc).__name__}: {str(exc)[:300]}", retryable=True
            ) from None
        choice = response.choices[0]
        message = choice.message
        calls = [
            {
                "id": call.id or f"call_{index}",
                "name": call.function.name,
                "arguments": _arguments(call.function.arguments),
            }
            for index, call in enumerate(message.tool_calls or [])
        ]
        content = (
            message.content
            if isinstance(message.content, str)
            else json.dumps([chunk.model_dump() for chunk in message.content or []])
        )
        usage = response.usage
        return ChatResult(
            content=content or "",
            tool_calls=calls,
            finish_reason=str(choice.finish_reason or ""),
            model=response.model or model,
            input_tokens=usage.prompt_tokens or 0 if usage else 0,
            output_tokens=usage.completion_tokens or 0 if usage else 0,
            raw=response.model_dump(mode="json"),
        )
