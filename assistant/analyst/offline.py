"""The offline analyst: a scripted, deterministic stand-in for the analyst's model, for an
organization with no Mistral key, so the demo answers without a network. It is not a
language model and says so: every answer starts with ``LABEL``. It reads the subject
the analyst's system prompt names (a run, a dataset's leaderboard, or the project),
calls the read tools a person would call first, then writes the facts those tools
returned, with the numbers, citing a run's steps as ``[step:<id>]``."""

from __future__ import annotations

import json
import re
from decimal import Decimal, InvalidOperation

from agentops.llm.base import ChatResult, OnText

OFFLINE_ANALYST_MODEL = "offline-analyst"
LABEL = "Offline analyst (no model configured): "
SUBJECT_RUN = re.compile(r"^Subject: run (\d+)\b", re.MULTILINE)
SUBJECT_DATASET = re.compile(r"^Subject: the leaderboard of dataset (\d+)\b", re.MULTILINE)

# The tool the offline analyst reads for a project question, by the first keyword it has.
KEYWORD_TOOLS = [
    (("budget",), "get_budget_status", {}),
    (("spend", "spent", "cost", "money", "expensive"), "get_spend", {"by": "model"}),
    (("job", "gpu"), "list_jobs", {"limit": 10}),
    (("session", "conversation"), "list_sessions", {"limit": 10}),
    (("fail", "error", "broken"), "search_runs", {"status": ["failed"], "limit": 10}),
]


def _tokens(text: str) -> int:
    return max(1, len(text) // 4)


def _money(value) -> str:
    try:
        amount = Decimal(str(value))
    except (InvalidOperation, TypeError, ValueError):
        return "unpriced"
    return f"${amount.normalize():f}" if amount else "$0"


def _ms(value) -> str:
    return f"{int(value):,} ms" if isinstance(value, int | float) else "unknown time"


def _percent(value) -> str:
    return f"{value * 100:.1f}%" if isinstance(value, int | float) else "n/a"


def _number(value) -> str:
    return f"{value:.3g}" if isinstance(value, int | float) else "n/a"


class OfflineAnalyst:
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
    ) -> ChatResult:
        system = "\n".join(m.get("content") or "" for m in messages if m.get("role") == "system")
        last_user = max((i for i, m in enumerate(messages) if m.get("role") == "user"), default=-1)
        question = str(messages[last_user].get("content") or "") if last_user >= 0 else ""
        results = {}
        for message in messages[last_user + 1 :]:
            if message.get("role") == "tool":
                try:
                    results[message.get("name")] = json.loads(message.get("content") or "null")
                except ValueError:
                    results[message.get("name")] = {"error": message.get("content")}
        offered = {tool["function"]["name"] for tool in tools}
        prompt_tokens = sum(_tokens(json.dumps(m, default=str)) for m in messages)
        call = self._next_call(system, question, results, offered)
        if call is not None:
            name, arguments = call
            return ChatResult(
                content="",
                tool_calls=[{"id": f"analyst_{len(results)}", "name": name, "arguments": arguments}],
                finish_reason="tool_calls",
                model=OFFLINE_ANALYST_MODEL,
                input_tokens=prompt_tokens,
                output_tokens=16,
            )
        answer = LABEL + self._answer(system, question, results)
        if on_text is not None:  # streamed a few words at a time, as a model would
            words = re.findall(r"\S+\s*", answer)
            for start in range(0, len(words), 6):
                on_text("".join(words[start : start + 6]))
        return ChatResult(
            content=answer,
            tool_calls=[],
            finish_reason="stop",
            model=OFFLINE_ANALYST_MODEL,
            input_tokens=prompt_tokens,
            output_tokens=_tokens(answer),
        )

    # --- which tool next --------------------------------------------------------------

    def _next_call(self, system: str, question: str, results: dict, offered: set[str]):
        wanted = self._plan(system, question, results)
        if wanted is None or wanted[0] not in offered or wanted[0] in results:
            return None
        return wanted

    def _plan(self, system: str, question: str, results: dict):
        if match := SUBJECT_RUN.search(system):
            return "get_run", {"run_id": int(match.group(1))}
        if match := SUBJECT_DATASET.search(system):
            if "get_leaderboard" not in results:
                return "get_leaderboard", {"dataset": int(match.group(1)), "limit": 100}
            pair = _latest_pair(results["get_leaderboard"])
            return (
                ("compare_experiments", {"a": pair[0]["experiment_id"], "b": pair[1]["experiment_id"]})
                if pair
                else None
            )
        lowered = question.lower()
        for keywords, tool, arguments in KEYWORD_TOOLS:
            if any(keyword in lowered for keyword in keywords):
                return tool, arguments
        return "search_runs", {"limit": 10}

    # --- what to say ------------------------------------------------------------------

    def _answer(self, system: str, question: str, results: dict) -> str:
        errors = [f"{name}: {result['error']}" for name, result in results.items() if _is_error(result)]
        if errors:
            return "the tools refused: " + "; ".join(errors)
        if "get_run" in results:
            return _run_answer(results["get_run"])
        if "get_leaderboard" in results:
            return _leaderboard_answer(results["get_leaderboard"], results.get("compare_experiments"))
        for name, result in results.items():
            return _project_answer(name, result)
        return "no tool answered; ask about the project's runs, spend, budgets, jobs or sessions."


