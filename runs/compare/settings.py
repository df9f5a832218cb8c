"""The settings section of a comparison, first in it: what each run ran with (model,
parameters, system prompt, tools, tool mode: what a replay changes) and which of those
differ.

An executed run (an agent's run, a replay) keeps its settings in its executor state,
read for both runs in one query that leaves the conversation out
(``execution_settings``); an ingested run is read as a replay of it reads it, two
queries each: its first model call, its tool definitions (``run_settings``).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from django.db.models.fields.json import KeyTransform

from runs.compare.text import word_diff
from runs.compare.values import equal
from runs.execution import version_spec
from runs.models import Run, Step
from runs.services.replay import chat_messages, tool_definitions

# What a replay can change, in the order a reader asks about it: the question a replay
# answers is "what happens if this changes?", so these come first.
SETTINGS = (
    "model",
    "temperature",
    "top_p",
    "max_tokens",
    "random_seed",
    "system_prompt",
    "tools",
    "tool_mode",
    "agent_version",
    "fork_step",
)
SETTING_PARAMETERS = ("temperature", "top_p", "max_tokens", "random_seed")
# An ingested run's request parameters, as OpenTelemetry GenAI names them.
OTEL_PARAMETERS = {
    "temperature": "gen_ai.request.temperature",
    "top_p": "gen_ai.request.top_p",
    "max_tokens": "gen_ai.request.max_tokens",
    "random_seed": "gen_ai.request.seed",
}
SYSTEM_PROMPT_CHARS = 20_000


def execution_settings(runs: Sequence[Run]) -> dict[int, dict]:
    """The part of each run's executor state that says what it ran with (spec,
    parameters, replay), in one query: the whole state also holds the conversation,
    which can be large."""
    rows = (
        Run.objects.filter(pk__in=[run.pk for run in runs])
        .annotate(
            state_spec=KeyTransform("spec", "execution"),
            state_parameters=KeyTransform("parameters", "execution"),
            state_replay=KeyTransform("replay", "execution"),
        )
        .values_list("pk", "state_spec", "state_parameters", "state_replay")
    )
    return {pk: {"spec": spec, "parameters": parameters, "replay": replay} for pk, spec, parameters, replay in rows}


def run_settings(run: Run, state: dict | None) -> dict[str, Any]:
    """What ``run`` ran with, each of ``SETTINGS`` (null: not set, the model's default,
    or not recorded). An executed run (an agent's run, a replay) keeps them in its
    state; an ingested run is read as a replay of it reads it: its first model call's
    model, request parameters and system message, and the tools its model calls were
    offered. ``tool_mode`` is a replay's (``recorded`` or ``live``); any other run
    called its tools for real (``live``). ``state``: the run's ``execution_settings``."""
    state = state or {}
    replay = state.get("replay") if isinstance(state.get("replay"), dict) else {}
    settings: dict[str, Any] = dict.fromkeys(SETTINGS)
    settings["tool_mode"] = replay.get("tool_mode") or "live"
    settings["fork_step"] = replay.get("fork_step")
    settings["agent_version"] = run.agent_version or None
    if run.executed:
        spec = state.get("spec") if isinstance(state.get("spec"), dict) else {}
        parameters = state.get("parameters") if isinstance(state.get("parameters"), dict) else {}
        if not spec and run.executed_version_id:
            # A run queued before runs kept their spec: its agent version's.
            version = run.executed_version
            spec, parameters = version_spec(version), {**version.parameters, **parameters}
        recorded = [d["function"]["name"] for d in spec.get("tool_definitions") or [] if _named_definition(d)]
        settings |= {
            "model": spec.get("model") or None,
            "system_prompt": spec.get("system_prompt", None),
            "tools": [*spec.get("tools", []), *recorded] if spec else None,
            **{name: parameters.get(name) for name in SETTING_PARAMETERS},
        }
        return settings
    first = (
        Step.objects.filter(run=run, kind=Step.Kind.LLM)
        .only("id", "model", "attributes", "input")
        .order_by("started_at", "id")
        .first()
    )
    if first is None:
        settings["model"] = run.models_used[0] if run.models_used else None
        return settings
    attributes = first.attributes if isinstance(first.attributes, dict) else {}
    conversation = chat_messages(first.input) or []
    system = next((m["content"] for m in conversation if m["role"] == "system"), None)
    settings |= {
        "model": first.model or None,
        "system_prompt": system if isinstance(system, str) else None,
        "tools": [d["function"]["name"] for d in tool_definitions(run)],
        **{
            name: value
            for name, key in OTEL_PARAMETERS.items()
            if isinstance(value := attributes.get(key), int | float) and not isinstance(value, bool)
        },
    }
    return settings


def _named_definition(definition: Any) -> bool:
    return isinstance(definition, dict) and isinstance(definition.get("function"), dict)


def settings_diff(settings_a: dict[str, Any], settings_b: dict[str, Any]) -> dict:
    """Both runs' settings and the ones that differ, in ``SETTINGS`` order, each
    ``{"name", "a", "b"}``; tools also name those ``added`` and ``removed`` (order
    ignored), a system prompt its word diff (``inline``)."""
    changes = []
    for name in SETTINGS:
        a, b = settings_a[name], settings_b[name]
        if name == "tools":
            if sorted(a or []) == sorted(b or []) and (a is None) == (b is None):
                continue
            changes.append(
                {
                    "name": name,
                    "a": a,
                    "b": b,
                    "added": [tool for tool in b or [] if tool not in (a or [])],
                    "removed": [tool for tool in a or [] if tool not in (b or [])],
                }
            )
        elif name == "system_prompt":
            if (a or "") == (b or "") and (a is None) == (b is None):
                continue
            cut_a, cut_b = (a or "")[:SYSTEM_PROMPT_CHARS], (b or "")[:SYSTEM_PROMPT_CHARS]
            changes.append({"name": name, "a": a, "b": b, "inline": word_diff(cut_a, cut_b)})
        elif not equal(a, b):
            changes.append({"name": name, "a": a, "b": b})
    return {"a": settings_a, "b": settings_b, "equal": not changes, "changes": changes}
