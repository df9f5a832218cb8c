"""Datasets and their versioned items: an input, the expected output (optional) and
metadata. Items are added from the API or a page, imported from CSV or JSON Lines,
taken from a run, replaced by key, or removed.

Every change to a dataset's items makes exactly one new ``DatasetVersion``, in one
transaction that first locks the dataset's row: two imports at the same moment get
versions N and N+1, never the same number, and each version's ``item_count`` is exact.
Item rows are never edited (see ``evals.models``): a replaced or removed item keeps its
row with ``removed_in`` set, so version N always lists the items it had.
"""

from __future__ import annotations

import csv
import io
import json
import uuid
from dataclasses import dataclass
from typing import Any

from django.db import IntegrityError, transaction
from django.db.models import OuterRef, QuerySet, Subquery
from django.db.models.functions import Coalesce
from django.utils import timezone

from agentops import jsonsafe
from agentops.errors import Conflict, InvalidRequest, NotFound
from agentops.jsonsafe import storage_problem
from agentops.services.audit import acting_user, audit_record, audited_update
from evals.models import Dataset, DatasetItem, DatasetVersion

MAX_IMPORT_BYTES = 10 * 1024 * 1024
MAX_ITEMS_PER_CHANGE = 50_000
# An import lists this many problems at most (the first ones, by line).
MAX_PROBLEMS_LISTED = 20
MAX_KEY_LENGTH = DatasetItem._meta.get_field("key").max_length
MAX_NAME_LENGTH = Dataset._meta.get_field("name").max_length
MAX_NOTE_LENGTH = DatasetVersion._meta.get_field("note").max_length
# 64 random bits: two generated keys of one dataset practically never collide.
GENERATED_KEY_LENGTH = 16
# Rows written per INSERT, and keys per `key IN (...)`: PostgreSQL takes at most 65,535
# parameters per statement, and statements bind their parameters server-side here.
WRITE_BATCH = 2_000
ITEM_FIELDS = ("key", "input", "expected", "metadata")
IMPORT_FORMATS = {".csv": "csv", ".jsonl": "jsonl", ".ndjson": "jsonl", ".json": "jsonl"}


class TooLarge(InvalidRequest):
    status = 413
    code = "too_large"


@dataclass(frozen=True)
class NewItem:
    """One item to write, already checked."""

    key: str
    input: Any
    expected: Any
    metadata: dict
    where: str = ""
    source_run_id: int | None = None


# --- Datasets ----------------------------------------------------------------------------


def _clean_name(name: str) -> str:
    name = (name or "").strip()
    if not name:
        raise InvalidRequest("the dataset needs a name")
    if len(name) > MAX_NAME_LENGTH:
        raise InvalidRequest(f"a dataset name has at most {MAX_NAME_LENGTH} characters")
    if name.isdecimal():
        # The experiments API takes a dataset by name or by id: "42" must mean one thing.
        raise InvalidRequest("a dataset name cannot be only digits (ids are); add a letter")
    return name


def dataset_create(*, project, actor, name: str, description: str = "", ip: str | None = None) -> Dataset:
    """Create an empty dataset; its first change of items makes version 1."""
    name = _clean_name(name)
    try:
        with transaction.atomic():
            dataset = Dataset.objects.create(
                organization_id=project.organization_id,
                project=project,
                name=name,
                description=(description or "").strip(),
                created_by=acting_user(actor),
            )
            audit_record(
                organization=project.organization,
                actor=actor,
                action="dataset.create",
                target=dataset,
                data={"project": project.slug},
                ip=ip,
            )
    except IntegrityError:
        raise Conflict(f"a dataset named {name!r} already exists in this project") from None
    return dataset


def dataset_update(
    *, dataset: Dataset, actor, name: str | None = None, description: str | None = None, ip: str | None = None
) -> Dataset:
    """Rename a dataset or change its description (its items and versions stay as they are)."""
    changes: dict[str, Any] = {}
    if name is not None and name.strip() != dataset.name:
        changes["name"] = _clean_name(name)
    if description is not None and description.strip() != dataset.description:
        changes["description"] = description.strip()
    if not changes:
        return dataset
    try:
        with transaction.atomic():
            locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
            audited_update(
                locked, changes, actor=actor, action="dataset.update", data={"changed": sorted(changes)}, ip=ip
            )
    except IntegrityError:
        raise Conflict(f"a dataset named {changes['name']!r} already exists in this project") from None
    return locked