def _is_error(result) -> bool:
    return isinstance(result, dict) and set(result) == {"error"}


def _latest_pair(board: dict):
    """The two most recent experiments of a leaderboard (older first), or None."""
    rows = sorted(board.get("rows") or [], key=lambda row: (row.get("created_at") or "", row["experiment_id"]))
    return (rows[-2], rows[-1]) if len(rows) >= 2 else None


def _run_answer(data: dict) -> str:
    run, steps = data.get("run") or {}, data.get("steps") or []
    lines = [
        f"the facts of run {run.get('id')} ({run.get('name') or run.get('trace_id')}), read with get_run; "
        "the question itself is not interpreted without a model."
    ]
    status = f"Status: {run.get('status')}"
    if run.get("error"):
        status += f", error: {str(run['error'])[:300]}"
    lines.append(f"- {status}.")
    kinds = {}
    for step in steps:
        kinds[step.get("kind")] = kinds.get(step.get("kind"), 0) + 1
    made = ", ".join(f"{count} {kind}" for kind, count in sorted(kinds.items(), key=lambda item: str(item[0])))
    lines.append(
        f"- {data.get('steps_total', len(steps))} steps ({made or 'none'}); "
        f"{run.get('input_tokens', 0):,} tokens in, {run.get('output_tokens', 0):,} out; "
        f"cost {_money(run.get('total_cost'))}; {_ms(run.get('latency_ms'))}."
    )
    failed = [step for step in steps if step.get("status") == "error"]
    if failed:
        lines.append(
            "- Failed steps: "
            + "; ".join(
                f"[step:{step['id']}] {step.get('name')} ({step.get('kind')}): {str(step.get('error'))[:200]}"
                for step in failed[:5]
            )
            + "."
        )
    else:
        lines.append("- No step failed.")
    timed = [step for step in steps if isinstance(step.get("duration_ms"), int | float) and step.get("depth", 0) > 0]
    if timed:
        slowest = max(timed, key=lambda step: step["duration_ms"])
        lines.append(f"- Slowest step: [step:{slowest['id']}] {slowest.get('name')}, {_ms(slowest['duration_ms'])}.")
    priced = [step for step in steps if step.get("cost") not in (None, "", "0", "0E-9")]
    if priced:
        dearest = max(priced, key=lambda step: Decimal(str(step["cost"])))
        lines.append(f"- Most expensive step: [step:{dearest['id']}] {dearest.get('name')}, {_money(dearest['cost'])}.")
    if run.get("output"):
        output = run["output"] if isinstance(run["output"], str) else json.dumps(run["output"])
        lines.append(f"- Output: {output[:300]}")
    return "\n".join(lines)


