"""Context compaction of an executed run (runs.execution.compaction)."""

from agentops.scoping import organization_scope
from runs.execution import run_execute
from runs.models import Step
from tests.fake_mistral import completion
from tests.runs.execution_helpers import start_run, use_fake_mistral


def test_long_conversation_is_compacted_and_the_compaction_recorded(tenant, fake_mistral, monkeypatch):
    from agentops.llm import context

    monkeypatch.setitem(context.CONTEXT_WINDOWS, "mistral-small", 400)
    for n in range(6):
        fake_mistral.reply(completion(tool_calls=[(f"c{n}", "calculator", {"expression": f"{n} + {n} * 1000"})]))
    fake_mistral.reply(completion(content="All done."))
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest", system_prompt="You are a careful calculator. " * 5)
        run_execute(run_id=run.pk)
        run.refresh_from_db()
        compactions = list(Step.objects.filter(run=run, name="context compaction"))
        summarising = Step.objects.filter(run=run, name__startswith="summarise").count()
    assert run.status == "succeeded" and run.output == "All done."
    assert compactions and summarising == len(compactions)
    assert compactions[0].attributes["messages_after"] < compactions[0].attributes["messages_before"]
    agent_requests = [
        r["body"]["messages"]
        for r in fake_mistral.requests
        if not r["body"]["messages"][0]["content"].startswith("Summarise")
    ]
    last = agent_requests[-1]
    assert last[0]["role"] == "system" and last[1] == {"role": "user", "content": "What is (6 * 7) + 0?"}
    assert any("Summary of the earlier conversation: The user asked" in (m.get("content") or "") for m in last)
    # Uncompacted, the last request would hold system + user + 6 x (tool call, tool result) = 14.
    assert len(last) < 14