# --- Reading (what the pages and the API show; scoped by the dataset given) ---------------


def dataset_list(*, project) -> QuerySet[Dataset]:
    """The project's datasets by name, each with ``item_count`` of its latest version."""
    latest_count = DatasetVersion.objects.filter(dataset=OuterRef("pk"), number=OuterRef("latest_version")).values(
        "item_count"
    )[:1]
    return (
        Dataset.objects.filter(project=project)
        .annotate(item_count=Coalesce(Subquery(latest_count), 0))
        .order_by("name")
    )


def dataset_detail(*, project, dataset_id: int) -> Dataset:
    """One dataset of the project, with ``item_count``; NotFound for another tenant's too."""
    dataset = dataset_list(project=project).filter(pk=dataset_id).first()
    if dataset is None:
        raise NotFound("dataset not found")
    return dataset


def version_get(*, dataset: Dataset, number: int | None = None) -> DatasetVersion | None:
    """Version ``number`` of the dataset (the latest when None; None when it has none yet)."""
    if number is None:
        number = dataset.latest_version
        if not number:
            return None
    version = DatasetVersion.objects.filter(dataset=dataset, number=number).first()
    if version is None:
        raise NotFound(f"version {number} of this dataset not found (the latest is {dataset.latest_version})")
    return version


def version_items(version: DatasetVersion) -> QuerySet[DatasetItem]:
    """The items of ``version``, in the order they were added."""
    return DatasetItem.objects.filter(dataset_id=version.dataset_id).in_version(version.number).order_by("id")


# --- Checking items ----------------------------------------------------------------------


def _generated_key() -> str:
    return uuid.uuid4().hex[:GENERATED_KEY_LENGTH]


def _check_item(raw: Any, *, where: str, problems: list[str], strict: bool) -> NewItem | None:
    """``raw`` ({key?, input, expected?, metadata?}) as a NewItem, or None with the
    reasons added to ``problems``. ``strict``: unknown fields are a problem (the JSON API),
    rather than already folded into metadata (imports)."""
    if not isinstance(raw, dict):
        problems.append(f"{where}: an item is a JSON object with input, and optionally expected, key and metadata")
        return None
    count = len(problems)
    if strict:
        unknown = sorted(set(raw) - set(ITEM_FIELDS))
        if unknown:
            problems.append(
                f"{where}: unknown field {', '.join(map(repr, unknown))}; an item has key, input, expected and metadata"
            )
    if raw.get("input") is None:
        problems.append(f"{where}: input is required")
    metadata = raw.get("metadata")
    if metadata is None:
        metadata = {}
    elif not isinstance(metadata, dict):
        problems.append(f"{where}: metadata must be a JSON object")
    key = raw.get("key")
    if key is None or key == "":
        key = _generated_key()
    elif isinstance(key, bool) or not isinstance(key, str | int):
        problems.append(f"{where}: key must be text")
    else:
        key = str(key).strip()
        if not key:
            key = _generated_key()
        elif len(key) > MAX_KEY_LENGTH:
            problems.append(f"{where}: key is longer than {MAX_KEY_LENGTH} characters")
        elif "\x00" in key:
            problems.append(f"{where}: key contains a NUL character")
    if len(problems) > count:
        return None
    for field, value in (("input", raw["input"]), ("expected", raw.get("expected")), ("metadata", metadata)):
        problem = storage_problem(value)
        if problem:
            problems.append(f"{where}: {field}: {problem}")
            return None
    return NewItem(key=key, input=raw["input"], expected=raw.get("expected"), metadata=metadata, where=where)


def _problems_error(problems: list[str], *, what: str) -> InvalidRequest:
    """One error for every problem found: the first in the message, the first few in details."""
    more = len(problems) - 1
    message = f"{what}: {problems[0]}" + (f" (and {more} more problem{'s' if more > 1 else ''})" if more else "")
    return InvalidRequest(message, details={"problems": problems[:MAX_PROBLEMS_LISTED]})


