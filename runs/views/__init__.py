"""Pages of runs: the list with filters and saved views, a run's detail (transcript,
step tree and waterfall, tool calls, memory), sessions (ingested conversations, and the
chat page of interactive sessions), the project dashboard, comparing two runs, agents
and webhook tools, approvals, replays and the ingestion settings.

Every page and fragment is a ``ProjectPage``. Reading needs ``work:read``, and so does
saving or deleting one's own saved view; starting, cancelling and replaying runs,
deciding approvals, acting in a chat session, and changing agents and webhook tools
need ``work:write``; the ingestion settings ``project:write``. Runs, steps and the rest are read through
``runs.selectors``, which only ever return rows of the project in the URL, so another
project's run id is a 404 like a missing one.
"""
