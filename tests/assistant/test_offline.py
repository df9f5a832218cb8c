"""The offline analyst on its own: which read tool it calls for a question, and that it
answers from what the tool returned, labelled, the same every time."""

from __future__ import annotations

import json

from assistant.analyst.offline import LABEL, OfflineAnalyst

TOOLS = [
    {"type": "function", "function": {"name": name, "parameters": {}}}
    for name in ("search_runs", "get_run", "get_spend", "get_budget_status", "list_jobs", "list_sessions")
]
SYSTEM = {"role": "system", "content": "You are the AgentOps analyst of the project acme/agent."}


def ask(messages):
    return OfflineAnalyst().chat(model="offline-analyst", messages=messages, tools=TOOLS, parameters={}, timeout_ms=1)


def test_a_project_question_is_read_with_the_tool_its_words_name():
    for question, tool in [
        ("How much did we spend this month?", "get_spend"),
        ("Are we over budget?", "get_budget_status"),
        ("Which GPU jobs ran?", "list_jobs"),
        ("Show me the open sessions", "list_sessions"),
        ("What failed today?", "search_runs"),
        ("Hello", "search_runs"),
    ]:
        (call,) = ask([SYSTEM, {"role": "user", "content": question}]).tool_calls
        assert call["name"] == tool, question


def test_it_answers_from_the_tool_result_labelled_and_deterministically():
    spend = {
        "period": {"start": "2026-11-01T00:00:00Z"},
        "rows": [{"name": "mistral-large-latest", "cost": "1.25"}, {"name": "offline", "cost": "0"}],
        "totals": {"cost": "1.25"},
    }
    conversation = [
        SYSTEM,
        {"role": "user", "content": "How much did we spend?"},
        {"role": "assistant", "content": "", "tool_calls": []},
        {"role": "tool", "name": "get_spend", "content": json.dumps(spend)},
    ]
    streamed = []
    first = ask(conversation)
    second = OfflineAnalyst().chat(
        model="offline-analyst",
        messages=conversation,
        tools=TOOLS,
        parameters={},
        timeout_ms=1,
        on_text=streamed.append,
    )
    assert first.tool_calls == [] and first.content == second.content == "".join(streamed)
    assert first.content.startswith(LABEL)
    assert "Total spend since 2026-11-01: $1.25." in first.content and "- mistral-large-latest: $1.25" in first.content


def test_a_tool_refusal_is_said_not_hidden():
    conversation = [
        SYSTEM,
        {"role": "user", "content": "What failed?"},
        {"role": "tool", "name": "search_runs", "content": json.dumps({"error": "permission_denied: no"})},
    ]
    assert ask(conversation).content == LABEL + "the tools refused: search_runs: permission_denied: no"
