"""The LLM judge evaluator kind: a model (Mistral by default, through the
organization's provider key) grades the final output and the whole trajectory against
the evaluator's rubric and answers ``{"score": 0..1, "reasoning": "..."}``.

The prompt is cut to fit: the input, expected and final output each to
``JUDGE_FIELD_CHARS``, the trajectory to ``max_trajectory_chars`` with a fair share per
field (``render_trajectory``). The judge's tokens are priced like any call and shown in
the outcome's details; an answer that is not a score from 0 to 1 gives no score, with
the answer kept for the reader.
"""

from __future__ import annotations

import re
from collections import Counter

from evals.scoring.config import ConfigReader
from evals.scoring.registry import EvaluatorKind, register
from evals.scoring.subject import Outcome, Subject
from evals.scoring.values import as_text, loads, number_in, short

JUDGE_DEFAULT_MODEL = "mistral-small-latest"
JUDGE_TIMEOUT_MS = 120_000
JUDGE_FIELD_CHARS = 20_000  # input, expected and final output, each, in the judge's prompt


JUDGE_SYSTEM_PROMPT = (
    "You grade the work of an AI agent against a rubric. You are given the task's input, the expected "
    "output when there is one, the agent's final output and, when available, its trajectory: every model "
    "call and tool call it made, with arguments and results. Judge by the rubric only; use the trajectory "
    "to check how the answer was reached (tools used, facts looked up, errors ignored).\n"
    'Answer with one JSON object and nothing else: {"score": <a number from 0 to 1>, "reasoning": "<a short '
    'paragraph saying why>"}.'
)


def _cut(text: str, limit: int) -> str:
    if len(text) <= limit:
        return text
    keep = max(limit - 40, 0)
    return f"{text[:keep]}… [{len(text) - keep} characters cut]"


def _fair_share(lengths: list[int], budget: int) -> int:
    """The largest cap such that every field cut to it fits in ``budget`` in total:
    short fields stay whole, long ones share what is left equally."""
    if sum(lengths) <= budget:
        return max(lengths, default=0)
    low, high = 0, max(lengths)
    while low < high:
        middle = (low + high + 1) // 2
        if sum(min(length, middle) for length in lengths) <= budget:
            low = middle
        else:
            high = middle - 1
    return low


def render_trajectory(subject: Subject, budget: int) -> tuple[str, bool]:
    """Every step (and every tool call not already shown as a tool step) as text for the
    judge, cut to ``budget`` characters: each step's fields get a fair share. Returns the
    text and whether anything was cut."""
    entries: list[tuple[str, list[tuple[str, str]]]] = []
    for number, step in enumerate(subject.steps, start=1):
        facts = [step.kind, repr(step.name) if step.name else ""]
        if step.model:
            facts.append(f"model={step.model}")
        if step.status:
            facts.append(f"status={step.status}")
        if step.latency_ms is not None:
            facts.append(f"{step.latency_ms} ms")
        fields = [("input", as_text(step.input)), ("output", as_text(step.output)), ("error", step.error)]
        entries.append((f"{number}. " + " ".join(fact for fact in facts if fact), [f for f in fields if f[1]]))
    shown = Counter(step.name for step in subject.steps if step.kind == "tool")
    extra = []
    for call in subject.tool_calls:
        if shown[call.name] > 0:
            shown[call.name] -= 1
        else:
            extra.append(call)
    for number, call in enumerate(extra, start=1):
        fields = [("arguments", as_text(call.arguments)), ("result", as_text(call.result)), ("error", call.error)]
        entries.append((f"tool call {number}: {call.name}", [f for f in fields if f[1]]))
    if not entries:
        return "(no steps recorded)", False
    overhead = sum(len(header) + 1 + sum(len(label) + 6 for label, _ in fields) for header, fields in entries)
    lengths = [len(text) for _, fields in entries for _, text in fields]
    cap = _fair_share(lengths, max(budget - overhead, len(lengths) * 50))
    cut = any(length > cap for length in lengths)
    lines = []
    for header, fields in entries:
        lines.append(header)
        lines.extend(f"   {label}: {_cut(text, cap)}" for label, text in fields)
    text = "\n".join(lines)
    if len(text) > budget:  # so many steps that their headers alone overflow
        half = budget // 2
        text = f"{text[:half]}\n… [{len(text) - 2 * half} characters of the trajectory cut] …\n{text[-half:]}"
        cut = True
    return text, cut


