"""GPU jobs: backends and secrets an organization configures, submitting a job (with its
cost estimate and the budget check), the poller that moves a job through its statuses,
cancelling, and the job-scoped token an evaluation job reports its results with.

A job's life, all of it in PostgreSQL (a worker restart loses nothing):

    queued -> submitted -> running -> succeeded | failed | cancelled | lost

``job_submit`` stores a queued job and queues its first poll; ``job_poll`` (Celery:
jobs.tasks.poll_job) does one step: submit a queued job, or ask the backend for a
submitted/running job's status, new log lines and GPU samples; it writes what changed,
announces it to open pages, and says when to look again. When a job ends, its duration
× the hourly rate of its hardware goes to the billing ledger, its token stops working,
and an evaluation job's experiment is completed from the results it reported.

Callers (pages, API, forms, the token authentication, tasks) import the names below from
this package; the modules are its parts, each opening with its contract (none imports
one that imports it: ``backends``, ``secrets`` and ``tokens`` at the bottom, then
``submission`` and ``polling``, which do not import each other):

- ``backends``: compute backends configured (create, update, credentials and where they
  go, who may configure a local one) and the hardware each offers;
- ``secrets``: the secrets jobs receive as environment variables;
- ``submission``: the estimate, the checks and the budget, a job stored and queued; the
  request to cancel;
- ``polling``: the poll chain (submit, status, logs, GPU samples, cancel, lost, the time
  limit) and a job's end (its cost into the ledger);
- ``tokens``: the job-scoped token, and an evaluation job's items and results, which land
  in its experiment.
"""

from jobs.services.backends import backend_create, backend_update, offered_hardware
from jobs.services.polling import due_job_ids, job_poll, runner_command
from jobs.services.secrets import ENV_NAME, secret_delete, secret_set
from jobs.services.submission import MAX_TIME_LIMIT, MIN_TIME_LIMIT, estimate, job_cancel, job_submit
from jobs.services.tokens import TOKEN_PREFIX, job_for_token, job_items, job_results, token_live

__all__ = [
    "ENV_NAME",
    "MAX_TIME_LIMIT",
    "MIN_TIME_LIMIT",
    "TOKEN_PREFIX",
    "backend_create",
    "backend_update",
    "due_job_ids",
    "estimate",
    "job_cancel",
    "job_for_token",
    "job_items",
    "job_poll",
    "job_results",
    "job_submit",
    "offered_hardware",
    "runner_command",
    "secret_delete",
    "secret_set",
    "token_live",
]
