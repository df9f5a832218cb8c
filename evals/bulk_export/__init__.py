"""Export jobs: a project's data written somewhere else, as a Celery job with a status,
progress, a log and retries (docs/exports.md).

- ``tables``: the tables of the bulk Parquet export, their schemas, chunked reading;
- ``destinations``: where files go (a folder under EXPORT_ROOT, an S3-compatible bucket);
- ``kinds``: what a job does, by kind ("parquet"; more kinds plug in here);
- ``services``: destinations, jobs (create, retry, cancel) and schedules;
- ``runner``: the worker side of one job (claim, run, record the outcome).

It reads runs (``runs``), scores (``evals``) and the ledger (``billing``), so it lives in
evals, the lowest layer that may import all three.
"""
