"""Pages of runs: the list with filters and saved views, a run's detail (transcript,
step tree and waterfall, tool calls, memory), sessions and the project dashboard.

Every page and fragment is a ``ProjectPage`` that declares ``work:read``; runs, steps and
the rest are read through ``runs.selectors``, which only ever return rows of the
project in the URL, so another project's run id is a 404 like a missing one.
"""
