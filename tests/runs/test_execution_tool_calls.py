"""The tool calls of an executed run (runs.execution.tool_calls): repeated actions.
Approvals are in test_approvals.py, replays' recorded calls in test_replays.py."""

from agentops.scoping import organization_scope
from runs.execution import run_execute
from tests.fake_mistral import completion
from tests.runs.execution_helpers import start_run, use_fake_mistral


def test_repeated_action_gets_a_warning_then_stops_the_run(tenant, fake_mistral):
    for _ in range(6):
        fake_mistral.reply(completion(tool_calls=[("c", "calculator", {"expression": "1+1"})]))
    with organization_scope(tenant.organization):
        use_fake_mistral(tenant, fake_mistral)
        run = start_run(tenant, model="mistral-small-latest")
        run_execute(run_id=run.pk)
        run.refresh_from_db()
    assert run.status == "failed"
    assert run.error == "repeated action: calculator was called with the same arguments 4 times in a row"
    fourth_request = fake_mistral.requests[3]["body"]["messages"]
    assert fourth_request[-1]["role"] == "user" and "same arguments 3 times in a row" in fourth_request[-1]["content"]
    assert len(fake_mistral.requests) == 4
