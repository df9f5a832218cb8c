"""Which provider serves a model for an organization."""

from __future__ import annotations

import threading
from collections.abc import Callable
from functools import lru_cache

from django.conf import settings

from agentops.errors import InvalidRequest
from agentops.llm.base import ChatProvider
from agentops.llm.context import CONTEXT_WINDOWS
from agentops.llm.mistral import MistralProvider
from agentops.llm.offline import OFFLINE_MODEL, OfflineProvider
from agentops.services.secrets import provider_credentials

# Scripted models other apps add (the assistant's offline analyst), by model name, so
# this layer imports none of them.
OFFLINE_MODELS: dict[str, Callable[[], ChatProvider]] = {}


def register_offline_model(name: str, factory: Callable[[], ChatProvider], *, context_window: int) -> None:
    """Serve the model ``name`` with ``factory()``, no key needed."""
    OFFLINE_MODELS[name] = factory
    CONTEXT_WINDOWS[name] = context_window


def provider_for(*, organization, model: str) -> ChatProvider:
    """The offline model for "offline" (and the registered scripted models); otherwise
    Mistral with the organization's key."""
    if model == OFFLINE_MODEL:
        return OfflineProvider()
    if model in OFFLINE_MODELS:
        return OFFLINE_MODELS[model]()
    credentials = provider_credentials(organization=organization, provider="mistral")
    if credentials is None:
        raise InvalidRequest(
            "no Mistral API key is configured for this organization: add one under Secrets, or use the offline model"
        )
    api_key, base_url = credentials
    return mistral_client(api_key, base_url, settings.LLM_RETRY_MAX_SECONDS * 1000)


_building = threading.Lock()


def mistral_client(api_key: str, base_url: str, retry_max_elapsed_ms: int) -> MistralProvider:
    """The process's client for this key, server and retry budget; the threads of a worker
    starting at once wait for the one being built rather than each build their own."""
    with _building:
        return _mistral(api_key, base_url, retry_max_elapsed_ms)


@lru_cache(maxsize=64)
def _mistral(api_key: str, base_url: str, retry_max_elapsed_ms: int) -> MistralProvider:
    """One client per key, server and retry budget, kept for the process: building the
    SDK's client takes tens of milliseconds, once per run otherwise. A changed key or
    server is another entry (the old one ages out)."""
    return MistralProvider(api_key=api_key, base_url=base_url, retry_max_elapsed_ms=retry_max_elapsed_ms)