def _check_unique_keys(items: list[NewItem], *, what: str) -> None:
    seen: dict[str, list[str]] = {}
    for item in items:
        seen.setdefault(item.key, []).append(item.where)
    duplicates = {key: wheres for key, wheres in seen.items() if len(wheres) > 1}
    if duplicates:
        problems = [f"key {key!r} appears more than once ({', '.join(wheres)})" for key, wheres in duplicates.items()]
        raise _problems_error(problems, what=what)


def _check_count(count: int) -> None:
    if count > MAX_ITEMS_PER_CHANGE:
        raise TooLarge(
            f"{count:,} items at once; the limit is {MAX_ITEMS_PER_CHANGE:,} per change (split them into several)"
        )


# --- Parsing files -----------------------------------------------------------------------


def text_value(text: str) -> Any:
    """A value typed as text (a CSV cell, a form field): the text itself, except text that
    is a JSON object or array, kept as that JSON. Text has no types: "42" stays "42"."""
    stripped = text.strip()
    if stripped[:1] in ("{", "[") and stripped[-1:] in ("}", "]"):
        try:
            value = jsonsafe.loads(stripped, strict=False)
        except ValueError:
            return text
        if isinstance(value, dict | list):
            return value
    return text


def _line_of(content: bytes, offset: int) -> int:
    return content.count(b"\n", 0, offset) + 1


def _decode(content: bytes) -> str:
    try:
        # utf-8-sig: a byte order mark (spreadsheets write one) is dropped.
        return content.decode("utf-8-sig")
    except UnicodeDecodeError as exc:
        raise InvalidRequest(
            f"line {_line_of(content, exc.start)}: the file is not UTF-8 text (byte {exc.start + 1}); "
            "save it as UTF-8 and try again"
        ) from None


def _csv_columns(header: list[str]) -> list[str | None]:
    """What each column of the header holds: "input", "expected", "key", "metadata",
    "extra:<name>" or None (an unnamed column)."""
    columns: list[str | None] = []
    seen: set[str] = set()
    for cell in header:
        name = cell.strip()
        lowered = name.lower()
        if not name:
            columns.append(None)
            continue
        if lowered in ("input", "expected", "metadata", "key", "id"):
            column = "key" if lowered == "id" else lowered
        else:
            column = f"extra:{name}"
        if column in seen:
            which = "key and id (keep one)" if column == "key" else repr(name)
            raise InvalidRequest(f"line 1: the header names the column {which} twice")
        seen.add(column)
        columns.append(column)
    if "input" not in seen:
        named = ", ".join(repr(cell.strip()) for cell in header if cell.strip()) or "none"
        raise InvalidRequest(f"line 1: the header has no input column (its columns: {named})")
    return columns


def _parse_csv(text: str, problems: list[str]) -> list[NewItem]:
    """Items from CSV with a header row: input (required), expected, key (or id),
    metadata (a JSON object); every other column goes into metadata."""
    reader = csv.reader(io.StringIO(text, newline=""))
    try:
        header = next(reader, None)
    except csv.Error as exc:
        raise InvalidRequest(f"line 1: not valid CSV: {exc}") from None
    if header is None or not any(cell.strip() for cell in header):
        raise InvalidRequest("the file is empty: a CSV file starts with a header row naming an input column")
    columns = _csv_columns(header)
    items: list[NewItem] = []
    line = reader.line_num + 1
    while True:
        try:
            row = next(reader, None)
        except csv.Error as exc:
            problems.append(f"line {line}: not valid CSV: {exc}")
            break
        if row is None:
            break
        where, line = f"line {line}", reader.line_num + 1
        if not any(cell.strip() for cell in row):
            continue
        if len(row) > len(columns) and any(cell.strip() for cell in row[len(columns) :]):
            problems.append(f"{where}: {len(row)} cells, but the header has {len(columns)} columns")
            continue
        raw: dict[str, Any] = {}
        extra: dict[str, Any] = {}
        for column, cell in zip(columns, row, strict=False):
            if column is None:
                if cell.strip():
                    problems.append(f"{where}: a value in a column the header does not name")
                continue
            if column.startswith("extra:"):
                if cell.strip():
                    extra[column[len("extra:") :]] = text_value(cell)
            elif column == "metadata":
                if cell.strip():
                    try:
                        raw["metadata"] = jsonsafe.loads(cell, strict=False)
                    except ValueError as exc:
                        problems.append(f"{where}: metadata is not valid JSON ({exc})")
                        raw["metadata"] = {}
                    if not isinstance(raw["metadata"], dict):
                        problems.append(f"{where}: metadata must be a JSON object")
                        raw["metadata"] = {}
            elif column == "key":
                raw["key"] = cell.strip()
            elif cell.strip():
                raw[column] = text_value(cell)
        if "input" not in raw:
            problems.append(f"{where}: input is empty")
            continue
        if extra:
            raw["metadata"] = {**raw.get("metadata", {}), **extra}
        if _keep_item(raw, where=where, problems=problems, items=items):
            break
    return items


