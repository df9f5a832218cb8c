"""The one write path of the trace store.

OTLP spans, JSON batch events and the platform's own executor all become the events of
``runs.events`` and go through ``ingest()``, which in one transaction: redacts payloads,
upserts runs (a step may arrive before its run), upserts steps with their cost, upserts
messages, tool calls and memory snapshots, links them to their steps, recomputes the
totals of every run it touched, and announces the change to the project's open pages
after commit.

Every upsert is keyed by a client-visible id (trace id, span id, message id, call id,
snapshot id), so re-sending the same data updates rows instead of duplicating them.

The package, in the order of the work:

- ``write``: ``ingest()``, the transaction and the order of the steps below;
- ``run_rows``: the batch's runs, locked or created, merged with the events, linked to
  their parent run;
- ``item_rows``: the rows of steps (with their cost), messages, tool calls, snapshots;
- ``sql``: the upsert statements (INSERT from a jsonb parameter, or COPY) and storable values;
- ``totals``: ``recompute_run_totals()``, the runs' totals, status and search text.

It builds on ``runs.events`` and never imports ``runs.otlp`` (which builds the events
of OpenTelemetry exports) or the executor (which builds those of executed runs).
"""

from runs.ingest.run_rows import runs_of_traces
from runs.ingest.totals import recompute_run_totals
from runs.ingest.write import IngestResult, ingest

__all__ = ["IngestResult", "ingest", "recompute_run_totals", "runs_of_traces"]
