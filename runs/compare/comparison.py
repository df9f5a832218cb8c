"""The whole comparison of two runs of a project, assembled from its sections
(settings, metrics, output, steps, memory), and the lookup of the pair in the project.

It only reads. ``compare_runs`` costs a fixed number of queries whatever the runs' size
(steps, tool calls, final memory snapshots, the settings in the runs' state, and for an
ingested run its first model call and tool definitions), made through the
tenant-scoped managers.
"""

from __future__ import annotations

from agentops.errors import NotFound
from runs.compare.items import load_step_items
from runs.compare.memory import final_snapshots, memory_diff
from runs.compare.metrics import run_metrics
from runs.compare.settings import execution_settings, run_settings, settings_diff
from runs.compare.steps import align_steps, alignment_summary
from runs.compare.text import output_diff
from runs.models import Run


def run_summary(run: Run) -> dict:
    return {
        "id": run.pk,
        "trace_id": run.trace_id,
        "name": run.name,
        "status": run.status,
        "agent_name": run.agent_name,
        "agent_version": run.agent_version,
        "models_used": list(run.models_used),
        # As the rest of the API writes times (DRF): ISO 8601 in UTC with "Z".
        "started_at": run.started_at.isoformat().replace("+00:00", "Z") if run.started_at else None,
    }


def run_pair(*, project, a_id: int, b_id: int) -> tuple[Run, Run]:
    """Runs ``a_id`` and ``b_id`` of ``project`` (one query); NotFound names the one that
    is not in the project, another tenant's run included."""
    found = {
        run.pk: run for run in Run.objects.filter(project=project, pk__in=[a_id, b_id]).defer("search", "execution")
    }
    for name, run_id in (("a", a_id), ("b", b_id)):
        if run_id not in found:
            raise NotFound(f"run {name} not found")
    return found[a_id], found[b_id]


def compare_runs(a: Run, b: Run) -> dict:
    """The difference from run ``a`` to run ``b`` (two runs of one project, already
    looked up in it by the caller), JSON-ready: first what each ran with and what of it
    differs (``settings``), then what came of it. Four queries, and two more for each
    run that was ingested rather than executed (its first model call, its tool
    definitions)."""
    if a.project_id != b.project_id:
        raise ValueError("compare runs of one project")
    items = load_step_items([a, b])
    snapshots = final_snapshots([a, b])
    states = execution_settings([a, b])
    pairs = align_steps(items[a.pk], items[b.pk])
    return {
        "a": run_summary(a),
        "b": run_summary(b),
        "settings": settings_diff(run_settings(a, states.get(a.pk)), run_settings(b, states.get(b.pk))),
        "metrics": run_metrics(a, b, items[a.pk], items[b.pk]),
        "output": output_diff(a.output, b.output),
        "steps": {"summary": alignment_summary(pairs), "pairs": pairs},
        "memory": memory_diff(snapshots.get(a.pk), snapshots.get(b.pk)),
    }
