"""The MCP server's prompts: how to go about three common questions with the tools.
They read nothing themselves (a prompt has no permission of its own); the tools they
name check the caller's key when the client calls them."""

from __future__ import annotations

from typing import Annotated

from pydantic import Field


def debug_run(run_id: Annotated[str, Field(description="The id of the run to debug.")]) -> str:
    """Find out why a run failed or went wrong."""
    return (
        f"Debug run {run_id} of this AgentOps project. Call get_run with run_id={run_id} and read its status, "
        "error, step tree and transcript (page with next_cursor when truncated). Find the first step that failed "
        "or produced a wrong answer and read it in full with get_step. Compare with a similar succeeded run "
        "(search_runs with the same agent, status succeeded, then compare_runs) when one exists. Answer with: what "
        "went wrong, the step ids that show it, and a fix to try; offer replay_run with the override that tests it."
    )


def cost_review(
    period: Annotated[str, Field(description="30d, 90d or month.")] = "30d",
) -> str:
    """Review what the project spends and where to save."""
    return (
        f"Review this AgentOps project's spend over period={period}. Call get_spend by day, then by model, by "
        "agent and by key, and get_budget_status. Report the total, the trend, the biggest models and agents, "
        "any budget near or over its limit, and the most expensive runs (search_runs sort=-cost limit=10). "
        "Suggest concrete savings (a cheaper model for an agent, fewer tokens) and the numbers behind each."
    )


def regression_triage(
    experiment_id: Annotated[str, Field(description="The experiment that may have regressed.")],
    baseline_id: Annotated[str, Field(description="The baseline experiment to compare with.")],
) -> str:
    """Triage a quality regression between two experiments."""
    return (
        f"Experiment {experiment_id} may have regressed against experiment {baseline_id}. Call compare_experiments "
        f"with a={baseline_id} and b={experiment_id}: list the metrics whose change is significant, then the "
        "regressed items. For two or three regressed items, compare their runs (compare_runs with a_run_id and "
        "b_run_id) to see what changed (model, prompt, tools, output). Conclude with the likely cause and whether "
        f"the gate should fail (run_gate on experiment {experiment_id} with relative conditions against the "
        "baseline)."
    )


# (name, function)
PROMPTS = [("debug-run", debug_run), ("cost-review", cost_review), ("regression-triage", regression_triage)]
