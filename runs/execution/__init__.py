"""The platform runs agents itself: start, execute (on a Celery worker), cancel.

Execution is the tool-calling loop: ask the model; store the call as an ``llm`` step;
run each tool it asked for and store a ``tool`` step, the tool call, the tool's message
and the scratch memory; repeat until the model answers without tools, the step limit is
reached, the run is cancelled or a call fails. Every step goes through
``runs.ingest.ingest`` — the same write path as ingested traces — so totals,
cost and live updates work the same way.

One module per job, each opening with its contract:

- ``starting``: what a run executes (``Spec``), its queued record, its hand-off to a worker;
- ``claims``: a worker's hold on a run (the claim, the state saves that check it and
  beat), and finding runs whose worker died;
- ``loop``: the step loop a worker runs (``run_execute``);
- ``model_calls``: one model call, streamed, and what is stored of it;
- ``tool_calls``: the tool calls a model asked for, parking the run for approvals;
- ``compaction``: shrinking a conversation that nears the model's context window;
- ``cancellation``: asking a run to stop, and ending one no worker executes;
- ``writes``: what every part stores of the run, through the one write path.

Callers (tasks, replays, experiments, pages, the API) import from here.
"""

from runs.execution.cancellation import run_cancel
from runs.execution.claims import stalled_run_ids
from runs.execution.loop import run_execute
from runs.execution.starting import Spec, create_executed_run, run_start, version_spec
from runs.execution.writes import ROOT_SPAN

__all__ = [
    "ROOT_SPAN",
    "Spec",
    "create_executed_run",
    "run_cancel",
    "run_execute",
    "run_start",
    "stalled_run_ids",
    "version_spec",
]
