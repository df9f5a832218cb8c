"""The memory section of a comparison: each run's final memory snapshot (one query for
both runs) and their differences key by key, nested keys as paths."""

from __future__ import annotations

from collections.abc import Sequence

from runs.compare.values import MAX_CHANGES, equal, json_changes
from runs.models import MemorySnapshot, Run


def final_snapshots(runs: Sequence[Run]) -> dict[int, MemorySnapshot]:
    """Each run's last memory snapshot (highest sequence), in one query."""
    snapshots = (
        MemorySnapshot.objects.filter(run_id__in=[run.pk for run in runs])
        .only("id", "run_id", "snapshot_id", "sequence", "state", "step_id")
        .order_by("run_id", "-sequence", "-id")
        .distinct("run_id")
    )
    return {snapshot.run_id: snapshot for snapshot in snapshots}


def memory_diff(snapshot_a: MemorySnapshot | None, snapshot_b: MemorySnapshot | None) -> dict:
    """The final memory snapshots' differences, key by key (nested keys as paths). A run
    without a snapshot counts as an empty memory."""
    state_a = snapshot_a.state if snapshot_a is not None else {}
    state_b = snapshot_b.state if snapshot_b is not None else {}
    changes, more = json_changes(state_a, state_b, field="memory", limit=MAX_CHANGES)
    return {
        "a": _snapshot_summary(snapshot_a),
        "b": _snapshot_summary(snapshot_b),
        "equal": equal(state_a, state_b),
        "changes": changes,
        "changes_truncated": more,
    }


def _snapshot_summary(snapshot: MemorySnapshot | None) -> dict | None:
    if snapshot is None:
        return None
    return {"id": snapshot.pk, "snapshot_id": snapshot.snapshot_id, "sequence": snapshot.sequence}
