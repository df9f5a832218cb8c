"""A split of a Hugging Face Hub dataset repository imported into a new version of a
dataset (the ``hf_import`` kind of export job, docs/exports.md).

The column mapping (``options.columns``, checked when the job is created: a 400 says
what is wrong) names the repository's columns for each item field:

- ``input`` (required) and ``expected``: one column (its value as is), or a list of
  columns (an object of those columns);
- ``key``: one column (its value as text; without it, keys are generated);
- ``metadata``: a list of columns (an object of those columns).

On the worker: the split's files are listed at one commit (``evals.hub.split_files``),
downloaded to a temporary folder (at most ``MAX_IMPORT_BYTES`` in all) and read
(Parquet in batches; JSON Lines, a JSON array, CSV); a mapped column missing from a
file, a missing split or repository, a refused token, a row that is not a valid item,
or more rows than a dataset change takes, fails the job with the reason and writes
nothing. The version is made in one transaction (with the dataset, when the job creates
one), like every other change of a dataset's items.
"""

from __future__ import annotations

import base64
import csv
import json
import tempfile
from collections.abc import Iterator
from datetime import date, datetime, time
from decimal import Decimal
from pathlib import Path, PurePosixPath

from django.db import transaction

from agentops.errors import InvalidRequest, ServiceError
from evals.bulk_export.errors import ExportFailed
from evals.bulk_export.kind_base import Progress
from evals.hub import HubAccount, HubError, download_file, split_files
from evals.models import Dataset
from evals.services import datasets as dataset_services

MAX_IMPORT_BYTES = 200 * 1024 * 1024
MAX_COLUMN_NAME = 200
FIELDS = ("input", "expected", "key", "metadata")
READ_BATCH = 1000
ROWS_PER_REPORT = 500


# -- the mapping ------------------------------------------------------------------------------


def _column(value, where: str) -> str:
    if not isinstance(value, str) or not value.strip() or len(value) > MAX_COLUMN_NAME:
        raise InvalidRequest(f"options.columns.{where} must name a column (text of 1 to {MAX_COLUMN_NAME} characters)")
    return value


def _columns(value, where: str) -> list[str]:
    if not isinstance(value, list) or not value:
        raise InvalidRequest(f"options.columns.{where} must be a list of one or more column names")
    names = [_column(name, where) for name in value]
    if len(set(names)) != len(names):
        raise InvalidRequest(f"options.columns.{where} names a column twice")
    return names


def clean_columns(columns) -> dict:
    """The mapping as stored, or ``InvalidRequest`` saying what is wrong."""
    if not isinstance(columns, dict) or not columns:
        raise InvalidRequest(
            "options.columns is required: which column of the repository goes to each item field, "
            'e.g. {"input": "question", "expected": "answer", "key": "id", "metadata": ["source"]}'
        )
    unknown = sorted(set(columns) - set(FIELDS))
    if unknown:
        raise InvalidRequest(f"options.columns has no field {unknown[0]!r}; the fields are {', '.join(FIELDS)}")
    if columns.get("input") in (None, "", []):
        raise InvalidRequest("options.columns.input is required: the column (or columns) the agent is given")
    cleaned: dict = {}
    for field in ("input", "expected"):
        value = columns.get(field)
        if value in (None, ""):
            continue
        cleaned[field] = _columns(value, field) if isinstance(value, list) else _column(value, field)
    if columns.get("key") not in (None, ""):
        cleaned["key"] = _column(columns["key"], "key")
    if columns.get("metadata") not in (None, "", []):
        metadata = columns["metadata"]
        cleaned["metadata"] = _columns([metadata] if isinstance(metadata, str) else metadata, "metadata")
    return cleaned


def mapped_columns(columns: dict) -> list[str]:
    names: list[str] = []
    for field in FIELDS:
        value = columns.get(field)
        names += value if isinstance(value, list) else [value] if value else []
    return list(dict.fromkeys(names))


def to_item(row: dict, columns: dict) -> dict:
    """An item ({key?, input, expected?, metadata?}) from a row, by the mapping."""

    def pick(spec):
        return {name: row.get(name) for name in spec} if isinstance(spec, list) else row.get(spec)

    item = {"input": pick(columns["input"])}
    if "expected" in columns:
        item["expected"] = pick(columns["expected"])
    if "key" in columns and row.get(columns["key"]) is not None:
        item["key"] = str(row[columns["key"]])
    if "metadata" in columns:
        item["metadata"] = pick(columns["metadata"])
    return item


# -- reading files -----------------------------------------------------------------------------


def plain(value):
    """A value read from a file as JSON: dates as ISO 8601, decimals as text, bytes as
    UTF-8 text (base64 when they are not text)."""
    if isinstance(value, dict):
        return {str(key): plain(item) for key, item in value.items()}
    if isinstance(value, list | tuple):
        return [plain(item) for item in value]
    if isinstance(value, datetime | date | time):
        return value.isoformat()
    if isinstance(value, Decimal):
        return str(value)
    if isinstance(value, bytes):
        try:
            return value.decode("utf-8")
        except UnicodeDecodeError:
            return base64.b64encode(value).decode("ascii")
    if isinstance(value, float) and value != value:  # NaN: no JSON for it
        return None
    return value


def _missing(needed: list[str], present, path: str) -> None:
    missing = [name for name in needed if name not in present]
    if missing:
        shown = ", ".join(sorted(present)[:30]) or "none"
        raise ExportFailed(f"{path} has no column {missing[0]!r} (its columns: {shown})")


