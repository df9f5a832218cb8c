"""Replays: run a recorded run again with changes (model, parameters, system prompt, agent
version, tool set), its tool calls served from the recording or made live, from the
start or forked at a step, once or K times.

A replay is an executed run of its own (``Run.replay_of`` is its source, its settings are
in ``execution["replay"]``): the same executor runs it, on its own page, costed like any
run. What a replay needs of its source:

- a run the platform executed: its spec (model, system prompt, tools, step limit) and
  parameters are in its state, its conversation in its llm steps;
- an ingested run: its first llm step's model and input messages, and the definitions
  of the tools it used (``gen_ai.tool.definitions``, OpenInference ``llm.tools``, or a
  ``tools`` list in the step's input). What is missing is named in the error.
"""

from __future__ import annotations

import json
import statistics
import uuid
from collections import Counter
from typing import Any

from django.db.models import Q

from agentops.errors import Conflict, InvalidRequest
from billing.budgets import check_work_allowed
from runs.events import MemoryEvent, MessageEvent, StepEvent, ToolCallEvent
from runs.execution import ROOT_SPAN, Spec, create_executed_run, version_spec
from runs.models import AgentVersion, MemorySnapshot, Message, Run, Step, ToolCall
from runs.services.agents import clean_parameters
from runs.services.recorded_tools import recorded_calls
from runs.tools.registry import available_tools

TOOL_MODES = ("recorded", "live")
UNMATCHED_POLICIES = ("fail", "live")
OVERRIDES = ("model", "system_prompt", "version", "tools", "temperature", "top_p", "max_tokens", "random_seed")
PARAMETERS = ("temperature", "top_p", "max_tokens", "random_seed")
MAX_REPEAT = 20


def replay_start(
    *,
    source: Run,
    actor,
    overrides: dict | None = None,
    tool_mode: str = "recorded",
    unmatched: str = "fail",
    fork_step: int | None = None,
    repeat: int = 1,
    api_key=None,
    ip: str | None = None,
) -> list[Run]:
    """Queue ``repeat`` replays of ``source`` (see the module docstring); returns them.
    Refused with 402 when a hard budget covering the project (or key) is spent."""
    overrides = dict(overrides or {})
    unknown = sorted(set(overrides) - set(OVERRIDES))
    if unknown:
        raise InvalidRequest(f"unknown override {unknown[0]!r}; use {', '.join(OVERRIDES)}")
    if tool_mode not in TOOL_MODES:
        raise InvalidRequest(f"tool_mode must be one of {', '.join(TOOL_MODES)}")
    if unmatched not in UNMATCHED_POLICIES:
        raise InvalidRequest(f"unmatched must be one of {', '.join(UNMATCHED_POLICIES)}")
    if isinstance(repeat, bool) or not isinstance(repeat, int) or not 1 <= repeat <= MAX_REPEAT:
        raise InvalidRequest(f"repeat must be a whole number from 1 to {MAX_REPEAT}")
    if fork_step is not None and (isinstance(fork_step, bool) or not isinstance(fork_step, int) or fork_step < 1):
        raise InvalidRequest("fork_step must be a whole number from 1 (the first model call)")
    if not source.ended:
        raise Conflict(f"the run is still {source.status}: replay it once it has ended")
    check_work_allowed(project=source.project, api_key=api_key, work="replay")

    spec, parameters, version, start_conversation = _source_settings(source)
    parameters = {**parameters, **clean_parameters({k: overrides[k] for k in PARAMETERS if k in overrides})}
    if "version" in overrides:
        version = _other_version(source, overrides["version"])
        spec = Spec(**version_spec(version))
        parameters = {**version.parameters, **clean_parameters({k: overrides[k] for k in PARAMETERS if k in overrides})}
    if "model" in overrides:
        model = overrides["model"]
        if not isinstance(model, str) or not model.strip() or len(model) > 200:
            raise InvalidRequest("model must be a model name, for example mistral-large-latest")
        spec.model = model.strip()
    if "system_prompt" in overrides:
        if not isinstance(overrides["system_prompt"], str):
            raise InvalidRequest("system_prompt must be text")
        spec.system_prompt = overrides["system_prompt"]
        if start_conversation is not None:
            start_conversation = _with_system_prompt(start_conversation, spec.system_prompt)
    if "tools" in overrides:
        spec.tools, spec.tool_definitions = _tool_set(source, spec, overrides["tools"], tool_mode)

    state: dict[str, Any] = {}
    prefix = None
    if fork_step is not None and fork_step > 1:
        state, prefix = _fork(source, fork_step, tool_mode)
        if "system_prompt" in overrides:
            state["conversation"] = _with_system_prompt(state["conversation"], spec.system_prompt)
    elif start_conversation is not None:
        state["start_conversation"] = start_conversation

    group = uuid.uuid4().hex[:12]
    replay = {
        "source": source.pk,
        "tool_mode": tool_mode,
        "unmatched": unmatched,
        "fork_step": fork_step,
        "overrides": overrides,
        "group": group,
        "repeat": repeat,
    }
    runs = []
    for index in range(repeat):
        runs.append(
            create_executed_run(
                project=source.project,
                actor=actor,
                name=f"{source.name or source.trace_id} (replay)"[:500],
                agent_name=source.agent_name,
                input=source.input,
                spec=spec.__dict__ | {"tools": list(spec.tools), "tool_definitions": list(spec.tool_definitions)},
                parameters=parameters,
                version=version,
                state=json.loads(json.dumps({**state, "replay": {**replay, "index": index + 1}}, default=str)),
                replay_of=source,
                api_key=api_key,
                prefix=_copied(prefix) if prefix else None,
                audit=("run.replay", {"source": source.pk, "tool_mode": tool_mode, "fork_step": fork_step}),
                ip=ip,
            )
        )
    return runs


