"""The three ways ingest() writes item rows store the same values: a few rows as one
INSERT from a jsonb parameter per table (JSON has no NaN or Infinity: floats that are not
finite must still come out as sent), many rows of runs the batch creates by COPY into their tables, many rows of runs
that exist by COPY into a temporary table and INSERT ... ON CONFLICT. Both COPYs of the
item tables go in PostgreSQL's binary format (runs.ingest.sql), where every value is
dumped by its column's type: times (naive ones too), amounts, floats, NULLs, text PostgreSQL refuses
(NUL, unpaired surrogates) and JSON that jsonb refuses (NaN, big integers) must come out
as the INSERT stores them."""

from datetime import UTC, datetime, timedelta
from decimal import Decimal

from agentops.scoping import organization_scope
from runs.events import MemoryEvent, MessageEvent, StepEvent, ToolCallEvent
from runs.ingest import ingest
from runs.ingest.sql import SMALL_UPSERT_ROWS
from runs.models import MemorySnapshot, Message, Step, ToolCall

T0 = datetime(2026, 11, 29, 9, 30, 15, 123456, tzinfo=UTC)
ODD_TEXT = "tab\there, new\nline, back\\slash, NUL \x00, é, 😀, lone \ud800"
ODD_JSON = {
    "nan": float("nan"),
    "inf": float("-inf"),
    "big": 2**70,
    "text": ODD_TEXT,
    "nested": [{"a": [1, 2.5, None, True]}, "\u2028"],
    1: "a key that is not text",
}
ITEMS = 30  # steps; with their messages, tool calls and snapshots, well above SMALL_UPSERT_ROWS


def _events(trace_id: str, index: int) -> dict:
    span = f"span-{index:02d}"
    started = T0 + timedelta(milliseconds=index * 7.5)
    kind = ("llm", "tool", "agent", "memory")[index % 4]
    step = StepEvent(
        trace_id=trace_id,
        span_id=span,
        parent_span_id="" if index == 0 else "span-00",
        kind=kind,
        name=f"{kind} {index} {ODD_TEXT}",
        started_at=started,
        ended_at=None if index % 5 == 0 else started + timedelta(microseconds=1_234_567),
        status=("ok", "error", "unset")[index % 3],
        error=ODD_TEXT if index % 3 == 1 else "",
        model="mistral-large-2512" if kind == "llm" else "",
        provider="mistral" if kind == "llm" else "",
        input_tokens=index * 1000,
        output_tokens=index * 17,
        cached_input_tokens=index,
        modality_tokens={"input": {"image": index}} if index % 2 else {},
        reported_cost=Decimal("0.000000001") * index if index % 4 == 0 else None,
        reported_cost_currency="USD" if index % 4 == 0 else "",
        input=ODD_JSON if index % 2 else ODD_TEXT,
        output=None if index % 3 == 0 else {"answer": index, "float": 1 / 3},
        attributes={"resource": {"service.name": "copy"}, "i": index, "odd": ODD_JSON},
        events=[{"name": "exception", "time": started.isoformat(), "attributes": {"odd": ODD_TEXT}}],
    )
    return {
        "steps": [step],
        "messages": [
            MessageEvent(
                trace_id=trace_id,
                message_id=f"{span}:in",
                position=index,
                role="user",
                content=ODD_JSON if index % 2 else ODD_TEXT,
                span_id=span,
                tool_calls=[{"id": "c", "arguments": ODD_TEXT}],
                tokens=None if index % 2 else index,
            )
        ],
        "tool_calls": [
            ToolCallEvent(
                trace_id=trace_id,
                call_id=f"call-{index}",
                tool_name=f"tool {ODD_TEXT}",
                span_id=span,
                arguments=ODD_JSON,
                result=None if index % 2 else ODD_TEXT,
                error=ODD_TEXT,
                latency_ms=None if index % 3 == 0 else float("inf") if index % 7 == 1 else index * 0.1,
                started_at=started,
            )
        ],
        "snapshots": [
            MemoryEvent(
                trace_id=trace_id,
                snapshot_id=f"snap-{index}",
                sequence=index,
                state=ODD_JSON,
                span_id=span,
                taken_at=started.replace(tzinfo=None) if index % 2 else started,  # naive: UTC
            )
        ],
    }


def _batch(trace_id: str, indexes) -> dict:
    batch: dict = {"steps": [], "messages": [], "tool_calls": [], "snapshots": []}
    for index in indexes:
        for name, events in _events(trace_id, index).items():
            batch[name] += events
    return batch


def _stored(trace_id: str) -> dict:
    """Every stored value of the run's items but ids, links and write times, by key."""
    tables = {
        Step: "span_id",
        Message: "message_id",
        ToolCall: "call_id",
        MemorySnapshot: "snapshot_id",
    }
    stored = {}
    for model, key in tables.items():
        fields = [
            f.attname
            for f in model._meta.concrete_fields
            if f.attname not in ("id", "run_id", "step_id", "price_id", "created_at")
        ]
        stored[model.__name__] = list(model.objects.filter(run__trace_id=trace_id).order_by(key).values(*fields))
    return stored


