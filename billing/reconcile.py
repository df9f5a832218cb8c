"""Reconciliation: compare the platform's token totals per model and day with a model
provider's usage export (a CSV file) and list the differences.

The CSV needs a header row naming four columns, in any order; other columns are
ignored. Header names are matched without regard to case, spaces or dashes:

- day: ``date``, ``day``, ``usage_date``, ``start_date``
- model: ``model``, ``model_name``, ``model_id``
- input tokens: ``input_tokens``, ``prompt_tokens``, ``input``, ``tokens_in``
- output tokens: ``output_tokens``, ``completion_tokens``, ``output``, ``tokens_out``

Days are ``YYYY-MM-DD`` or an ISO 8601 date-time (its UTC day counts); token counts are
whole numbers (``1,234`` and ``1 234`` are read as 1234). Several rows of one day and
model are added up. Models are compared without regard to case.
"""

from __future__ import annotations

import csv
import io
from dataclasses import dataclass
from datetime import UTC, date, datetime

from django.db.models import Sum
from django.db.models.functions import Coalesce, Lower

from agentops.errors import InvalidRequest
from billing.models import UsageDaily

HEADERS = {
    "day": ("date", "day", "usage_date", "start_date"),
    "model": ("model", "model_name", "model_id"),
    "input_tokens": ("input_tokens", "prompt_tokens", "input", "tokens_in"),
    "output_tokens": ("output_tokens", "completion_tokens", "output", "tokens_out"),
}
MAX_BYTES = 10 * 1024 * 1024
MAX_ERRORS = 20


class ReconcileError(InvalidRequest):
    """The file cannot be read; ``details`` lists the bad rows by line number."""


@dataclass(frozen=True)
class ProviderUsage:
    day: date
    model: str
    input_tokens: int
    output_tokens: int


def _header_key(name: str) -> str:
    return name.strip().lower().replace(" ", "_").replace("-", "_")


def _day(text: str) -> date:
    text = text.strip()
    try:
        return date.fromisoformat(text)
    except ValueError:
        parsed = datetime.fromisoformat(text.replace("Z", "+00:00"))
        return (parsed.astimezone(UTC) if parsed.tzinfo else parsed).date()


def _count(text: str) -> int:
    cleaned = text.strip().replace(",", "").replace(" ", "").replace("_", "")
    value = int(cleaned or "0")
    if value < 0:
        raise ValueError("negative")
    return value


def parse_usage_csv(content: bytes | str) -> list[ProviderUsage]:
    """The rows of a provider's usage export, one per day and model (summed). Raises
    ``ReconcileError`` naming the missing columns or the bad rows by line number."""
    if isinstance(content, bytes):
        if len(content) > MAX_BYTES:
            raise ReconcileError(f"The file is larger than {MAX_BYTES // (1024 * 1024)} MB.")
        try:
            content = content.decode("utf-8-sig")
        except UnicodeDecodeError:
            raise ReconcileError("The file is not UTF-8 text.") from None
    reader = csv.reader(io.StringIO(content))
    header = next(reader, None)
    if not header:
        raise ReconcileError("The file is empty: it needs a header row and data rows.")
    keys = [_header_key(name) for name in header]
    columns: dict[str, int] = {}
    for field, names in HEADERS.items():
        for name in names:
            if name in keys:
                columns[field] = keys.index(name)
                break
    missing = [HEADERS[field][0] for field in HEADERS if field not in columns]
    if missing:
        raise ReconcileError(
            f"Line 1: the header has no {', '.join(missing)} column "
            f"(accepted names: {'; '.join(', '.join(names) for names in HEADERS.values())})."
        )
    totals: dict[tuple[date, str], list[int]] = {}
    errors: list[str] = []
    for row in reader:
        line = reader.line_num
        if not any(cell.strip() for cell in row):
            continue
        try:
            cells = {field: row[position] for field, position in columns.items()}
        except IndexError:
            errors.append(f"Line {line}: {len(row)} columns, the header has {len(header)}.")
            continue
        problems = []
        try:
            day = _day(cells["day"])
        except ValueError:
            problems.append(f"date {cells['day']!r} is not YYYY-MM-DD")
        model = cells["model"].strip()
        if not model:
            problems.append("model is empty")
        counts = []
        for field in ("input_tokens", "output_tokens"):
            try:
                counts.append(_count(cells[field]))
            except ValueError:
                problems.append(f"{field} {cells[field]!r} is not a whole number of tokens")
        if problems:
            errors.append(f"Line {line}: {'; '.join(problems)}.")
            continue
        entry = totals.setdefault((day, model.lower()), [0, 0])
        entry[0] += counts[0]
        entry[1] += counts[1]
    if errors:
        shown = errors[:MAX_ERRORS]
        more = len(errors) - len(shown)
        raise ReconcileError(
            f"{len(errors)} row{'s' if len(errors) != 1 else ''} could not be read"
            + (f" (the first {len(shown)} are listed)" if more else "")
            + ".",
            details=shown,
        )
    if not totals:
        raise ReconcileError("The file has a header but no data rows.")
    return [
        ProviderUsage(day=day, model=model, input_tokens=counts[0], output_tokens=counts[1])
        for (day, model), counts in sorted(totals.items())
    ]


def reconcile(*, organization, rows: list[ProviderUsage]) -> dict:
    """Compare ``rows`` with the ledger of ``organization`` per day and model over the
    days the file covers. Returns ``{"differences": [...], "matching": n, "start",
    "end"}``; a difference is ``platform - provider``."""
    start, end = min(row.day for row in rows), max(row.day for row in rows)
    platform = {
        (entry["day"], entry["model_key"]): entry
        for entry in UsageDaily.objects.filter(organization=organization, day__gte=start, day__lte=end)
        .exclude(model="")
        .annotate(model_key=Lower("model"))
        .values("day", "model_key")
        .annotate(input_tokens=Coalesce(Sum("input_tokens"), 0), output_tokens=Coalesce(Sum("output_tokens"), 0))
        .order_by()
    }
    provider = {(row.day, row.model): row for row in rows}
    differences, matching = [], 0
    for key in sorted(set(platform) | set(provider)):
        ours, theirs = platform.get(key), provider.get(key)
        ours_in, ours_out = (ours["input_tokens"], ours["output_tokens"]) if ours else (0, 0)
        theirs_in, theirs_out = (theirs.input_tokens, theirs.output_tokens) if theirs else (0, 0)
        if (ours_in, ours_out) == (theirs_in, theirs_out):
            matching += 1
            continue
        differences.append(
            {
                "day": key[0],
                "model": key[1],
                "platform_input_tokens": ours_in,
                "provider_input_tokens": theirs_in,
                "input_difference": ours_in - theirs_in,
                "platform_output_tokens": ours_out,
                "provider_output_tokens": theirs_out,
                "output_difference": ours_out - theirs_out,
                "only_in": "platform" if theirs is None else "provider" if ours is None else "",
            }
        )
    return {"differences": differences, "matching": matching, "start": start, "end": end}
