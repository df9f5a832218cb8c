"""The Mistral provider (agentops/llm/mistral.py) through the real ``mistralai`` SDK."""

import pytest

from agentops.llm.base import ProviderError
from agentops.llm.mistral import MistralProvider
from agentops.netguard import check_outbound_url


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


def test_a_base_url_whose_name_rebinds_to_a_private_address_gets_neither_the_key_nor_the_conversation(rebinding):
    base_url = check_outbound_url(rebinding.url)  # as provider_credentials checks it before each use
    provider = MistralProvider(api_key="sk-organization-key", base_url=base_url, retry_max_elapsed_ms=500)

    with pytest.raises(ProviderError, match="private or reserved"):
        provider.chat(
            model="mistral-small-latest",
            messages=[{"role": "user", "content": "hi"}],
            tools=[],
            parameters={},
            timeout_ms=5000,
        )

    assert rebinding.received == []


def test_calls_after_the_first_build_no_new_sdk_models_and_answer_the_same(fake_mistral):
    """The SDK builds a pydantic model for each value it reads or writes; the provider keeps
    them, so a process's later calls (streamed or not) build none, and answer as before;
    the type hints of the request classes are evaluated once per class likewise."""
    from agentops.llm.mistral import _model_for, _type_hints_of

    _model_for.cache_clear()  # as in a new process, whatever ran before in this one
    _type_hints_of.cache_clear()
    from tests.fake_mistral import completion

    provider = MistralProvider(api_key="sk-test", base_url=fake_mistral.url, retry_max_elapsed_ms=500)
    request = dict(
        model="mistral-small-latest",
        messages=[{"role": "system", "content": "be brief"}, {"role": "user", "content": "6*7?"}],
        tools=[{"type": "function", "function": {"name": "calc", "parameters": {"type": "object"}}}],
        parameters={"temperature": 0.2},
        timeout_ms=5000,
    )
    answers, built = [], []
    for _ in range(2):
        for streamed in (False, True):
            fake_mistral.reply(completion(content="It is 42.", tool_calls=[("c1", "calc", {"x": 6})]))
            answers.append(provider.chat(**request, on_text=(lambda piece: None) if streamed else None))
        built.append((_model_for.cache_info().misses, _type_hints_of.cache_info().misses))

    assert built[0][0] > 0 and built[0][1] > 0
    assert built[1] == built[0]  # the second round built nothing new
    for answer in answers:
        assert answer.content == "It is 42."
        assert answer.tool_calls == [{"id": "c1", "name": "calc", "arguments": {"x": 6}}]
        assert (answer.input_tokens, answer.output_tokens) == (100, 20)