def _source_settings(source: Run) -> tuple[Spec, dict, AgentVersion | None, list[dict] | None]:
    """(spec, parameters, agent version, the conversation to start from) of the source:
    the conversation is None for executed runs (the executor builds it from the input)."""
    state = source.execution or {}
    if source.executed:
        version = source.executed_version
        if "spec" in state:
            return Spec(**state["spec"]), dict(state.get("parameters", {})), version, None
        if version is None:
            raise InvalidRequest("this run cannot be replayed: the agent version it used was deleted")
        return Spec(**version_spec(version)), {**version.parameters, **state.get("parameters", {})}, version, None
    return _ingested_settings(source)


def _ingested_settings(source: Run) -> tuple[Spec, dict, None, list[dict]]:
    llm_steps = list(Step.objects.filter(run=source, kind=Step.Kind.LLM).order_by("started_at", "id")[:1])
    if not llm_steps:
        raise InvalidRequest("this run cannot be replayed: it has no model call (llm step) to start from")
    first = llm_steps[0]
    missing = []
    if not first.model:
        missing.append("the model (gen_ai.request.model)")
    conversation = chat_messages(first.input)
    if not conversation or not any(message["role"] == "user" for message in conversation):
        missing.append("the messages sent to the model (gen_ai.input.messages)")
    definitions = tool_definitions(source)
    used = sorted(set(ToolCall.objects.filter(run=source).values_list("tool_name", flat=True)))
    undefined = [name for name in used if name not in {d["function"]["name"] for d in definitions}]
    if undefined:
        missing.append(f"the definitions of the tools it used ({', '.join(undefined)}; gen_ai.tool.definitions)")
    if missing:
        raise InvalidRequest("this run cannot be replayed: it does not carry " + "; ".join(missing))
    attributes = first.attributes or {}
    parameters = clean_parameters(
        {
            name: attributes[key]
            for name, key in (
                ("temperature", "gen_ai.request.temperature"),
                ("top_p", "gen_ai.request.top_p"),
                ("max_tokens", "gen_ai.request.max_tokens"),
                ("random_seed", "gen_ai.request.seed"),
            )
            if isinstance(attributes.get(key), int | float) and not isinstance(attributes.get(key), bool)
        }
    )
    system = next((m["content"] for m in conversation if m["role"] == "system"), "")
    llm_calls = Step.objects.filter(run=source, kind=Step.Kind.LLM).count()
    spec = Spec(
        model=first.model,
        system_prompt=system if isinstance(system, str) else "",
        tools=[],
        tool_definitions=definitions,
        step_limit=max(20, 2 * llm_calls),
    )
    return spec, parameters, None, conversation


def _other_version(source: Run, number: Any) -> AgentVersion:
    if source.executed_version is None:
        raise InvalidRequest("version can only change for a run of one of the project's agents")
    if isinstance(number, bool) or not isinstance(number, int):
        raise InvalidRequest("version must be a version number of the run's agent")
    version = AgentVersion.objects.filter(agent_id=source.executed_version.agent_id, number=number).first()
    if version is None:
        raise InvalidRequest(f"the agent has no version {number}")
    return version


