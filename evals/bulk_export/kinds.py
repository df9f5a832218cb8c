"""What an export job does, by its ``kind``. Each kind is one class in ``EXPORT_KINDS``:
which destinations it can write to, how it checks its tables and options at creation,
and ``run``, which the worker calls with the job and a ``Progress`` to report to.
"parquet" is the bulk export of a project's tables; the Hugging Face Hub pushes and the
Hub import are more kinds on the same jobs, status, log, retry and pages
(``evals.bulk_export.hub_kinds``).
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from functools import partial

from django.conf import settings
from django.utils import timezone

from agentops.errors import InvalidRequest
from evals.bulk_export.destinations import DESTINATION_KINDS
from evals.bulk_export.hub_kinds import HUB_KINDS
from evals.bulk_export.hub_trajectory import HubTrajectoryPush
from evals.bulk_export.kind_base import ExportKind, Progress

__all__ = ["EXPORT_KINDS", "EXPORT_KIND_CHOICES", "ExportKind", "Progress"]
from evals.bulk_export.tables import TABLE_NAMES, TABLES, ExportRange, write_parquet

SCHEMA_VERSION = 1


@dataclass
class _Counter:
    rows: int = 0


class ParquetExport(ExportKind):
    """The project's runs, steps, messages, tool calls, scores and usage ledger for the
    job's dates: one Parquet file per table plus ``manifest.json``, in
    ``<project slug>/<start>_<end>/export-<id>/`` at the destination."""

    kind = "parquet"
    label = "Parquet files"
    destination_kinds = ("folder", "s3")
    uses_dates = True

    def clean_tables(self, tables):
        unknown = [name for name in tables if name not in TABLES]
        if unknown:
            raise InvalidRequest(f"unknown table {unknown[0]!r}; the tables are {', '.join(TABLE_NAMES)}")
        return [name for name in TABLE_NAMES if name in tables] if tables else list(TABLE_NAMES)

    def run(self, job, progress):
        period = ExportRange(job.start_date, job.end_date)
        folder = f"{job.project.slug}/{job.start_date.isoformat()}_{job.end_date.isoformat()}/export-{job.pk}"
        destination = job.destination
        progress.log(f"writing to {destination.name} ({DESTINATION_KINDS[destination.kind].label}), folder {folder}")
        target = DESTINATION_KINDS[destination.kind].open(destination, folder=folder)
        chunk_rows = max(1, settings.EXPORT_CHUNK_ROWS)
        files = []
        try:
            for name in job.tables or TABLE_NAMES:
                table = TABLES[name]
                counter = _Counter()
                write = partial(self._write_table, table, job, period, chunk_rows, progress, counter)
                progress.rows(name, 0)
                location, size = target.write(f"{name}.parquet", write)
                entry = {"table": name, "location": location, "rows": counter.rows, "bytes": size}
                files.append(entry)
                progress.file(entry)
                progress.log(f"{name}: {counter.rows} rows, {size} bytes -> {location}")
            manifest = {
                "schema_version": SCHEMA_VERSION,
                "export_id": job.pk,
                "project": job.project.slug,
                "start_date": job.start_date.isoformat(),
                "end_date": job.end_date.isoformat(),
                "written_at": timezone.now().isoformat(),
                "files": files,
            }
            location, _size = target.write(
                "manifest.json", lambda sink: sink.write(json.dumps(manifest, indent=2).encode())
            )
            progress.log(f"manifest -> {location}")
        finally:
            target.close()

    @staticmethod
    def _write_table(table, job, period, chunk_rows, progress, counter, sink) -> None:
        counter.rows = write_parquet(
            table,
            table.chunks(job.project, period, chunk_rows),
            sink,
            on_chunk=partial(progress.rows, table.name),
        )


EXPORT_KINDS: dict[str, ExportKind] = {kind.kind: kind for kind in (ParquetExport(), *HUB_KINDS, HubTrajectoryPush())}
EXPORT_KIND_CHOICES = [(name, kind.label) for name, kind in EXPORT_KINDS.items()]