def _keep_item(raw: dict, *, where: str, problems: list[str], items: list[NewItem]) -> bool:
    """Check an imported row (``where`` names it in problems) and keep it as an item; True
    once there are more items than one change may add, so the reader stops."""
    item = _check_item(raw, where=where, problems=problems, strict=False)
    if item is not None:
        items.append(item)
    return len(items) > MAX_ITEMS_PER_CHANGE


def _parse_json_lines(text: str, problems: list[str]) -> list[NewItem]:
    """Items from JSON Lines: one object per line with input, and optionally expected,
    key (or id) and metadata; other fields go into metadata. Blank lines are skipped."""
    items: list[NewItem] = []
    # Not splitlines(): it also splits on U+2028 and friends, which JSON strings may hold.
    for number, line in enumerate(text.split("\n"), start=1):
        if not line.strip():
            continue
        where = f"line {number}"
        try:
            value = jsonsafe.loads(line, strict=False)
        except ValueError as exc:
            message = exc.msg if isinstance(exc, json.JSONDecodeError) else str(exc)
            column = f", column {exc.colno}" if isinstance(exc, json.JSONDecodeError) else ""
            problems.append(f"{where}: not valid JSON ({message}{column})")
            continue
        if not isinstance(value, dict):
            problems.append(f"{where}: each line must be a JSON object, not {type(value).__name__}")
            continue
        if "key" in value and "id" in value:
            problems.append(f"{where}: both key and id are given; keep one")
            continue
        raw = {"key": value.pop("key", value.pop("id", None))}
        for field in ("input", "expected", "metadata"):
            if field in value:
                raw[field] = value.pop(field)
        if value:
            metadata = raw.get("metadata")
            if metadata is not None and not isinstance(metadata, dict):
                problems.append(f"{where}: metadata must be a JSON object")
                continue
            raw["metadata"] = {**(metadata or {}), **value}
        if _keep_item(raw, where=where, problems=problems, items=items):
            break
    return items


def parse_import(*, filename: str, content: bytes) -> list[NewItem]:
    """The items of a CSV or JSON Lines file, checked: every problem found is reported at
    once, each with its line number, and nothing is imported unless there is none."""
    if len(content) > MAX_IMPORT_BYTES:
        raise TooLarge(
            f"the file is {len(content) / 1024 / 1024:.1f} MB; the limit is {MAX_IMPORT_BYTES // 1024 // 1024} MB"
        )
    suffix = "." + filename.rsplit(".", 1)[-1].lower() if "." in filename else ""
    kind = IMPORT_FORMATS.get(suffix)
    if kind is None:
        raise InvalidRequest(f"cannot tell the format of {filename!r}: name it .csv for CSV, or .jsonl for JSON Lines")
    text = _decode(content)
    if not text.strip():
        raise InvalidRequest("the file is empty")
    problems: list[str] = []
    items = _parse_csv(text, problems) if kind == "csv" else _parse_json_lines(text, problems)
    if problems:
        raise _problems_error(problems, what=f"{filename} was not imported")
    if not items:
        raise InvalidRequest(f"{filename} has no items")
    _check_count(len(items))
    _check_unique_keys(items, what=f"{filename} was not imported")
    return items


# --- Writing a new version ---------------------------------------------------------------


def _batches(values: list, size: int = WRITE_BATCH):
    for start in range(0, len(values), size):
        yield values[start : start + size]


