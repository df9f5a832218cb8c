"""The LLM judge, against the local Mistral-speaking server: it is shown the whole
trajectory, asked for JSON at temperature 0, and its score, reasoning, tokens and cost
are kept; an answer that is not a score from 0 to 1 leaves no score, with the reason."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest

from agentops.scoping import organization_scope
from evals.scoring.judge import render_trajectory
from evals.scoring.registry import evaluate, validate_config
from evals.scoring.subject import StepView, Subject, ToolCallView
from tests.fake_mistral import completion


def judge_spec(**config) -> dict:
    cleaned = validate_config(
        "llm_judge", {"rubric": "Score 1 if the refund was issued for the right order.", **config}
    )
    return {"id": None, "name": "helpfulness", "kind": "llm_judge", "config": cleaned, "threshold": 0.5}


def refund_run() -> Subject:
    return Subject(
        input="Please refund order ORD-77",
        expected="A refund of ORD-77",
        metadata={},
        output="Done: ORD-77 was refunded.",
        cost=Decimal("0.001"),
        latency_ms=1200,
        tokens=300,
        steps=[
            StepView("llm", "chat", "ok", "mistral-large-latest", [{"role": "user", "content": "refund"}], "", "", 400),
            StepView("tool", "lookup_order", "ok", "", {"order_id": "ORD-77"}, {"status": "paid"}, "", 30),
            StepView("llm", "chat", "ok", "mistral-large-latest", None, "calling issue_refund", "", 380),
        ],
        tool_calls=[
            ToolCallView("lookup_order", {"order_id": "ORD-77"}, {"status": "paid"}, ""),
            ToolCallView("issue_refund", {"order_id": "ORD-77", "amount": 42}, {"refund_id": "R-1"}, ""),
        ],
        run_id=5,
        run_status="succeeded",
    )


def judge(tenant, spec, subject):
    with organization_scope(tenant.organization):
        return evaluate(spec, subject, organization=tenant.organization)


def answer(content: str) -> dict:
    return completion(content=content, model="mistral-small-latest", prompt_tokens=900, completion_tokens=40)


def test_judge_sees_the_trajectory_and_its_score_and_reasoning_are_kept(tenant, fake_mistral):
    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(answer('{"score": 0.9, "reasoning": "Looked the order up, then refunded it."}'))

    outcome = judge(tenant, judge_spec(), refund_run())

    assert outcome.value == 0.9 and outcome.error == ""
    assert outcome.reasoning == "Looked the order up, then refunded it."
    assert outcome.details["judge_model"] == "mistral-small-latest"
    assert (outcome.details["input_tokens"], outcome.details["output_tokens"]) == (900, 40)
    assert Decimal(outcome.details["cost"]) > 0 and outcome.details["trajectory_truncated"] is False

    body = fake_mistral.requests[0]["body"]
    assert body["model"] == "mistral-small-latest" and body["temperature"] == 0
    assert body["response_format"] == {"type": "json_object"}
    prompt = body["messages"][-1]["content"]
    assert "Score 1 if the refund was issued for the right order." in prompt
    assert "Please refund order ORD-77" in prompt and "A refund of ORD-77" in prompt
    assert "Done: ORD-77 was refunded." in prompt
    # Every step, and the tool call that has no step of its own, with arguments and result.
    assert "1. llm 'chat' model=mistral-large-latest" in prompt and "output: calling issue_refund" in prompt
    assert "2. tool 'lookup_order'" in prompt and 'output: {"status": "paid"}' in prompt
    assert "tool call 1: issue_refund" in prompt and '"amount": 42' in prompt and '"refund_id": "R-1"' in prompt


def test_judge_without_trajectory_sees_only_the_answer(tenant, fake_mistral):
    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(answer('{"score": 1, "reasoning": "ok"}'))
    judge(tenant, judge_spec(include_trajectory=False), refund_run())
    prompt = fake_mistral.requests[0]["body"]["messages"][-1]["content"]
    assert "Done: ORD-77 was refunded." in prompt and "lookup_order" not in prompt


def test_a_json_answer_in_a_code_fence_or_with_words_around_it_is_read(tenant, fake_mistral):
    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(answer('```json\n{"score": 0, "reasoning": "wrong order"}\n```'))
    fake_mistral.reply(answer('Here is my grade: {"score": "0.5", "reasoning": "partly"} Thanks.'))
    assert judge(tenant, judge_spec(), refund_run()).value == 0.0
    assert judge(tenant, judge_spec(), refund_run()).value == 0.5


@pytest.mark.parametrize(
    ("content", "error"),
    [
        ("The answer looks fine to me.", "the judge did not answer with a JSON object"),
        ('{"score": 1.5, "reasoning": "great"}', "the judge's score 1.5 is not a number from 0 to 1"),
        ('{"score": "high"}', 'the judge\'s score "high" is not a number from 0 to 1'),
        ('{"reasoning": "no score"}', 'the judge\'s answer has no "score"'),
        ("[0.5]", "the judge did not answer with a JSON object"),
    ],
)
def test_a_bad_answer_leaves_no_score_and_says_why(tenant, fake_mistral, content, error):
    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(answer(content))
    outcome = judge(tenant, judge_spec(), refund_run())
    assert outcome.value is None and outcome.error.startswith(error)
    # The call was made and paid for all the same.
    assert outcome.details["input_tokens"] == 900 and outcome.details["answer"] == content


def test_without_a_mistral_key_the_judge_cannot_score(tenant):
    outcome = judge(tenant, judge_spec(), refund_run())
    assert outcome.value is None and "no Mistral API key is configured" in outcome.error


def test_a_long_trajectory_is_cut_to_its_budget_fairly(tenant, fake_mistral):
    long_run = refund_run()
    long_run.steps.append(StepView("tool", "read_file", "ok", "", {"path": "a.txt"}, "x" * 50_000, "", 9))
    text, cut = render_trajectory(long_run, 2_000)
    assert cut and len(text) <= 2_000
    # Short values stay whole; the long one gives way.
    assert '{"order_id": "ORD-77"}' in text and "characters cut]" in text

    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(answer('{"score": 0.2, "reasoning": "slow"}'))
    outcome = judge(tenant, judge_spec(max_trajectory_chars=2_000), long_run)
    assert outcome.value == 0.2 and outcome.details["trajectory_truncated"] is True
    prompt = fake_mistral.requests[0]["body"]["messages"][-1]["content"]
    assert "long values were shortened" in prompt and len(prompt) < 5_000
    assert json.dumps(fake_mistral.requests[0]["body"]).count("x" * 2_000) == 0


def test_each_judge_call_is_evaluation_spend_in_the_ledger_even_when_its_answer_is_bad(tenant, fake_mistral):
    from billing.models import EvaluationUsage, UsageDaily

    fake_mistral.serve(tenant.organization)
    fake_mistral.reply(answer('{"score": 0.9, "reasoning": "fine"}'))
    fake_mistral.reply(answer("no JSON at all"))
    with organization_scope(tenant.organization):
        good = evaluate(judge_spec(), refund_run(), organization=tenant.organization, project=tenant.project)
        bad = evaluate(judge_spec(), refund_run(), organization=tenant.organization, project=tenant.project)
        calls = list(EvaluationUsage.objects.order_by("id"))
        ledger = list(UsageDaily.objects.filter(category="evaluation"))
    assert good.value == 0.9 and bad.value is None
    assert [(call.evaluator, call.model, call.input_tokens, call.output_tokens) for call in calls] == [
        ("helpfulness", "mistral-small-latest", 900, 40)
    ] * 2
    assert all(call.cost == Decimal(good.details["cost"]) and call.run_id == 5 for call in calls)
    assert len(ledger) == 1 and ledger[0].steps == 2 and ledger[0].cost == 2 * Decimal(good.details["cost"])
    assert ledger[0].project_id == tenant.project.pk and ledger[0].model == "mistral-small-latest"
