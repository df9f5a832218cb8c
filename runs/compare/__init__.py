"""The difference between any two runs of a project, as JSON-ready data: first the
settings they ran with that differ (model, parameters, system prompt, tools, tool
mode: what a replay changes), then their metrics with deltas, their steps aligned pair
by pair, their final outputs word by word and line by line, and their final memory
snapshots key by key.

It only reads. ``compare_runs`` costs a fixed number of queries whatever the runs' size,
made through the tenant-scoped managers, and a bounded amount of Python work: texts,
value previews and change lists are capped, and each cap leaves a ``truncated`` (or
``more``) flag in the answer. Callers (the compare page, the API) use ``run_pair`` and
``compare_runs``; the modules below are its parts, each opening with its contract:

- ``comparison``: the whole answer assembled from the sections, and the run pair's lookup;
- ``settings``: what each run ran with and what of it differs;
- ``metrics``: tokens, cost, latency and counts with deltas;
- ``items``: a run's steps as the units aligned, with their keys (the loading queries);
- ``alignment``: which step of a goes with which of b (dynamic programming);
- ``steps``: the aligned pairs as rows with their differences;
- ``text``: word and line diffs, and the final outputs';
- ``memory``: the final memory snapshots' differences;
- ``values``: JSON values made comparable and bounded, shared by all of the above.

How steps are aligned is documented for users in docs/runs.md#comparing-two-runs.
"""

from runs.compare.comparison import compare_runs, run_pair

__all__ = ["compare_runs", "run_pair"]