def test_copy_into_new_runs_into_existing_runs_and_insert_store_the_same_values(tenant):
    project = tenant.project
    assert ITEMS > SMALL_UPSERT_ROWS
    with organization_scope(project.organization):
        # A run the batch creates: COPY straight into the tables.
        ingest(project=project, announce=False, **_batch("copied-new", range(ITEMS)))
        # A run that exists: its first item by INSERT, then COPY into a temporary table.
        ingest(project=project, announce=False, **_batch("copied-existing", [0]))
        ingest(project=project, announce=False, **_batch("copied-existing", range(ITEMS)))
        # Small batches: every row by INSERT ... SELECT from jsonb.
        for first in range(0, ITEMS, 3):
            ingest(project=project, announce=False, **_batch("inserted", range(first, min(first + 3, ITEMS))))
        inserted = _stored("inserted")
        assert [len(rows) for rows in inserted.values()] == [ITEMS] * 4
        assert inserted["Step"][1]["name"].startswith("tool 1 tab\there")  # text as sent, cleaned
        assert [call["latency_ms"] for call in inserted["ToolCall"][:2]] == [None, float("inf")]
        assert _stored("copied-new") == inserted
        assert _stored("copied-existing") == inserted
        # The steps link to their items whichever way they came.
        for trace_id in ("copied-new", "copied-existing", "inserted"):
            assert not Message.objects.filter(run__trace_id=trace_id, step__isnull=True).exists()


def test_a_row_without_some_fields_is_written_with_their_defaults_and_cleaned_alike(tenant):
    """The row builders give every field (read at once); a row lacking some takes their
    defaults, and its values are made storable the same way either way."""
    from runs.ingest.sql import _row_writer, upsert_sql

    with organization_scope(tenant.project.organization):
        sql = upsert_sql(ToolCall, ("run", "call_id"), ())
    values_of = _row_writer(sql)
    defaults = {f.attname: f.get_default() for f in sql.fields}
    partial = {
        "organization_id": 1,
        "project_id": 2,
        "run_id": 3,
        "span_id": "s",
        "call_id": "c",
        "tool_name": "look\x00up",
        "arguments": {"q": ODD_TEXT},
        "started_at": T0.replace(tzinfo=None),
        "created_at": T0,
    }
    whole = {**defaults, **partial}
    assert set(partial) < set(whole) == {f.attname for f in sql.fields}
    written = values_of(partial)
    assert written == values_of(whole)
    by_name = dict(zip((f.attname for f in sql.fields), written, strict=True))
    assert by_name["tool_name"] == "lookup"  # NUL removed
    assert by_name["step_id"] is None and by_name["error"] == defaults["error"]
    assert by_name["started_at"] == T0  # a naive time is UTC
    assert by_name["arguments"].startswith(b"\x01{")  # jsonb's version byte, then the JSON


def test_a_rows_text_columns_are_kept_when_all_are_plain_and_cleaned_each_when_one_is_not(tenant):
    """The text columns of a row are seen at once (ASCII without NUL: kept as they are);
    a row with any other value among them (NUL, non-ASCII, a number, None) has each text
    column made storable on its own, the plain ones unchanged."""
    from runs.ingest.sql import _row_writer, upsert_sql

    with organization_scope(tenant.project.organization):
        sql = upsert_sql(Message, ("run", "message_id"), ())
    values_of = _row_writer(sql)
    base = {f.attname: f.get_default() for f in sql.fields} | {
        "organization_id": 1,
        "project_id": 2,
        "run_id": 3,
        "span_id": "s",
        "message_id": "m",
        "position": 1,
        "role": "user",
        "name": "plain",
        "created_at": T0,
    }

    def texts(**changes) -> dict:
        written = dict(zip((f.attname for f in sql.fields), values_of(base | changes), strict=True))
        return {name: written[name] for name in ("span_id", "message_id", "role", "name", "tool_call_id")}

    plain = texts()
    assert plain == {"span_id": "s", "message_id": "m", "role": "user", "name": "plain", "tool_call_id": ""}
    assert texts(name="ab\x00c") == plain | {"name": "abc"}
    assert texts(name="café 😀") == plain | {"name": "café 😀"}
    assert texts(name="lone \ud800") == plain | {"name": "lone ?"}
    assert texts(tool_call_id=42) == plain | {"tool_call_id": "42"}  # a number: its text
    assert texts(tool_call_id=None) == plain | {"tool_call_id": None}


def test_the_new_steps_ids_are_the_tables_own_and_their_items_name_their_step(tenant):
    """A new run's steps are copied with ids drawn from their table's sequence (so that
    their items carry them): each item names the step of its span, and rows written
    after (the ORM's, another batch's) take the next ids, never one already used."""
    project = tenant.project
    with organization_scope(project.organization):
        ingest(project=project, announce=False, **_batch("first", range(ITEMS)))
        first_ids = set(Step.objects.filter(run__trace_id="first").values_list("id", flat=True))
        ingest(project=project, announce=False, **_batch("second", range(ITEMS)))
        run = Step.objects.get(run__trace_id="second", span_id="span-00").run
        added = Step.objects.create(
            organization_id=project.organization_id, project=project, run=run, span_id="added", name="added"
        )
        second_ids = set(Step.objects.filter(run__trace_id="second").values_list("id", flat=True))
        assert len(first_ids) == ITEMS and len(second_ids) == ITEMS + 1
        assert max(first_ids) < min(second_ids) and added.pk == max(second_ids)
        for model in (Message, ToolCall, MemorySnapshot):
            items = list(model.objects.filter(project=project).select_related("step"))
            assert len(items) == 2 * ITEMS
            assert all(item.step is not None and item.step.span_id == item.span_id for item in items)
            assert all(item.step.run_id == item.run_id for item in items)
