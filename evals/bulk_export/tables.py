"""The tables a bulk export writes, their Parquet schemas, and how their rows are read.

Each ``Table`` names its columns once: the Parquet column, its Arrow type, and the
database expression it is read from (JSON payloads are cast to their JSON text by
PostgreSQL, so Python never decodes them). docs/exports.md shows the same schemas.

Rows are read in chunks of ``EXPORT_CHUNK_ROWS`` by keyset pagination on the primary
key (``id > last ORDER BY id LIMIT n``): each chunk is its own short query, so no
cursor outlives a chunk, progress can be committed between chunks, and no table is
ever held in memory. Each chunk becomes one Parquet row group. Runs' children (steps,
messages, tool calls) are read for ``EXPORT_CHUNK_ROWS`` runs at a time, and keyset by
id within them, so their rows are in id order within each batch of runs.

The date range is whole UTC days, both ends included. A run is in it when it started
in it (its creation time when it has no start); steps, messages, tool calls and scores
are those of the runs in it (scores of no run: created in it); the ledger's rows are
those of its days.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, date, datetime, time, timedelta

import pyarrow as pa
import pyarrow.parquet as pq
from django.db.models import BigIntegerField, F, Func, Q, QuerySet, TextField
from django.db.models.functions import Cast, Coalesce

from billing.models import ComputeUsage, RunUsage
from evals.models import Score
from runs.models import Message, Run, Step, ToolCall

TIMESTAMP = pa.timestamp("us", tz="UTC")
MONEY = pa.decimal128(18, 9)
STRINGS = pa.list_(pa.string())
EPOCH_MICROSECONDS = "(extract(epoch from %(expressions)s) * 1000000)::bigint"


@dataclass(frozen=True)
class Column:
    name: str
    type: pa.DataType
    # The database expression read: a field path, or an expression (JSON as text).
    source: str | object | None = None
    description: str = ""

    def expression(self):
        if self.source is not None and not isinstance(self.source, str):
            return self.source
        field = F(self.source or self.name)
        if self.type == TIMESTAMP:
            # Microseconds since the epoch, computed by PostgreSQL: Arrow takes the integers
            # as timestamps as they are, where parsing each datetime in Python took ~40% of
            # an export's time (bench/export_parquet.py).
            return Func(field, template=EPOCH_MICROSECONDS, output_field=BigIntegerField())
        return field


def json_text(field: str) -> Cast:
    """A JSON column as its JSON text, cast by PostgreSQL."""
    return Cast(field, output_field=TextField())


@dataclass(frozen=True)
class ExportRange:
    """Whole UTC days from ``start`` to ``end``, both included."""

    start: date
    end: date

    @property
    def start_at(self) -> datetime:
        return datetime.combine(self.start, time.min, tzinfo=UTC)

    @property
    def end_before(self) -> datetime:
        return datetime.combine(self.end + timedelta(days=1), time.min, tzinfo=UTC)


def runs_in_range(project, period: ExportRange) -> QuerySet:
    return (
        Run.objects.filter(project=project)
        .annotate(export_at=Coalesce("started_at", "created_at"))
        .filter(export_at__gte=period.start_at, export_at__lt=period.end_before)
    )


@dataclass(frozen=True)
class Table:
    name: str
    description: str
    columns: tuple[Column, ...]
    rows: Callable[[object, ExportRange], QuerySet] | None = None
    # A table of runs' children (steps, messages, tool calls), read run batch by run batch.
    model: type | None = None

    @property
    def per_run(self) -> bool:
        return self.model is not None

    @property
    def schema(self) -> pa.Schema:
        return pa.schema([pa.field(column.name, column.type) for column in self.columns])

    def chunks(self, project, period: ExportRange, chunk_rows: int) -> Iterator[list[tuple]]:
        """The table's rows in the range, ``chunk_rows`` at a time, in id order."""
        if self.per_run:
            yield from self._chunks_per_run(project, period, chunk_rows)
            return
        yield from _keyset(self._annotated(self.rows(project, period)), self._names, chunk_rows)

    def _chunks_per_run(self, project, period: ExportRange, chunk_rows: int) -> Iterator[list[tuple]]:
        """Rows of runs' children, taken ``chunk_rows`` runs at a time (their ids only):
        each query reads the children of known runs through the run index. Filtering
        the whole table by "run in the range" instead makes PostgreSQL scan it again
        for every chunk, which is quadratic on a large project."""
        runs = runs_in_range(project, period).values_list("pk", flat=True)
        last_run = 0
        while True:
            run_ids = list(runs.filter(pk__gt=last_run).order_by("pk")[:chunk_rows])
            if not run_ids:
                return
            last_run = run_ids[-1]
            children = self._annotated(self.model.objects.filter(project=project, run_id__in=run_ids))
            yield from _keyset(children, self._names, chunk_rows)
            if len(run_ids) < chunk_rows:
                return

    def _annotated(self, queryset: QuerySet) -> QuerySet:
        return queryset.annotate(**{f"export_{column.name}": column.expression() for column in self.columns})

    @property
    def _names(self) -> list[str]:
        return [f"export_{column.name}" for column in self.columns]


