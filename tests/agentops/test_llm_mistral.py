"""The Mistral provider (agentops/llm/mistral.py) through the real ``mistralai`` SDK."""

import pytest

from agentops.llm.base import ProviderError
from agentops.llm.mistral import MistralProvider


@pytest.mark.parametrize("status", [302, 307])
def test_a_base_url_that_redirects_gets_an_error_and_the_key_goes_nowhere_else(redirect_trap, status):
    redirect_trap.status = status
    provider = MistralProvider(api_key="sk-organization-key", base_url=redirect_trap.url, retry_max_elapsed_ms=500)

    with pytest.raises(ProviderError, match=f"HTTP {status}"):
        provider.chat(
            model="mistral-small-latest",
            messages=[{"role": "user", "content": "hi"}],
            tools=[],
            parameters={},
            timeout_ms=5000,
        )

    assert redirect_trap.redirected[0]["authorization"] == "Bearer sk-organization-key"
    assert redirect_trap.elsewhere == []
