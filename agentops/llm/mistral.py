"""Mistral through its official SDK (``mistralai``), with the organization's key."""

from __future__ import annotations

import functools
import json
import time
import typing
from typing import Any

from agentops.llm.base import CallAbandoned, ChatResult, OnText, ProviderError
from agentops.netguard import checked_transport, refused_connection

# Retries on 429 and 5xx with exponential backoff, honouring Retry-After (the SDK does
# both); timeouts and dropped connections are retried too.
RETRY_INITIAL_MS = 500
RETRY_MAX_INTERVAL_MS = 20_000
RETRY_EXPONENT = 2.0
RETRY_MAX_ELAPSED_MS = 60_000
# A server that cannot be connected to (connection refused, no such host) is tried this
# many times, CONNECT_RETRY_SECONDS apart then doubling, and the call fails: a dead
# endpoint must not hold a worker for the whole backoff budget.
CONNECT_ATTEMPTS = 3
CONNECT_RETRY_SECONDS = 0.5


class EndpointUnreachable(Exception):
    """No connection could be made. Deliberately not an httpx error: the SDK retries
    those for its whole backoff budget; it gives this one up at once."""


def _http_client():
    """The SDK's HTTP client (as it builds it by default), with connection failures
    tried CONNECT_ATTEMPTS times and then raised as EndpointUnreachable."""
    import httpx2

    class Client(httpx2.Client):
        def send(self, request, **kwargs):
            for attempt in range(1, CONNECT_ATTEMPTS + 1):
                try:
                    return super().send(request, **kwargs)
                except httpx2.ConnectError as exc:  # nothing was sent: safe to try again
                    if attempt == CONNECT_ATTEMPTS or refused_connection(exc):
                        origin = f"{request.url.scheme}://{request.url.netloc.decode()}"
                        raise EndpointUnreachable(
                            f"cannot connect to {origin} ({exc or type(exc).__name__}; {attempt} attempts)"
                        ) from exc
                    time.sleep(CONNECT_RETRY_SECONDS * 2 ** (attempt - 1))

    # Each connection goes to an address checked as it connects: the base URL was checked
    # before the call, but its name may point inside by now (DNS rebinding).
    return Client(follow_redirects=False, transport=checked_transport())


def _arguments(raw: Any) -> dict:
    if isinstance(raw, dict):
        return raw
    try:
        value = json.loads(raw or "{}")
    except (TypeError, ValueError):
        return {"_raw": raw}
    return value if isinstance(value, dict) else {"_value": value}


@functools.lru_cache(maxsize=1024)
def _model_for(name: str, typ: Any, config: tuple):
    """The pydantic model the SDK (un)marshals a value of type ``typ`` through, built once
    per process (see ``_reuse_sdk_models``)."""
    from pydantic import ConfigDict, create_model

    return create_model(name, body=(typ, ...), __config__=ConfigDict(**dict(config)))


@functools.lru_cache(maxsize=256)
def _type_hints_of(cls: type) -> dict:
    """``typing.get_type_hints`` of an SDK model class, worked out once per process (see
    ``_reuse_sdk_models``)."""
    return typing.get_type_hints(cls)


def _type_hints(obj: Any, *args: Any, **kwargs: Any) -> dict:
    if args or kwargs or not isinstance(obj, type):
        return typing.get_type_hints(obj, *args, **kwargs)
    return dict(_type_hints_of(obj))  # a copy: the caller may change it


def _reuse_sdk_models() -> None:
    """Make the SDK keep what it works out again for every call. mistralai builds a new
    pydantic model class (``create_model("Unmarshaller", body=(typ, ...))``) for every
    request field and every streamed event it reads: about ten per call, most of a call's
    CPU time. The same type gives the same model, so the one built for a type is kept and
    used again; a call the cache cannot key (an unhashable type) builds its model as
    before. And it evaluates the type hints of the request's class (thirty fields) to
    find its path and query parameters on every call: a class's hints do not change, so
    they are evaluated once per class."""
    from mistralai.client.utils import queryparams, serializers, url

    if getattr(serializers.create_model, "reuses_models", False):
        return
    build = serializers.create_model

    def create_model(name, *, body, __config__=None, **rest):
        if rest:
            return build(name, body=body, __config__=__config__, **rest)
        try:
            return _model_for(name, body[0], tuple(sorted((__config__ or {}).items())))
        except TypeError:  # an unhashable type or setting: not kept
            return build(name, body=body, __config__=__config__)

    create_model.reuses_models = True
    serializers.create_model = create_model
    queryparams.get_type_hints = url.get_type_hints = _type_hints