def read_rows(local: Path, path: str, needed: list[str]) -> Iterator[dict]:
    """The rows of a downloaded data file, as plain dicts of the ``needed`` columns;
    ``ExportFailed`` when one of them is missing or the file cannot be read."""
    suffix = PurePosixPath(path).suffix.lower()
    try:
        if suffix == ".parquet":
            yield from _parquet_rows(local, path, needed)
        elif suffix == ".csv":
            yield from _csv_rows(local, path, needed)
        else:
            yield from _json_rows(local, path, needed)
    except ExportFailed:
        raise
    except (OSError, ValueError, UnicodeDecodeError, csv.Error) as exc:
        raise ExportFailed(f"{path} could not be read: {str(exc)[:300]}") from None


def _parquet_rows(local: Path, path: str, needed: list[str]) -> Iterator[dict]:
    import pyarrow.parquet as pq

    file = pq.ParquetFile(local)
    _missing(needed, file.schema_arrow.names, path)
    for batch in file.iter_batches(batch_size=READ_BATCH, columns=needed):
        for row in batch.to_pylist():
            yield plain(row)


def _csv_rows(local: Path, path: str, needed: list[str]) -> Iterator[dict]:
    with open(local, encoding="utf-8-sig", newline="") as file:
        reader = csv.DictReader(file)
        _missing(needed, reader.fieldnames or [], path)
        for row in reader:
            yield {name: dataset_services.text_value(row[name] or "") for name in needed}


def _json_rows(local: Path, path: str, needed: list[str]) -> Iterator[dict]:
    with open(local, encoding="utf-8") as file:
        start = file.read(1)
        while start and start.isspace():
            start = file.read(1)
        file.seek(0)
        rows = json.load(file) if start == "[" else (json.loads(line) for line in file if line.strip())
        seen: set[str] = set()
        for row in rows:
            if not isinstance(row, dict):
                raise ExportFailed(f"{path}: each row must be a JSON object")
            seen.update(row)
            yield {name: row.get(name) for name in needed}
    # A JSON file has no header: a column is missing when no row has it (nothing is
    # written before the whole split is read, so failing at the end is failing at once).
    _missing(needed, seen, path)


# -- the job -------------------------------------------------------------------------------------


def run_import(job, account: HubAccount, progress: Progress) -> None:
    options = job.options
    columns = options["columns"]
    needed = mapped_columns(columns)
    try:
        found = split_files(
            account, repo_id=options["repo_id"], split=options["split"], revision=options.get("revision") or ""
        )
    except HubError as exc:
        raise ExportFailed(exc.message) from None
    if not found.files:
        raise ExportFailed(f"the split {found.split!r} of {found.repo_id} has no data files")
    total = sum(ref.size for ref in found.files)
    if total > MAX_IMPORT_BYTES:
        raise ExportFailed(f"the split's files hold {total:,} bytes; an import reads at most {MAX_IMPORT_BYTES:,}")
    source = f"hf://datasets/{found.repo_id}@{found.commit[:12]} ({found.split})"
    progress.log(f"reading {source}: {len(found.files)} file(s), {total} bytes")
    rows: list[tuple[str, dict]] = []
    progress.rows("items", 0)
    with tempfile.TemporaryDirectory(prefix="agentops-hub-import-") as workdir:
        for index, ref in enumerate(found.files):
            local = Path(workdir) / f"{index}{PurePosixPath(ref.path).suffix}"
            try:
                size = download_file(
                    account,
                    repo_id=found.repo_id,
                    path=ref.path,
                    commit=found.commit,
                    target=local,
                    max_bytes=MAX_IMPORT_BYTES,
                )
            except HubError as exc:
                raise ExportFailed(exc.message) from None
            progress.log(f"{ref.path}: {size} bytes")
            for number, row in enumerate(read_rows(local, ref.path, needed), start=1):
                rows.append((f"{ref.path} row {number}", to_item(row, columns)))
                if len(rows) > dataset_services.MAX_ITEMS_PER_CHANGE:
                    raise ExportFailed(
                        f"the split has more than {dataset_services.MAX_ITEMS_PER_CHANGE:,} rows, "
                        "the most one change of a dataset takes"
                    )
                if len(rows) % ROWS_PER_REPORT == 0:
                    progress.rows("items", len(rows))
            local.unlink()
    progress.rows("items", len(rows))
    try:
        with transaction.atomic():
            if options.get("dataset"):
                dataset = Dataset.objects.filter(project=job.project, pk=options["dataset"]).first()
                if dataset is None:
                    raise ExportFailed("the dataset was deleted")
            else:
                dataset = dataset_services.dataset_create(
                    project=job.project,
                    actor=job.created_by,
                    name=options["new_dataset"],
                    description=f"Imported from {source}.",
                )
            version = dataset_services.items_import_rows(
                dataset=dataset, actor=job.created_by, rows=rows, source=source
            )
    except ServiceError as exc:
        problems = (getattr(exc, "details", None) or {}).get("problems") or []
        more = "; ".join(problems[1:5])
        raise ExportFailed(exc.message + (f" (also: {more})" if more else "")) from None
    progress.file(
        {
            "table": "items",
            "location": f"dataset “{dataset.name}” version {version.number}",
            "rows": len(rows),
            "bytes": total,
        }
    )
    progress.log(f"dataset “{dataset.name}” version {version.number}: {version.item_count} items")
