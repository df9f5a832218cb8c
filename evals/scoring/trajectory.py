"""The trajectory evaluator kind: how the agent got to its answer, read from its tool
calls and steps. Its checks are a tool called (with arguments matching values or
patterns), a step budget (``max_steps``, counted by ``counted_steps``), tools that must
not be called, and an order of calls; the score is the share of configured checks that
pass, and the reasoning names the ones that failed.
"""

from __future__ import annotations

from typing import Any

import regex

from agentops.errors import InvalidRequest
from evals.scoring.config import ConfigReader, check_pattern
from evals.scoring.registry import EvaluatorKind, register
from evals.scoring.subject import Outcome, Subject, ToolCallView
from evals.scoring.values import MISSING, REGEX_TIMEOUT_SECONDS, as_text, json_equal, loaded, parse_path, resolve_path


def _argument_matches(actual: Any, expected: Any) -> bool:
    """A configured string is a pattern the argument's whole text must match; any other
    value must equal the argument (as JSON)."""
    if actual is MISSING:
        return False
    if isinstance(expected, str):
        try:
            return regex.fullmatch(expected, as_text(actual), regex.V0, timeout=REGEX_TIMEOUT_SECONDS) is not None
        except TimeoutError:
            return False
    return json_equal(actual, expected)


def _call_matches(call: ToolCallView, arguments: dict) -> list[str]:
    """The arguments of ``call`` that do not match (empty: the call matches)."""
    given = loaded(call.arguments)
    return [
        key
        for key, expected in arguments.items()
        if not _argument_matches(resolve_path(given, parse_path(key)), expected)
    ]


def counted_steps(subject: Subject) -> int:
    """The steps ``max_steps`` counts: model calls and tool calls. Wrapper spans (agent,
    chain...) depend on how an agent is instrumented, so they do not count; a reported
    trajectory with no steps counts its tool calls."""
    if not subject.steps:
        return len(subject.tool_calls)
    return sum(1 for step in subject.steps if step.kind in ("llm", "tool"))


def _is_subsequence(wanted: list[str], names: list[str]) -> bool:
    remaining = iter(names)
    return all(any(name == want for name in remaining) for want in wanted)


@register
class Trajectory(EvaluatorKind):
    name = "trajectory"
    settings = ("tool", "arguments", "max_steps", "forbidden_tools", "order")
    help = "How the agent got there: a tool called (with arguments), a step budget, forbidden tools, an order."
    example = {
        "tool": "lookup_order",
        "arguments": {"order_id": r"ORD-\d+"},
        "max_steps": 8,
        "forbidden_tools": ["delete_order"],
        "order": ["lookup_order", "issue_refund"],
    }

    def clean(self, c: ConfigReader) -> None:
        tool = c.text("tool", max_length=200)
        if tool is not None:
            if not tool.strip():
                raise InvalidRequest("tool must name a tool")
            c.cleaned["tool"] = tool.strip()
        arguments = c.raw.get("arguments")
        if arguments is not None:
            if not tool:
                raise InvalidRequest("arguments apply to the calls of tool: name the tool too")
            if not isinstance(arguments, dict) or not arguments:
                raise InvalidRequest("arguments must be an object: {argument: value, or a pattern its text must match}")
            for key, expected in arguments.items():
                try:
                    parse_path(key)
                except ValueError as exc:
                    raise InvalidRequest(f"arguments: {exc}") from None
                if isinstance(expected, str):
                    check_pattern(expected)
            c.cleaned["arguments"] = arguments
        c.number("max_steps", low=1, whole=True)
        c.names("forbidden_tools")
        c.names("order")
        if not c.cleaned:
            raise InvalidRequest(
                "trajectory evaluators need at least one check: tool, max_steps, forbidden_tools, order"
            )

    def score(self, spec, config, subject: Subject, organization) -> Outcome:
        names = [call.name for call in subject.tool_calls]
        checks: list[dict] = []
        if "tool" in config:
            tool = config["tool"]
            calls = [call for call in subject.tool_calls if call.name == tool]
            arguments = config.get("arguments") or {}
            if not calls:
                checks.append({"check": "tool", "passed": False, "detail": f"{tool} was never called"})
            elif not arguments:
                checks.append({"check": "tool", "passed": True, "detail": f"{tool} was called {len(calls)} time(s)"})
            else:
                mismatches = [_call_matches(call, arguments) for call in calls]
                if any(not mismatch for mismatch in mismatches):
                    checks.append(
                        {"check": "tool", "passed": True, "detail": f"{tool} was called with matching arguments"}
                    )
                else:
                    keys = sorted({key for mismatch in mismatches for key in mismatch})
                    checks.append(
                        {
                            "check": "tool",
                            "passed": False,
                            "detail": f"{tool} was called {len(calls)} time(s), never with matching {', '.join(keys)}",
                        }
                    )
        if "max_steps" in config:
            count = counted_steps(subject)
            ok = count <= config["max_steps"]
            checks.append(
                {
                    "check": "max_steps",
                    "passed": ok,
                    "detail": f"{count} steps ({'within' if ok else 'over'} {config['max_steps']})",
                }
            )
        if "forbidden_tools" in config:
            used = sorted({name for name in names if name in config["forbidden_tools"]})
            checks.append(
                {
                    "check": "forbidden_tools",
                    "passed": not used,
                    "detail": f"called {', '.join(used)}" if used else "no forbidden tool was called",
                }
            )
        if "order" in config:
            ok = _is_subsequence(config["order"], names)
            checks.append(
                {
                    "check": "order",
                    "passed": ok,
                    "detail": ("called in order: " if ok else "not called in order ")
                    + " → ".join(config["order"])
                    + ("" if ok else f"; calls were: {' → '.join(names) or 'none'}"),
                }
            )
        if not checks:
            return Outcome(value=None, error="the trajectory evaluator has no checks configured")
        failed = [check for check in checks if not check["passed"]]
        value = (len(checks) - len(failed)) / len(checks)
        if failed:
            reasoning = "failed: " + "; ".join(f"{check['check']}: {check['detail']}" for check in failed)
        else:
            reasoning = f"all {len(checks)} checks passed"
        return Outcome(
            value=value, reasoning=reasoning, details={"checks": checks, "failed": [c["check"] for c in failed]}
        )
