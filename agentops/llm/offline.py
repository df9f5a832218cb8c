"""A scripted, deterministic stand-in for a model, clearly labelled "offline", so a new
install runs agents end to end with no provider key. It is not a language model: it
calls each of the agent's tools once with arguments read from the user's message, then
answers with what the tools returned."""

from __future__ import annotations

import json
import re

from agentops.llm.base import ChatResult, OnText

OFFLINE_MODEL = "offline"
ARITHMETIC = re.compile(r"[-+*/().\d\s%]{3,}")


def _arguments_for(tool: dict, text: str) -> dict:
    name = tool["function"]["name"]
    properties = tool["function"].get("parameters", {}).get("properties", {})
    if name == "calculator":
        match = max(ARITHMETIC.findall(text), key=len, default="1 + 1").strip()
        return {"expression": match or "1 + 1"}
    if name == "memory_set":
        return {"key": "last_question", "value": text[:200]}
    if name == "memory_get":
        return {"key": "last_question"}
    if name == "current_time":
        return {"timezone": "UTC"}
    # Other tools: the message for every string property.
    return {key: text[:200] for key, spec in properties.items() if spec.get("type", "string") == "string"}


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


class OfflineProvider:
    name = "offline"

    def chat(
        self,
        *,
        model: str,
        messages: list[dict],
        tools: list[dict],
        parameters: dict,
        timeout_ms: int,
        on_text: OnText | None = None,
    ):
        user = next((m.get("content") or "" for m in reversed(messages) if m.get("role") == "user"), "")
        user = user if isinstance(user, str) else json.dumps(user)
        called = {m.get("name") for m in messages if m.get("role") == "tool"}
        prompt_tokens = sum(_tokens(json.dumps(m, default=str)) for m in messages)
        for index, tool in enumerate(tools):
            name = tool["function"]["name"]
            if name not in called:
                call = {"id": f"offline_{len(called)}_{index}", "name": name, "arguments": _arguments_for(tool, user)}
                return ChatResult(
                    content="",
                    tool_calls=[call],
                    finish_reason="tool_calls",
                    model=OFFLINE_MODEL,
                    input_tokens=prompt_tokens,
                    output_tokens=12,
                )
        results = [f"{m.get('name')}: {m.get('content')}" for m in messages if m.get("role") == "tool"]
        answer = "[offline model] " + ("Tool results — " + "; ".join(results) if results else f"You said: {user[:500]}")
        if on_text is not None:
            # Streamed a few words at a time, as a model would.
            words = re.findall(r"\S+\s*", answer)
            for start in range(0, len(words), 4):
                on_text("".join(words[start : start + 4]))
        return ChatResult(
            content=answer,
            tool_calls=[],
            finish_reason="stop",
            model=OFFLINE_MODEL,
            input_tokens=prompt_tokens,
            output_tokens=_tokens(answer),
        )