def _change(
    *,
    dataset: Dataset,
    actor,
    note: str,
    action: str,
    add: list[NewItem] = (),
    remove: list[str] = (),
    audit_data: dict | None = None,
    ip: str | None = None,
) -> DatasetVersion:
    """Make the next version of ``dataset``: retire the live rows of ``remove`` and of the
    keys ``add`` replaces, insert ``add``. Locks the dataset first, so concurrent changes
    queue up and each gets its own number."""
    with transaction.atomic():
        locked = Dataset.objects.select_for_update().get(pk=dataset.pk)
        number = locked.latest_version + 1
        live = DatasetItem.objects.filter(dataset=locked, removed_in__isnull=True)
        if remove:
            found: set[str] = set()
            for keys in _batches(list(remove)):
                found.update(live.filter(key__in=keys).values_list("key", flat=True))
            unknown = [key for key in remove if key not in found]
            if unknown:
                listed = ", ".join(map(repr, unknown[:10])) + (
                    f" and {len(unknown) - 10} more" if len(unknown) > 10 else ""
                )
                raise InvalidRequest(
                    f"no item with the key {listed} in this dataset", details={"unknown_keys": unknown[:100]}
                )
        retired = 0
        for keys in _batches([*remove, *(item.key for item in add)]):
            retired += live.filter(key__in=keys).update(removed_in=number)
        now = timezone.now()
        DatasetItem.objects.bulk_create(
            [
                DatasetItem(
                    organization_id=locked.organization_id,
                    project_id=locked.project_id,
                    dataset=locked,
                    key=item.key,
                    input=item.input,
                    expected=item.expected,
                    metadata=item.metadata,
                    source_run_id=item.source_run_id,
                    added_in=number,
                    created_at=now,
                )
                for item in add
            ],
            batch_size=WRITE_BATCH,
        )
        replaced = retired - len(remove)
        if add and not note:
            note = f"added {len(add)} item{'s' if len(add) != 1 else ''}"
        if replaced and add:
            note += f" ({replaced} replaced)"
        item_count = DatasetItem.objects.filter(dataset=locked, removed_in__isnull=True).count()
        version = DatasetVersion.objects.create(
            organization_id=locked.organization_id,
            project_id=locked.project_id,
            dataset=locked,
            number=number,
            item_count=item_count,
            note=note[:MAX_NOTE_LENGTH],
            created_by=acting_user(actor),
            created_at=now,
        )
        locked.latest_version = number
        locked.updated_at = now
        locked.save(update_fields=["latest_version", "updated_at"])
        audit_record(
            organization=locked.project.organization,
            actor=actor,
            action=action,
            target=locked,
            data={
                "version": number,
                "added": len(add),
                "replaced": max(replaced, 0) if add else 0,
                "removed": len(remove),
                **(audit_data or {}),
            },
            ip=ip,
        )
    # The caller's object follows, so it can show the new latest version.
    dataset.latest_version, dataset.updated_at = number, now
    return version


def _checked_items(rows, *, what: str) -> list[dict]:
    """The items of ``rows`` ((where, raw item) pairs, at most the limit of one change),
    checked strictly with unique keys; ``InvalidRequest`` naming every problem by where,
    ending with ``what`` (what was not done), when any has one."""
    rows = list(rows)
    _check_count(len(rows))
    problems: list[str] = []
    checked = [_check_item(raw, where=where, problems=problems, strict=True) for where, raw in rows]
    if problems:
        raise _problems_error(problems, what=what)
    items = [item for item in checked if item is not None]
    _check_unique_keys(items, what=what)
    return items


def _imported(*, dataset: Dataset, actor, items: list[dict], source: str, audit_data: dict, ip) -> DatasetVersion:
    """``items`` read from ``source`` (a file's name, a repository) as a new version."""
    return _change(
        dataset=dataset,
        actor=actor,
        note=f"imported {source} ({len(items)} item{'s' if len(items) != 1 else ''})",
        action="dataset.import",
        add=items,
        audit_data=audit_data,
        ip=ip,
    )