def _tool_set(source: Run, spec: Spec, names: Any, tool_mode: str) -> tuple[list[str], list[dict]]:
    """The tools a replay offers the model: the platform's tools by name, and tools the
    source recorded definitions of (callable only from the recording, or by a live
    replay when the platform has a tool of that name)."""
    if not isinstance(names, list) or not all(isinstance(name, str) for name in names):
        raise InvalidRequest("tools must be a list of tool names")
    known = available_tools(project=source.project)
    recorded = {d["function"]["name"]: d for d in spec.tool_definitions}
    unknown = [name for name in names if name not in known and name not in recorded]
    if unknown:
        raise InvalidRequest(f"unknown tool {unknown[0]!r}; available: {', '.join(sorted({*known, *recorded}))}")
    if tool_mode == "live":
        not_live = [name for name in names if name not in known]
        if not_live:
            raise InvalidRequest(
                f"tool {not_live[0]!r} exists only in the recording: replay with tool_mode recorded, or drop it"
            )
    chosen = list(dict.fromkeys(names))
    return [name for name in chosen if name in known], [recorded[name] for name in chosen if name not in known]


def _with_system_prompt(conversation: list[dict], prompt: str) -> list[dict]:
    rest = [message for message in conversation if message["role"] != "system"]
    return ([{"role": "system", "content": prompt}] if prompt else []) + rest


def _fork(source: Run, fork_step: int, tool_mode: str) -> tuple[dict, dict]:
    """The executor state and the copied steps of a replay that keeps ``source`` as it
    was before its model call ``fork_step`` and runs live from that call."""
    if not source.executed:
        raise InvalidRequest("forking at a step needs a run the platform executed")
    llm = Step.objects.filter(run=source, span_id=f"llm-{fork_step}").first()
    if llm is None:
        count = Step.objects.filter(run=source, kind=Step.Kind.LLM, span_id__regex=r"^llm-\d+$").count()
        raise InvalidRequest(f"fork_step must be from 1 to {count}: the run made {count} model calls")
    conversation = (llm.input or {}).get("messages") if isinstance(llm.input, dict) else None
    if not isinstance(conversation, list):
        raise InvalidRequest(f"this run cannot be forked at step {fork_step}: its model call kept no messages")
    earlier = Q(span_id__regex=r"^(llm|tool|compaction)-(\d+)") & ~Q(span_id=ROOT_SPAN)
    steps = [
        step
        for step in Step.objects.filter(run=source).filter(earlier).order_by("started_at", "id")
        if _step_number(step.span_id) < fork_step
    ]
    spans = {step.span_id for step in steps}
    answer = Message.objects.filter(run=source, span_id=f"llm-{fork_step}").order_by("position").first()
    position = answer.position if answer else len(conversation)
    messages = list(Message.objects.filter(run=source, position__lt=position).order_by("position"))
    calls = [call for call in recorded_calls(source.pk) if call.span_id in spans]
    snapshots = list(MemorySnapshot.objects.filter(run=source, sequence__lt=fork_step * 1000).order_by("sequence"))
    state = {
        "conversation": conversation,
        "memory": snapshots[-1].state if snapshots else {},
        "step": fork_step - 1,
        "position": position,
        "pending": [],
        "recent_actions": [],
        "warned": "",
        "recorded_used": [call.call_id for call in calls] if tool_mode == "recorded" else [],
    }
    prefix = {"steps": steps, "messages": messages, "tool_calls": calls, "snapshots": snapshots}
    return state, prefix


def _step_number(span_id: str) -> int:
    return int(span_id.split("-")[1])