class MistralProvider:
    name = "mistral_ai"

    def __init__(self, *, api_key: str, base_url: str = "", retry_max_elapsed_ms: int = RETRY_MAX_ELAPSED_MS):
        import httpx2
        from mistralai.client import Mistral
        from mistralai.client.utils import BackoffStrategy, RetryConfig

        _reuse_sdk_models()

        self.client = Mistral(
            api_key=api_key,
            server_url=base_url or None,
            # The SDK's own clients follow redirects: a base URL that redirects would send
            # the conversation (and, to the same host, the key) to an address the outbound
            # URL check never saw. Timeouts are passed per call, as with the SDK's clients.
            client=_http_client(),
            async_client=httpx2.AsyncClient(follow_redirects=False),
            retry_config=RetryConfig(
                "backoff",
                BackoffStrategy(RETRY_INITIAL_MS, RETRY_MAX_INTERVAL_MS, RETRY_EXPONENT, retry_max_elapsed_ms),
                True,
            ),
        )

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
        from mistralai.client import errors

        request = dict(
            model=model,
            messages=messages,
            tools=tools or None,
            timeout_ms=timeout_ms,
            **{key: value for key, value in parameters.items() if value is not None},
        )
        try:
            if on_text is None:
                return _result(self.client.chat.complete(**request), model)
            return _streamed(
                self.client.chat.stream(**request), model, on_text, deadline=time.monotonic() + timeout_ms / 1000
            )
        except errors.SDKError as exc:
            status = getattr(exc, "status_code", None)
            raise ProviderError(
                f"Mistral answered HTTP {status}: {str(exc)[:300]}", retryable=status in (429, 500, 502, 503, 504)
            ) from None
        except (ProviderError, CallAbandoned):
            raise
        except EndpointUnreachable as exc:
            raise ProviderError(f"calling Mistral failed: {exc}", retryable=True) from None
        except Exception as exc:  # noqa: BLE001 - timeouts, connection errors, invalid responses
            raise ProviderError(
                f"calling Mistral failed: {type(exc).__name__}: {str(exc)[:300]}", retryable=True
            ) from None


def _text(content: Any) -> str:
    """A message's content as text: a string, or text chunks (other chunks as JSON)."""
    if content is None or isinstance(content, str):
        return content or ""
    return json.dumps([chunk.model_dump() for chunk in content])


def _result(response, model: str) -> ChatResult:
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
    usage = response.usage
    return ChatResult(
        content=_text(message.content),
        tool_calls=calls,
        finish_reason=str(choice.finish_reason or ""),
        model=response.model or model,
        **usage_counts(usage),
        raw=response.model_dump(mode="json"),
    )


def _count(value: Any) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 0


def usage_counts(usage) -> dict[str, int]:
    """A ``ChatResult``'s token counts from Mistral's usage object: prompt and completion
    tokens, and the parts its answers add beyond the SDK's model (kept as extra fields):
    cached prompt tokens (``prompt_tokens_details.cached_tokens``, or the older
    ``num_cached_tokens``) and reasoning tokens (``completion_tokens_details.
    reasoning_tokens``). Mistral reports no cache writes."""
    if usage is None:
        return {"input_tokens": 0, "output_tokens": 0}
    extra = usage.model_dump(mode="json")
    prompt_details = extra.get("prompt_tokens_details")
    completion_details = extra.get("completion_tokens_details")
    prompt_details = prompt_details if isinstance(prompt_details, dict) else {}
    completion_details = completion_details if isinstance(completion_details, dict) else {}
    return {
        "input_tokens": _count(usage.prompt_tokens),
        "output_tokens": _count(usage.completion_tokens),
        "cached_input_tokens": _count(prompt_details.get("cached_tokens")) or _count(extra.get("num_cached_tokens")),
        "reasoning_output_tokens": _count(completion_details.get("reasoning_tokens")),
    }


def _streamed(events, model: str, on_text: OnText, *, deadline: float) -> ChatResult:
    """Read a streamed answer to its end, handing each piece of text to ``on_text``, and
    put it together as ``chat.complete`` would have answered. Tool calls arrive whole or
    in pieces (by index: the id and name once, the arguments as text to concatenate)."""
    text: list[str] = []
    calls: dict[int, dict[str, Any]] = {}
    finish_reason, answered_model, usage, response_id = "", model, None, ""
    with events as stream:
        for event in stream:
            if time.monotonic() > deadline:
                raise ProviderError(
                    "calling Mistral failed: the streamed answer took longer than the call's time limit"
                )
            chunk = event.data
            answered_model = chunk.model or answered_model
            response_id = chunk.id or response_id
            usage = chunk.usage or usage
            for choice in chunk.choices[:1]:
                delta = choice.delta
                piece = _text(delta.content) if delta.content else ""
                if piece:
                    text.append(piece)
                    on_text(piece)
                for position, call in enumerate(delta.tool_calls or []):
                    index = call.index if isinstance(call.index, int) else position
                    entry = calls.setdefault(index, {"id": "", "name": "", "arguments": ""})
                    if call.id:
                        entry["id"] = call.id
                    if call.function.name:
                        entry["name"] = call.function.name
                    arguments = call.function.arguments
                    if isinstance(arguments, dict):
                        entry["arguments"] = arguments
                    elif arguments:
                        entry["arguments"] = (
                            entry["arguments"] if isinstance(entry["arguments"], str) else ""
                        ) + arguments
                if choice.finish_reason:
                    finish_reason = str(choice.finish_reason)
    content = "".join(text)
    tool_calls = [
        {"id": entry["id"] or f"call_{index}", "name": entry["name"], "arguments": _arguments(entry["arguments"])}
        for index, entry in sorted(calls.items())
    ]
    raw = {
        "id": response_id,
        "object": "chat.completion",
        "model": answered_model,
        "choices": [
            {
                "index": 0,
                "finish_reason": finish_reason,
                "message": {
                    "role": "assistant",
                    "content": content,
                    "tool_calls": [
                        {
                            "id": call["id"],
                            "type": "function",
                            "function": {"name": call["name"], "arguments": json.dumps(call["arguments"])},
                        }
                        for call in tool_calls
                    ]
                    or None,
                },
            }
        ],
        "usage": usage.model_dump(mode="json") if usage else None,
        "streamed": True,
    }
    return ChatResult(
        content=content,
        tool_calls=tool_calls,
        finish_reason=finish_reason,
        model=answered_model,
        **usage_counts(usage),
        raw=raw,
    )
