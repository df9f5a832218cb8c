"""The analyst: an agent the platform runs with its own executor, whose tools are the MCP
server's read tools, for the member who asks, in their project (docs/mcp.md#the-analyst).
Each answer is a run (traced, costed, counted against budgets, replayable).

- ``tools``: the read tools as the executor's ``analyst`` tool set;
- ``offline``: the scripted analyst for an organization with no Mistral key;
- ``asking``: putting a question (about a run, for a leaderboard's insights) and reading
  the answers back.
"""