def _copied(prefix: dict) -> dict:
    """The fork's beginning as ingest events (their trace id is set when the run exists).
    Model calls are copied without their token counts: the replay did not pay for them
    (the original's usage stays in the step's attributes)."""
    steps = []
    for step in prefix["steps"]:
        attributes = {**(step.attributes or {}), "copied_from_step": step.pk}
        if step.kind == Step.Kind.LLM:
            attributes["original_usage"] = {
                "input_tokens": step.input_tokens,
                "cached_input_tokens": step.cached_input_tokens,
                "output_tokens": step.output_tokens,
                "cost": str(step.cost) if step.cost is not None else None,
            }
        steps.append(
            StepEvent(
                trace_id="",
                span_id=step.span_id,
                parent_span_id=step.parent_span_id or ROOT_SPAN,
                kind=step.kind,
                name=step.name,
                started_at=step.started_at,
                ended_at=step.ended_at,
                status=step.status,
                error=step.error,
                model=step.model,
                provider=step.provider,
                input=step.input,
                output=step.output,
                attributes=attributes,
                events=step.events or [],
            )
        )
    return {
        "steps": steps,
        "messages": [
            MessageEvent(
                trace_id="",
                message_id=m.message_id,
                position=m.position,
                role=m.role,
                content=m.content,
                span_id=m.span_id,
                tool_calls=m.tool_calls or [],
                tool_call_id=m.tool_call_id,
                name=m.name,
                tokens=m.tokens,
                finish_reason=m.finish_reason,
            )
            for m in prefix["messages"]
        ],
        "tool_calls": [
            ToolCallEvent(
                trace_id="",
                call_id=c.call_id,
                tool_name=c.tool_name,
                span_id=c.span_id,
                arguments=c.arguments,
                result=c.result,
                error=c.error,
                latency_ms=c.latency_ms,
                started_at=c.started_at,
            )
            for c in prefix["tool_calls"]
        ],
        "snapshots": [
            MemoryEvent(
                trace_id="",
                snapshot_id=s.snapshot_id,
                sequence=s.sequence,
                state=s.state,
                span_id=s.span_id,
                taken_at=s.taken_at,
            )
            for s in prefix["snapshots"]
        ],
    }


def chat_messages(value: Any) -> list[dict] | None:
    """An llm step's input as chat-completions messages: a list of ``{role, content}``
    (with tool calls), OpenTelemetry GenAI's ``{role, parts}``, or ``{"messages": ...}``.
    None when it is none of these."""
    if isinstance(value, dict):
        value = value.get("messages")
    if not isinstance(value, list):
        return None
    messages = []
    for item in value:
        if not isinstance(item, dict) or not isinstance(item.get("role"), str):
            return None
        role = {"model": "assistant", "developer": "system"}.get(item["role"], item["role"])
        if "parts" in item and isinstance(item["parts"], list):
            messages.extend(_from_parts(role, item["parts"]))
            continue
        message: dict[str, Any] = {"role": role, "content": _text(item.get("content"))}
        if item.get("tool_calls"):
            message["tool_calls"] = item["tool_calls"]
        if item.get("tool_call_id"):
            message["tool_call_id"] = item["tool_call_id"]
        if item.get("name"):
            message["name"] = item["name"]
        messages.append(message)
    return messages


def _from_parts(role: str, parts: list) -> list[dict]:
    texts, calls, responses = [], [], []
    for part in parts:
        if not isinstance(part, dict):
            continue
        kind = part.get("type")
        if kind == "text":
            texts.append(_text(part.get("content")))
        elif kind == "tool_call":
            arguments = part.get("arguments")
            calls.append(
                {
                    "id": str(part.get("id") or f"call_{len(calls)}"),
                    "type": "function",
                    "function": {
                        "name": str(part.get("name") or ""),
                        "arguments": arguments if isinstance(arguments, str) else json.dumps(arguments or {}),
                    },
                }
            )
        elif kind == "tool_call_response":
            responses.append(
                {"role": "tool", "tool_call_id": str(part.get("id") or ""), "content": _text(part.get("response"))}
            )
    if responses:
        return responses
    message: dict[str, Any] = {"role": role, "content": "".join(texts)}
    if calls:
        message["tool_calls"] = calls
    return [message]


def _text(value: Any) -> str:
    if value is None:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(part, dict) for part in value):
        return "".join(_text(part.get("text", part.get("content"))) for part in value)
    return json.dumps(value, default=str)


def tool_definitions(source: Run) -> list[dict]:
    """The tool definitions an ingested run recorded on its llm steps, as chat-completions
    tool definitions, one per name."""
    found: dict[str, dict] = {}
    for attributes, step_input in Step.objects.filter(run=source, kind=Step.Kind.LLM).values_list(
        "attributes", "input"
    ):
        candidates = []
        for key in ("gen_ai.tool.definitions", "llm.tools", "tools"):
            raw = (attributes or {}).get(key)
            if isinstance(raw, str):
                try:
                    raw = json.loads(raw)
                except ValueError:
                    raw = None
            if isinstance(raw, list):
                candidates.extend(raw)
        if isinstance(step_input, dict) and isinstance(step_input.get("tools"), list):
            candidates.extend(step_input["tools"])
        for candidate in candidates:
            definition = _definition(candidate)
            if definition:
                found.setdefault(definition["function"]["name"], definition)
    return list(found.values())