def _keyset(queryset: QuerySet, names: list[str], chunk_rows: int) -> Iterator[list[tuple]]:
    """``queryset``'s rows ``chunk_rows`` at a time, by primary key: one short query each."""
    last_id = 0
    while True:
        chunk = list(queryset.filter(pk__gt=last_id).order_by("pk").values_list("pk", *names)[:chunk_rows])
        if not chunk:
            return
        last_id = chunk[-1][0]
        yield [row[1:] for row in chunk]
        if len(chunk) < chunk_rows:
            return


def write_parquet(table: Table, chunks: Iterator[list[tuple]], sink, *, on_chunk: Callable[[int], None]) -> int:
    """Write the chunks to ``sink`` as Parquet, one row group per chunk; returns the row count.
    ``on_chunk(rows so far)`` runs after each chunk (progress, cancellation)."""
    schema = table.schema
    rows = 0
    with pq.ParquetWriter(sink, schema, compression="zstd") as writer:
        for chunk in chunks:
            columns = zip(*chunk, strict=True)
            arrays = [pa.array(values, type=field.type) for values, field in zip(columns, schema, strict=True)]
            writer.write_batch(pa.record_batch(arrays, schema=schema))
            rows += len(chunk)
            on_chunk(rows)
    return rows


def _scores(project, period: ExportRange) -> QuerySet:
    return Score.objects.filter(project=project).filter(
        Q(run__in=runs_in_range(project, period).values("pk"))
        | Q(run__isnull=True, created_at__gte=period.start_at, created_at__lt=period.end_before)
    )


def _by_day(model):
    def rows(project, period: ExportRange) -> QuerySet:
        return model.objects.filter(project=project, day__gte=period.start, day__lte=period.end)

    return rows


