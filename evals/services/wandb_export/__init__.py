"""Weights & Biases logging, when the organization saved a W&B key (Secrets page,
provider "wandb"; a base URL only from the operator's ``WANDB_ALLOWED_BASE_URLS``), as
the project's settings choose (``IngestSettings.wandb_logging``): off, ended experiments
(the default), or every ended run and experiment.

- ``client``: the SDK (``wandb``, a runtime requirement), the key, the project's choice,
  and the ``WandbExport`` row that records each outcome;
- ``experiments``: an ended experiment's metrics and per-item table;
- ``runs``: every ended run, its scores as they arrive;
- ``retry``: a person's retry of a failed one (the exports page and API), and the
  loggings whose message was lost, sent again by the sweep.

``settings.WANDB_MODE`` is "online" by default; tests use "offline", which writes the
runs to ``WANDB_DIR`` through the real SDK.
"""

from evals.services.wandb_export.experiments import log_experiment, wandb_payload
from evals.services.wandb_export.retry import lost_exports, send_lost_exports, wandb_retry
from evals.services.wandb_export.runs import log_runs, on_run_ended, run_payload, sweep

__all__ = [
    "log_experiment",
    "log_runs",
    "lost_exports",
    "on_run_ended",
    "run_payload",
    "send_lost_exports",
    "sweep",
    "wandb_payload",
    "wandb_retry",
]