def _definition(candidate: Any) -> dict | None:
    if isinstance(candidate, dict) and isinstance(candidate.get("tool"), dict):  # OpenInference llm.tools
        candidate = candidate["tool"]
    if isinstance(candidate, dict) and isinstance(candidate.get("json_schema"), str):
        try:
            candidate = json.loads(candidate["json_schema"])
        except ValueError:
            return None
    if not isinstance(candidate, dict):
        return None
    function = candidate.get("function") if isinstance(candidate.get("function"), dict) else candidate
    name = function.get("name")
    if not isinstance(name, str) or not name:
        return None
    parameters = function.get("parameters")
    return {
        "type": "function",
        "function": {
            "name": name[:64],
            "description": str(function.get("description") or ""),
            "parameters": parameters if isinstance(parameters, dict) else {"type": "object", "properties": {}},
        },
    }


def replay_groups(source: Run) -> list[dict]:
    """The replays of ``source``, grouped by request (a repeat of K is one group), newest
    first, each with how far they got and, for repeats, how much they agree: the share
    of ended replays that succeeded with the most common final output (a failed or
    cancelled replay never agrees), and the spread of steps, tokens, cost and latency."""
    replays = list(
        Run.objects.filter(replay_of=source)
        .order_by("-id")
        .only(
            "id",
            "status",
            "output",
            "step_count",
            "input_tokens",
            "output_tokens",
            "total_cost",
            "latency_ms",
            "execution",
            "created_at",
            "models_used",
        )
    )
    groups: dict[str, list[Run]] = {}
    for run in replays:
        groups.setdefault((run.execution.get("replay") or {}).get("group", str(run.pk)), []).append(run)
    return [_group_summary(key, sorted(runs, key=lambda run: run.pk)) for key, runs in groups.items()]


def _group_summary(key: str, runs: list[Run]) -> dict:
    replay = runs[0].execution.get("replay") or {}
    ended = [run for run in runs if run.ended]
    # Only answers agree: a failed or cancelled replay (no output) never counts as agreeing.
    outputs = Counter(
        json.dumps(run.output, sort_keys=True, default=str) for run in ended if run.status == Run.Status.SUCCEEDED
    )
    most_common = outputs.most_common(1)[0][1] if outputs else 0
    return {
        "group": key,
        "tool_mode": replay.get("tool_mode"),
        "unmatched": replay.get("unmatched"),
        "fork_step": replay.get("fork_step"),
        "overrides": replay.get("overrides", {}),
        "created_at": runs[0].created_at,
        "runs": [
            {
                "id": run.pk,
                "status": run.status,
                "step_count": run.step_count,
                "tokens": run.input_tokens + run.output_tokens,
                "cost": run.total_cost,
                "latency_ms": run.latency_ms,
            }
            for run in runs
        ],
        "ended": len(ended),
        "succeeded": sum(run.status == Run.Status.SUCCEEDED for run in ended),
        "agreement": round(most_common / len(ended), 4) if ended else None,
        "distinct_outputs": len(outputs),
        "spread": {
            "step_count": _spread([run.step_count for run in ended]),
            "tokens": _spread([run.input_tokens + run.output_tokens for run in ended]),
            "cost": _spread([float(run.total_cost) for run in ended]),
            "latency_ms": _spread([run.latency_ms for run in ended if run.latency_ms is not None]),
        },
    }


def _spread(values: list[float]) -> dict | None:
    if not values:
        return None
    return {
        "min": min(values),
        "max": max(values),
        "mean": round(statistics.fmean(values), 6),
        "stdev": round(statistics.pstdev(values), 6),
    }


def replay_defaults(source: Run) -> tuple[dict, list[str]]:
    """What a replay of ``source`` runs unless told otherwise (model, system prompt,
    tools), and every tool a replay of it may offer. Raises InvalidRequest, saying why,
    when the run cannot be replayed."""
    spec, _parameters, _version, _conversation = _source_settings(source)
    recorded = [definition["function"]["name"] for definition in spec.tool_definitions]
    defaults = {"model": spec.model, "system_prompt": spec.system_prompt, "tools": [*spec.tools, *recorded]}
    return defaults, sorted({*available_tools(project=source.project), *recorded})