def items_add(*, dataset: Dataset, actor, items: list[dict], note: str = "", ip: str | None = None) -> DatasetVersion:
    """Add items ({key?, input, expected?, metadata?}) as a new version; an item whose key
    is already in the dataset replaces it. A missing key gets a generated one."""
    if not isinstance(items, list) or not items:
        raise InvalidRequest("give a list of one or more items")
    new_items = _checked_items(((f"item {index}", raw) for index, raw in enumerate(items)), what="no item was added")
    return _change(
        dataset=dataset, actor=actor, note=(note or "").strip(), action="dataset.items_add", add=new_items, ip=ip
    )


def items_import(*, dataset: Dataset, actor, filename: str, content: bytes, ip: str | None = None) -> DatasetVersion:
    """Import a CSV or JSON Lines file as a new version: all of it, or nothing with every
    problem named by line (see ``parse_import`` and docs/evaluations.md for the formats)."""
    filename = (filename or "").strip() or "upload"
    items = parse_import(filename=filename, content=content)
    return _imported(
        dataset=dataset,
        actor=actor,
        items=items,
        source=filename,
        audit_data={"filename": filename[:200], "bytes": len(content)},
        ip=ip,
    )


def items_import_rows(
    *, dataset: Dataset, actor, rows: list[tuple[str, dict]], source: str, ip: str | None = None
) -> DatasetVersion:
    """Import items read from elsewhere (``rows``: where each came from, e.g. "data/train.parquet
    row 3", and {key?, input, expected?, metadata?}) as a new version: all of them, or
    nothing with every problem named by where. ``source`` says where they came from (the
    version's note and the audit event), e.g. "hf://datasets/acme/qa@1a2b3c (train)"."""
    if not rows:
        raise InvalidRequest(f"{source} has no rows to import")
    items = _checked_items(rows, what="nothing was imported")
    return _imported(
        dataset=dataset, actor=actor, items=items, source=source, audit_data={"source": source[:300]}, ip=ip
    )


def items_remove(*, dataset: Dataset, actor, keys: list[str], ip: str | None = None) -> DatasetVersion:
    """Remove the items with ``keys`` as a new version (earlier versions keep them)."""
    if not isinstance(keys, list) or not keys or not all(isinstance(key, str) for key in keys):
        raise InvalidRequest("give the keys of the items to remove, as a list of text")
    keys = list(dict.fromkeys(key.strip() for key in keys))
    _check_count(len(keys))
    return _change(
        dataset=dataset,
        actor=actor,
        note=f"removed {len(keys)} item{'s' if len(keys) != 1 else ''}"
        + (f": {', '.join(keys)}" if len(keys) <= 3 else ""),
        action="dataset.items_remove",
        remove=keys,
        ip=ip,
    )


def run_item_key(run) -> str:
    """The key of an item made from ``run``: adding the same run again replaces it."""
    return f"run-{run.pk}"


def item_from_run(*, dataset: Dataset, actor, run, expected: Any = ..., ip: str | None = None) -> DatasetVersion:
    """Add a run as an item (a new version): its input, its output as the expected output
    unless ``expected`` is given (None: no expected output), and where it came from."""
    if run.project_id != dataset.project_id:
        raise NotFound("run not found")
    if run.input is None:
        raise InvalidRequest("this run has no input to add to a dataset")
    metadata = {
        "run_id": run.pk,
        "trace_id": run.trace_id,
        "agent": run.agent_name,
        "agent_version": run.agent_version,
        "status": run.status,
    }
    if run.models_used:
        metadata["models"] = list(run.models_used)
    raw = {
        "key": run_item_key(run),
        "input": run.input,
        "expected": run.output if expected is ... else expected,
        "metadata": {name: value for name, value in metadata.items() if value not in ("", None)},
    }
    problems: list[str] = []
    item = _check_item(raw, where=f"run {run.pk}", problems=problems, strict=True)
    if item is None:
        raise _problems_error(problems, what="the run was not added")
    item = NewItem(**{**item.__dict__, "source_run_id": run.pk})
    label = run.name or run.trace_id
    return _change(
        dataset=dataset,
        actor=actor,
        note=f"added run {run.pk}" + (f" ({label[:100]})" if label else ""),
        action="dataset.item_from_run",
        add=[item],
        audit_data={"run_id": run.pk},
        ip=ip,
    )
