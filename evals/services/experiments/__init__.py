"""Experiments: an agent version over a dataset version, scored by evaluators.

How an executed experiment moves (every step idempotent, state in PostgreSQL):

1. ``experiment_start`` stores the experiment and one pending result per item of the
   dataset version, then hands it to ``advance``.
2. ``experiment_advance`` (Celery: evals.tasks.advance_experiment) starts up to
   ``concurrency`` items at once: each becomes an executed run on the runs executor.
3. When a run ends, the executor's ``run_ended`` signal marks its result ``scoring``
   and queues ``score_result`` (evals.tasks.score_result), which runs the evaluators,
   stores the scores and the run's cost and latency, and advances the experiment (the
   freed slot starts the next item).
4. With no item left, ``advance`` aggregates each metric with a 95% bootstrap interval
   (evals.stats) and ends the experiment.

A periodic task (evals.tasks.recover_experiments) picks up any step a dead worker
dropped. Experiments reported from outside (``kind = external``) skip 2: a harness
posts each item's output (and scores) with ``results_report``; the platform's
evaluators score the outputs the same way.

Callers (pages, API, jobs, tasks) import the names below from this package; the modules
are its parts, each opening with its contract (none imports one that imports it:
``summary`` and ``totals`` at the bottom, then ``advance``, then ``item_scoring``):

- ``start``: the request checked and the experiment stored (1);
- ``advance``: one step forward, starting items and ending the experiment (2, 4);
- ``item_scoring``: one item's result scored when its run ends or it is reported (3);
- ``ending``: cancel, stop and complete, the requests to end;
- ``external``: results reported from outside;
- ``recovery``: what a dead worker dropped, and an experiment run in this process;
- ``summary``: the numbers of an ended experiment (pure);
- ``totals``: the running totals its pages show while it runs.
"""

from evals.services.experiments.advance import experiment_advance
from evals.services.experiments.ending import experiment_cancel, experiment_complete, experiment_stop
from evals.services.experiments.external import results_report
from evals.services.experiments.item_scoring import on_run_ended, score_result
from evals.services.experiments.recovery import experiment_run_here, stalled_work
from evals.services.experiments.start import MAX_CONCURRENCY, experiment_start
from evals.services.experiments.summary import summarize

__all__ = [
    "MAX_CONCURRENCY",
    "experiment_advance",
    "experiment_cancel",
    "experiment_complete",
    "experiment_run_here",
    "experiment_start",
    "experiment_stop",
    "on_run_ended",
    "results_report",
    "score_result",
    "stalled_work",
    "summarize",
]