def judge_messages(config: dict, subject: Subject) -> tuple[list[dict], bool]:
    """The judge's conversation, and whether the trajectory was shortened to fit."""
    sections = [
        ("Rubric", config["rubric"]),
        ("Input", _cut(as_text(subject.input), JUDGE_FIELD_CHARS) or "(empty)"),
        (
            "Expected output",
            _cut(as_text(subject.expected), JUDGE_FIELD_CHARS) if subject.expected is not None else "(none given)",
        ),
        ("Final output of the agent", _cut(as_text(subject.output), JUDGE_FIELD_CHARS) or "(empty)"),
    ]
    truncated = False
    if config.get("include_trajectory", True):
        trajectory, truncated = render_trajectory(subject, config.get("max_trajectory_chars", 20_000))
        note = " (long values were shortened)" if truncated else ""
        sections.append(
            (f"Trajectory: {len(subject.steps)} steps, {len(subject.tool_calls)} tool calls{note}", trajectory)
        )
    if subject.run_status:
        sections.append(("Run status", subject.run_status))
    body = "\n\n".join(f"## {title}\n{text}" for title, text in sections)
    body += '\n\nGrade the final output by the rubric. Answer only with {"score": 0..1, "reasoning": "..."}.'
    return [{"role": "system", "content": JUDGE_SYSTEM_PROMPT}, {"role": "user", "content": body}], truncated


_FENCE = re.compile(r"^```[a-zA-Z]*\s*|\s*```$")


def parse_judge_answer(text: str) -> tuple[float, str]:
    """(score, reasoning) from the judge's answer, or ValueError saying what was wrong."""
    candidate = _FENCE.sub("", (text or "").strip())
    ok, answer = loads(candidate)
    if not ok:
        start, end = candidate.find("{"), candidate.rfind("}")
        ok, answer = loads(candidate[start : end + 1]) if 0 <= start < end else (False, None)
    if not ok or not isinstance(answer, dict):
        raise ValueError(f"the judge did not answer with a JSON object: {short(text, 200)}")
    if "score" not in answer:
        raise ValueError(f'the judge\'s answer has no "score": {short(text, 200)}')
    score = number_in(answer["score"])
    if score is None or not 0 <= score <= 1:
        raise ValueError(f"the judge's score {short(answer['score'], 40)} is not a number from 0 to 1")
    reasoning = answer.get("reasoning", "")
    return score, reasoning if isinstance(reasoning, str) else as_text(reasoning)


@register
class LlmJudge(EvaluatorKind):
    name = "llm_judge"
    settings = ("model", "rubric", "include_trajectory", "max_trajectory_chars")
    help = "A model grades the output and the whole trajectory against your rubric, from 0 to 1."
    example = {
        "model": JUDGE_DEFAULT_MODEL,
        "rubric": "Score 1 if the answer is correct, complete and polite; 0 if it is wrong or made up.",
        "include_trajectory": True,
        "max_trajectory_chars": 20000,
    }
    try_note = "the judge model is really called (and billed)"

    def clean(self, c: ConfigReader) -> None:
        model = c.text("model", default=JUDGE_DEFAULT_MODEL, max_length=200)
        c.cleaned["model"] = (model or "").strip() or JUDGE_DEFAULT_MODEL
        c.text("rubric", required=True, max_length=20_000)
        c.boolean("include_trajectory", True)
        c.number("max_trajectory_chars", default=20_000, low=1_000, high=200_000, whole=True)

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        from agentops.llm.base import ProviderError
        from agentops.llm.providers import provider_for
        from billing.services import price_for, tokens_cost

        model = config.get("model") or JUDGE_DEFAULT_MODEL
        messages, truncated = judge_messages(config, subject)
        provider = provider_for(organization=organization, model=model)
        try:
            result = provider.chat(
                model=model,
                messages=messages,
                tools=[],
                # Passed through to the provider's API: Mistral then answers with JSON only.
                parameters={"temperature": 0, "response_format": {"type": "json_object"}},
                timeout_ms=JUDGE_TIMEOUT_MS,
            )
        except ProviderError as exc:
            return Outcome(value=None, error=f"the judge could not be asked: {exc}", details={"judge_model": model})
        price = price_for(model=result.model or model, organization_id=organization.pk)
        cost = (
            tokens_cost(
                price=price,
                input_tokens=result.input_tokens,
                cached_input_tokens=result.cached_input_tokens,
                output_tokens=result.output_tokens,
                cache_write_input_tokens=result.cache_write_input_tokens,
                reasoning_output_tokens=result.reasoning_output_tokens,
            )
            if price is not None
            else None
        )
        call = {
            "model": result.model or model,
            "input_tokens": result.input_tokens,
            "cached_input_tokens": result.cached_input_tokens,
            "output_tokens": result.output_tokens,
            "cost": cost,
            "price_id": price.id if price is not None else None,
        }
        details = {
            "judge_model": result.model or model,
            "input_tokens": result.input_tokens,
            "output_tokens": result.output_tokens,
            "cost": str(cost) if cost is not None else None,
            "trajectory_truncated": truncated,
        }
        try:
            score, reasoning = parse_judge_answer(result.content)
        except ValueError as exc:
            return Outcome(
                value=None, error=str(exc), details={**details, "answer": result.content[:2000]}, model_call=call
            )
        return Outcome(value=score, reasoning=reasoning, details=details, model_call=call)
