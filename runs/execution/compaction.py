"""Context compaction: a conversation that nears the model's context window is shrunk
before the next model call. The system prompt, the first user message and the latest
messages are kept, the middle replaced by a summary the model writes; the summarising
call and the compaction are stored as steps of the run, with the state after it."""

from __future__ import annotations

import json

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from agentops.llm.base import ProviderError
from agentops.llm.context import context_window, estimate_tokens
from runs.events import StepEvent
from runs.execution.claims import save_state
from runs.execution.starting import Spec
from runs.execution.writes import ROOT_SPAN, llm_step, write
from runs.models import Run
from runs.services.events import event_append

# Compact the conversation when it passes this share of the model's context window,
# keeping this many of the latest messages.
COMPACT_AT = 0.8
KEEP_RECENT = 6


def compact_if_needed(run: Run, state: dict, provider, spec: Spec, parameters: dict, force: bool = False) -> None:
    """Compact the conversation when it passes ``COMPACT_AT`` of the model's window, or
    when asked (``force``: a session's "compact now")."""
    if force or estimate_tokens(state["conversation"]) > COMPACT_AT * context_window(spec.model):
        _compact(run, state, provider, spec, parameters)


def _compact(run: Run, state: dict, provider, spec: Spec, parameters: dict) -> None:
    """Shrink a conversation that nears the model's context window: keep the system
    prompt, the first user message and the most recent messages, replace the middle by
    a summary the model writes, and record both the summarising call and the compaction
    as steps of the run, with the state after it."""
    conversation = state["conversation"]
    head = [m for m in conversation[:2] if m["role"] in ("system", "user")]
    if len(head) == 2 and head[1]["role"] != "user":
        head = head[:1]
    tail_start = max(len(head), len(conversation) - KEEP_RECENT)
    # Never start the kept tail on a tool result whose call would be cut away.
    while tail_start < len(conversation) and conversation[tail_start]["role"] == "tool":
        tail_start -= 1
    middle = conversation[len(head) : tail_start]
    if len(middle) < 2:
        return  # Nothing worth summarising: the kept messages alone are this long.
    step = state["step"]
    started = timezone.now()
    request = [
        {
            "role": "system",
            "content": "Summarise this part of an agent's conversation in at most 200 words. "
            "Keep facts, decisions, tool results and open questions.",
        },
        {"role": "user", "content": json.dumps(middle, default=str)[:200_000]},
    ]
    try:
        result = provider.chat(
            model=spec.model,
            messages=request,
            tools=[],
            parameters=parameters,
            timeout_ms=settings.LLM_CALL_TIMEOUT_SECONDS * 1000,
        )
        summary = result.content.strip() or "(empty summary)"
    except ProviderError as exc:
        result, summary = None, f"(the earlier part of the conversation was removed; summarising failed: {exc})"
    before = estimate_tokens(conversation)
    compacted = [
        *head,
        {"role": "user", "content": f"Summary of the earlier conversation: {summary}"},
        *conversation[tail_start:],
    ]
    steps = [
        StepEvent(
            trace_id=run.trace_id,
            span_id=f"compaction-{step}",
            parent_span_id=ROOT_SPAN,
            kind="custom",
            name="context compaction",
            started_at=started,
            ended_at=timezone.now(),
            status="ok",
            output={"summary": summary},
            attributes={
                "messages_before": len(conversation),
                "messages_after": len(compacted),
                "estimated_tokens_before": before,
                "estimated_tokens_after": estimate_tokens(compacted),
                "context_window": context_window(spec.model),
            },
        )
    ]
    if result is not None:
        steps.append(
            llm_step(
                run,
                f"compaction-{step}-llm",
                f"summarise {spec.model}",
                f"compaction-{step}",
                provider,
                spec,
                started,
                input={"messages": request},
                result=result,
                output={"content": result.content},
            )
        )
    state["conversation"] = compacted
    state["compactions"] = state.get("compactions", 0) + 1
    with transaction.atomic():  # the summarising call and the state that holds its summary
        write(run, steps=steps)
        save_state(run, state)
        event_append(
            run=run,
            type="compacted",
            data={
                "run": run.pk,
                "messages_before": len(conversation),
                "messages_after": len(compacted),
                "summary": summary,
            },
        )