def _leaderboard_answer(board: dict, comparison: dict | None) -> str:
    rows = board.get("rows") or []
    dataset = board.get("dataset") or {}
    metrics = board.get("metrics") or []
    lines = [
        f"insights on the leaderboard of {dataset.get('name')} ({len(rows)} ended experiments), "
        "read with get_leaderboard" + (" and compare_experiments." if comparison else ".")
    ]
    if not rows:
        lines.append("- No experiment has ended yet: run one to fill the leaderboard.")
        return "\n".join(lines)
    lines.append("Top performers:")
    for rank, row in enumerate(rows[:3], start=1):
        scores = "; ".join(
            f"{name} {_number((row['metrics'].get(name) or {}).get('mean'))} "
            f"[{_number((row['metrics'].get(name) or {}).get('ci_low'))}, "
            f"{_number((row['metrics'].get(name) or {}).get('ci_high'))}]"
            for name in metrics
        )
        lines.append(
            f"{rank}. {row.get('name')} (experiment {row['experiment_id']}, {row.get('agent') or 'no agent'}, "
            f"{row.get('model') or 'no model'}): pass rate {_percent(row.get('pass_rate'))}"
            + (f", {scores}" if scores else "")
            + f", cost {_money(row.get('cost'))}, p50 latency {_ms(row.get('latency_p50_ms'))}."
        )
    priced = [row for row in rows if row.get("cost") is not None and isinstance(row.get("pass_rate"), int | float)]
    if len(priced) >= 2:
        cheapest = min(priced, key=lambda row: (Decimal(str(row["cost"])), -row["pass_rate"]))
        best = max(priced, key=lambda row: (row["pass_rate"], -Decimal(str(row["cost"]))))
        if cheapest is best:
            lines.append(
                f"Cost and quality: {best.get('name')} is both the cheapest ({_money(best['cost'])}) "
                f"and the best by pass rate ({_percent(best['pass_rate'])})."
            )
        else:
            lines.append(
                f"Cost and quality: the cheapest, {cheapest.get('name')}, costs {_money(cheapest['cost'])} "
                f"for a pass rate of {_percent(cheapest['pass_rate'])}; the best, {best.get('name')}, costs "
                f"{_money(best['cost'])} for {_percent(best['pass_rate'])} "
                f"({(best['pass_rate'] - cheapest['pass_rate']) * 100:+.1f} points for "
                f"{_money(Decimal(str(best['cost'])) - Decimal(str(cheapest['cost'])))} more)."
            )
    if comparison:
        a, b = comparison.get("a") or {}, comparison.get("b") or {}
        regressed = [metric for metric in comparison.get("metrics") or [] if metric.get("direction") == "regressed"]
        improved = [metric for metric in comparison.get("metrics") or [] if metric.get("direction") == "improved"]
        head = f"Latest change, {b.get('name')} (experiment {b.get('id')}) against {a.get('name')} ({a.get('id')}): "
        if regressed:
            lines.append(
                head
                + "significant regressions: "
                + "; ".join(
                    f"{metric['name']} {_number(metric['difference'].get('mean'))} "
                    f"[{_number(metric['difference'].get('ci_low'))}, {_number(metric['difference'].get('ci_high'))}]"
                    for metric in regressed
                )
                + "."
            )
        else:
            lines.append(head + "no significant regression.")
        if improved:
            lines.append("Significant improvements: " + ", ".join(metric["name"] for metric in improved) + ".")
    return "\n".join(lines)


def _project_answer(tool: str, result) -> str:
    head = f"what {tool} answered (the question itself is not interpreted without a model):"
    lines = [head]
    if tool == "search_runs":
        runs = result.get("runs") or []
        lines.append(f"- {len(runs)} runs" + (" (more on the runs page)." if result.get("next_cursor") else "."))
        lines += [
            f"- run {run['id']} {run.get('name') or run.get('trace_id')}: {run.get('status')}, "
            f"cost {_money(run.get('total_cost'))}, {_ms(run.get('latency_ms'))}"
            + (f", error: {str(run['error'])[:120]}" if run.get("error") else "")
            for run in runs[:10]
        ]
    elif tool == "get_spend":
        totals = result.get("totals") or {}
        lines.append(
            f"- Total spend since {str((result.get('period') or {}).get('start'))[:10]}: {_money(totals.get('cost'))}."
        )
        lines += [
            f"- {row.get('name') or '(none)'}: {_money(row.get('cost'))}" for row in (result.get("rows") or [])[:10]
        ]
    elif tool == "get_budget_status":
        budgets = result.get("budgets") or []
        lines.append(f"- {len(budgets)} budgets cover this project." if budgets else "- No budget covers this project.")
        lines += [
            f"- {budget.get('name')}: {_money(budget.get('spend'))} of {_money(budget.get('amount'))} "
            f"({budget.get('percent')}%)" + (", blocked" if budget.get("blocked") else "")
            for budget in budgets
        ]
    elif tool == "list_jobs":
        jobs = result.get("jobs") or []
        lines.append(f"- {len(jobs)} jobs.")
        lines += [f"- job {job['id']} {job.get('name')}: {job.get('status')}" for job in jobs[:10]]
    elif tool == "list_sessions":
        sessions = result.get("sessions") or []
        lines.append(f"- {len(sessions)} sessions.")
        lines += [
            f"- session {session['id']} {session.get('title') or ''}: {session.get('status')}, "
            f"agent {session.get('agent')}"
            for session in sessions[:10]
        ]
    else:
        lines.append(json.dumps(result, default=str)[:1000])
    return "\n".join(lines)
