"""Which provider serves a model for an organization."""

from __future__ import annotations

from django.conf import settings

from agentops.errors import InvalidRequest
from agentops.llm.base import ChatProvider
from agentops.llm.mistral import MistralProvider
from agentops.llm.offline import OFFLINE_MODEL, OfflineProvider
from agentops.services.secrets import provider_credentials


def provider_for(*, organization, model: str) -> ChatProvider:
    """The offline model for "offline"; otherwise Mistral with the organization's key."""
    if model == OFFLINE_MODEL:
        return OfflineProvider()
    credentials = provider_credentials(organization=organization, provider="mistral")
    if credentials is None:
        raise InvalidRequest(
            "no Mistral API key is configured for this organization: add one under Secrets, or use the offline model"
        )
    api_key, base_url = credentials
    return MistralProvider(
        api_key=api_key, base_url=base_url, retry_max_elapsed_ms=settings.LLM_RETRY_MAX_SECONDS * 1000
    )