TABLES: dict[str, Table] = {
    table.name: table
    for table in (
        Table(
            "runs",
            "One row per run (trace) that started in the range.",
            (
                Column("id", pa.int64()),
                Column("trace_id", pa.string()),
                Column("name", pa.string()),
                Column("agent_name", pa.string()),
                Column("agent_version", pa.string()),
                Column("status", pa.string()),
                Column("error", pa.string()),
                Column("input", pa.string(), json_text("input"), "JSON text"),
                Column("output", pa.string(), json_text("output"), "JSON text"),
                Column("started_at", TIMESTAMP),
                Column("ended_at", TIMESTAMP),
                Column("session_id", pa.string()),
                Column("parent_run_id", pa.int64()),
                Column("end_user_id", pa.string()),
                Column("environment", pa.string()),
                Column("release", pa.string()),
                Column("tags", STRINGS),
                Column("metadata", pa.string(), json_text("metadata"), "JSON text"),
                Column("step_count", pa.int64()),
                Column("error_count", pa.int64()),
                Column("llm_call_count", pa.int64()),
                Column("input_tokens", pa.int64()),
                Column("cached_input_tokens", pa.int64()),
                Column("output_tokens", pa.int64()),
                Column("total_cost", MONEY, None, "USD"),
                Column("models_used", STRINGS),
                Column("latency_ms", pa.int64()),
                Column("created_at", TIMESTAMP),
            ),
            runs_in_range,
        ),
        Table(
            "steps",
            "One row per step (span) of the runs exported.",
            (
                Column("id", pa.int64()),
                Column("run_id", pa.int64()),
                Column("span_id", pa.string()),
                Column("parent_span_id", pa.string()),
                Column("kind", pa.string()),
                Column("name", pa.string()),
                Column("started_at", TIMESTAMP),
                Column("ended_at", TIMESTAMP),
                Column("duration_ms", pa.float64()),
                Column("status", pa.string()),
                Column("error", pa.string()),
                Column("model", pa.string()),
                Column("provider", pa.string()),
                Column("input_tokens", pa.int64()),
                Column("cached_input_tokens", pa.int64()),
                Column("output_tokens", pa.int64()),
                Column("cost", MONEY, None, "USD; empty when not priced"),
                Column("unpriced", pa.bool_()),
                Column("input", pa.string(), json_text("input"), "JSON text"),
                Column("output", pa.string(), json_text("output"), "JSON text"),
                Column("attributes", pa.string(), json_text("attributes"), "JSON text"),
                Column("events", pa.string(), json_text("events"), "JSON text"),
                Column("created_at", TIMESTAMP),
            ),
            model=Step,
        ),
        Table(
            "messages",
            "The transcript of the runs exported, one row per message.",
            (
                Column("id", pa.int64()),
                Column("run_id", pa.int64()),
                Column("step_id", pa.int64()),
                Column("message_id", pa.string()),
                Column("position", pa.int64()),
                Column("role", pa.string()),
                Column("content", pa.string(), json_text("content"), "JSON text"),
                Column("tool_calls", pa.string(), json_text("tool_calls"), "JSON text"),
                Column("tool_call_id", pa.string()),
                Column("name", pa.string()),
                Column("tokens", pa.int64()),
                Column("finish_reason", pa.string()),
                Column("created_at", TIMESTAMP),
            ),
            model=Message,
        ),
        Table(
            "tool_calls",
            "One row per tool call of the runs exported.",
            (
                Column("id", pa.int64()),
                Column("run_id", pa.int64()),
                Column("step_id", pa.int64()),
                Column("call_id", pa.string()),
                Column("tool_name", pa.string()),
                Column("arguments", pa.string(), json_text("arguments"), "JSON text"),
                Column("result", pa.string(), json_text("result"), "JSON text"),
                Column("error", pa.string()),
                Column("latency_ms", pa.float64()),
                Column("started_at", TIMESTAMP),
                Column("created_at", TIMESTAMP),
            ),
            model=ToolCall,
        ),
        Table(
            "scores",
            "Scores of the runs exported (experiment, online, human, reported), and of no run created in the range.",
            (
                Column("id", pa.int64()),
                Column("run_id", pa.int64()),
                Column("experiment_result_id", pa.int64(), "result_id"),
                Column("evaluator_id", pa.int64()),
                Column("name", pa.string()),
                Column("value", pa.float64()),
                Column("passed", pa.bool_()),
                Column("reasoning", pa.string()),
                Column("details", pa.string(), json_text("details"), "JSON text"),
                Column("error", pa.string()),
                Column("source", pa.string()),
                Column("author_id", pa.int64()),
                Column("created_at", TIMESTAMP),
            ),
            _scores,
        ),
        Table(
            "usage",
            "The usage ledger: tokens and cost per run, day, agent, model, API key and end user.",
            (
                Column("id", pa.int64()),
                Column("day", pa.date32()),
                Column("run_id", pa.int64()),
                Column("agent_name", pa.string()),
                Column("model", pa.string()),
                Column("api_key_id", pa.int64()),
                Column("end_user_id", pa.string()),
                Column("input_tokens", pa.int64()),
                Column("cached_input_tokens", pa.int64()),
                Column("output_tokens", pa.int64()),
                Column("cost", MONEY, None, "USD"),
                Column("steps", pa.int64()),
                Column("unpriced_steps", pa.int64()),
            ),
            _by_day(RunUsage),
        ),
        Table(
            "compute_usage",
            "The ledger of GPU jobs: seconds and cost per job, day and hardware.",
            (
                Column("id", pa.int64()),
                Column("day", pa.date32()),
                Column("job_id", pa.int64()),
                Column("hardware", pa.string()),
                Column("backend", pa.string()),
                Column("seconds", pa.decimal128(12, 6)),
                Column("hourly", MONEY, None, "USD per hour"),
                Column("cost", MONEY, None, "USD"),
                Column("created_at", TIMESTAMP),
            ),
            _by_day(ComputeUsage),
        ),
    )
}
TABLE_NAMES = tuple(TABLES)
