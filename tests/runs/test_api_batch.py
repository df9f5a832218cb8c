"""POST /api/v1/ingest: the JSON batch API (per-event statuses, idempotency, hostile
input, tenant isolation, authentication, database outages)."""

from __future__ import annotations

import json
from decimal import Decimal

import pytest
from django.db import InterfaceError, OperationalError, connection

from agentops.scoping import organization_scope
from runs.api import batch
from runs.events import RunEvent
from runs.ingest import ingest
from runs.models import MemorySnapshot, Message, Run, Step, ToolCall

URL = "/api/v1/ingest"
T = "2026-11-20T12:00:{:02d}Z"


@pytest.fixture
def ingest_client(tenant, key_client):
    return key_client(tenant.project, ["ingest"])


@pytest.fixture
def read_client(tenant, key_client):
    return key_client(tenant.project, ["read"])


def send(client, events, **extra):
    return client.post(URL, {"events": events}, format="json", **extra)


def send_raw(client, body: bytes):
    return client.post(URL, data=body, content_type="application/json")


def row_counts(tenant) -> dict[str, int]:
    with organization_scope(tenant.organization):
        return {
            model.__name__: model.objects.filter(project=tenant.project).count()
            for model in (Run, Step, Message, ToolCall, MemorySnapshot)
        }


def statuses(response) -> list[tuple[int, str]]:
    return [(result["status"], result["code"]) for result in response.json()["results"]]


def stored_run(tenant, trace_id) -> Run:
    with organization_scope(tenant.organization):
        return Run.objects.get(project=tenant.project, trace_id=trace_id)


def mixed_batch() -> list[dict]:
    """A realistic agent run, deliberately out of order: a step before its run, the root
    step last, messages before the LLM step they belong to, a sub-agent run before its parent."""
    return [
        {
            "type": "step",
            "id": "llm-1",
            "run_id": "run-1",
            "parent_id": "agent-1",
            "kind": "llm",
            "name": "chat",
            "model": "mistral-large-2512",
            "provider": "mistral",
            "input_tokens": 1000,
            "output_tokens": 500,
            "started_at": T.format(1),
            "ended_at": T.format(3),
            "status": "ok",
            "attributes": {"gen_ai.request.temperature": 0.2},
        },
        {"type": "run", "id": "sub-1", "name": "researcher", "parent_run_id": "run-1", "started_at": T.format(2)},
        {
            "type": "message",
            "id": "m-2",
            "run_id": "run-1",
            "step_id": "llm-1",
            "position": 2,
            "role": "assistant",
            "content": "Let me look that up.",
            "tool_calls": [{"id": "call-1", "type": "function", "function": {"name": "search"}}],
            "finish_reason": "tool_calls",
            "tokens": 12,
        },
        {
            "type": "message",
            "id": "m-1",
            "run_id": "run-1",
            "step_id": "llm-1",
            "position": 1,
            "role": "user",
            "content": "Where is my refund?",
        },
        {
            "type": "run",
            "id": "run-1",
            "name": "support conversation",
            "agent_name": "support",
            "agent_version": "1.4.0",
            "status": "succeeded",
            "input": {"question": "Where is my refund?"},
            "output": {"answer": "It was sent yesterday."},
            "started_at": T.format(0),
            "ended_at": T.format(10),
            "session_id": "session-9",
            "end_user_id": "user-42",
            "environment": "production",
            "release": "2026.11.1",
            "tags": ["vip", "refunds"],
            "metadata": {"channel": "chat"},
        },
        {
            "type": "tool_call",
            "id": "call-1",
            "run_id": "run-1",
            "step_id": "tool-1",
            "tool_name": "search",
            "arguments": {"query": "refund 1234"},
            "result": {"status": "sent"},
            "latency_ms": 850.5,
            "started_at": T.format(4),
        },
        {
            "type": "memory",
            "id": "mem-2",
            "run_id": "run-1",
            "step_id": "tool-1",
            "sequence": 2,
            "state": {"refund": "sent"},
            "taken_at": T.format(5),
        },
        {"type": "memory", "id": "mem-1", "run_id": "run-1", "sequence": 1, "state": {"refund": None}},
        {
            "type": "step",
            "id": "tool-1",
            "run_id": "run-1",
            "parent_id": "agent-1",
            "kind": "tool",
            "name": "search",
            "started_at": T.format(4),
            "ended_at": T.format(5),
            "status": "ok",
        },
        {
            "type": "step",
            "id": "agent-1",
            "run_id": "run-1",
            "kind": "agent",
            "name": "support agent",
            "started_at": T.format(0),
            "ended_at": T.format(10),
            "status": "ok",
        },
    ]


# --- Storing and reading ----------------------------------------------------------


def test_mixed_batch_in_any_order_is_stored_and_readable_through_the_api(tenant, ingest_client, read_client):
    response = send(ingest_client, mixed_batch())

    assert response.status_code == 207, response.content
    results = response.json()["results"]
    assert [r["index"] for r in results] == list(range(10))
    assert [(r["type"], r["id"]) for r in results][:2] == [("step", "llm-1"), ("run", "sub-1")]
    assert statuses(response) == [(201, "created")] * 10
    assert all(r["error"] is None for r in results)

    base = f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}"
    run_id = stored_run(tenant, "run-1").pk
    run = read_client.get(f"{base}/runs/{run_id}/").json()
    assert run["name"] == "support conversation"
    assert (run["agent_name"], run["agent_version"], run["status"]) == ("support", "1.4.0", "succeeded")
    assert (run["session_id"], run["end_user_id"], run["environment"], run["release"]) == (
        "session-9",
        "user-42",
        "production",
        "2026.11.1",
    )
    assert run["tags"] == ["vip", "refunds"] and run["metadata"] == {"channel": "chat"}
    assert run["input"] == {"question": "Where is my refund?"}
    assert (run["step_count"], run["input_tokens"], run["output_tokens"]) == (3, 1000, 500)
    assert run["total_cost"] == "0.001250000"  # mistral-large: 0.50 in + 1.50 out per million
    assert run["latency_ms"] == 10_000

    sub = stored_run(tenant, "sub-1")
    assert (sub.parent_trace_id, sub.parent_run_id) == ("run-1", run_id)

    steps = read_client.get(f"{base}/runs/{run_id}/steps/").json()
    assert [(s["span_id"], s["parent_id"], s["depth"]) for s in steps] == [
        ("agent-1", "", 0),
        ("llm-1", "agent-1", 1),
        ("tool-1", "agent-1", 1),
    ]
    assert steps[1]["attributes"] == {"gen_ai.request.temperature": 0.2}

    messages = read_client.get(f"{base}/runs/{run_id}/messages/").json()
    assert [(m["message_id"], m["role"], m["position"]) for m in messages] == [
        ("m-1", "user", 1),
        ("m-2", "assistant", 2),
    ]
    assert messages[1]["step_id"] == steps[1]["id"]  # linked although the messages came first
    assert messages[1]["tool_calls"][0]["id"] == "call-1" and messages[1]["finish_reason"] == "tool_calls"

    calls = read_client.get(f"{base}/runs/{run_id}/tool-calls/").json()
    assert [(c["call_id"], c["latency_ms"], c["step_id"]) for c in calls] == [("call-1", 850.5, steps[2]["id"])]

    memory = read_client.get(f"{base}/runs/{run_id}/memory/").json()
    assert [(m["snapshot_id"], m["state"]) for m in memory] == [
        ("mem-1", {"refund": None}),
        ("mem-2", {"refund": "sent"}),
    ]


def test_resending_a_batch_three_times_adds_no_rows_and_reports_updated(tenant, ingest_client):
    first = send(ingest_client, mixed_batch())
    assert statuses(first) == [(201, "created")] * 10
    before = row_counts(tenant)
    assert before == {"Run": 2, "Step": 3, "Message": 2, "ToolCall": 1, "MemorySnapshot": 2}

    for _ in range(3):
        again = send(ingest_client, mixed_batch())
        assert again.status_code == 207
        assert statuses(again) == [(200, "updated")] * 10

    assert row_counts(tenant) == before
    # Totals are recomputed from the steps, so a re-send does not double them.
    assert stored_run(tenant, "run-1").total_cost == Decimal("0.001250000")


def test_resent_run_changes_only_the_fields_it_names(tenant, ingest_client):
    send(ingest_client, [{"type": "run", "id": "r", "name": "first", "status": "running", "tags": ["a"]}])
    response = send(ingest_client, [{"type": "run", "id": "r", "status": "failed", "error": "timeout"}])
    assert statuses(response) == [(200, "updated")]
    run = stored_run(tenant, "r")
    assert (run.name, run.status, run.error, run.tags) == ("first", "failed", "timeout", ["a"])


def test_run_sent_after_its_steps_is_reported_updated_and_keeps_its_steps(tenant, ingest_client):
    send(ingest_client, [{"type": "step", "id": "s", "run_id": "late", "kind": "agent", "status": "ok"}])
    response = send(ingest_client, [{"type": "run", "id": "late", "name": "arrived last"}])
    # The step already created the run's row: the run's id existed.
    assert statuses(response) == [(200, "updated")]
    run = stored_run(tenant, "late")
    assert (run.name, run.step_count) == ("arrived last", 1)


# --- Per-event statuses ----------------------------------------------------------


def test_each_event_gets_its_own_status_and_good_neighbours_are_stored(tenant, ingest_client):
    too_big = "x" * (batch.MAX_EVENT_BYTES + 1)
    deep: object = "bottom"
    for _ in range(70):
        deep = {"next": deep}
    events = [
        {"type": "run", "id": "good-run", "name": "kept"},  # 0
        {"type": "step", "id": "no-run"},  # 1
        {"type": "step", "id": "bad-time", "run_id": "good-run", "started_at": "yesterday"},  # 2
        {"type": "span", "id": "unknown"},  # 3
        {"type": "message", "id": "m", "run_id": "good-run", "position": 0, "role": "user", "content": "old"},  # 4
        {"type": "step", "id": "huge", "run_id": "good-run", "input": too_big},  # 5
        {"type": "message", "id": "m", "run_id": "good-run", "position": 1, "role": "user", "content": "new"},  # 6
        {"type": "step", "id": "good-step", "run_id": "good-run", "kind": "tool"},  # 7
        {"type": "tool_call", "id": "c", "run_id": "good-run", "tool_name": "t", "latency_ms": "fast"},  # 8
        "not an object",  # 9
        {"type": "step", "id": "nul", "run_id": "good-run", "name": "a\u0000b"},  # 10
        {"type": "memory", "id": "deep", "run_id": "good-run", "sequence": 1, "state": deep},  # 11
        {"type": "run", "id": "bad-tags", "tags": ["ok", 5]},  # 12
        {"type": "step", "id": "bad-run-id", "run_id": 7},  # 13
        {"type": "message", "id": "m", "run_id": "other-run", "position": 0, "role": "user"},  # 14: another run's "m"
    ]
    response = send(ingest_client, events)

    assert response.status_code == 207
    assert statuses(response) == [
        (201, "created"),
        (400, "invalid"),
        (400, "invalid"),
        (400, "invalid"),
        (200, "superseded"),
        (413, "too_large"),
        (201, "created"),
        (201, "created"),
        (400, "invalid"),
        (400, "invalid"),
        (400, "invalid"),
        (400, "invalid"),
        (400, "invalid"),
        (400, "invalid"),
        (201, "created"),
    ]
    messages = {r["index"]: r["error"]["message"] for r in response.json()["results"] if r["error"]}
    assert messages[1] == "run_id: This field is required."
    assert messages[2].startswith("started_at: Datetime has wrong format.")
    assert messages[3] == "type: must be one of run, step, message, tool_call, memory; got 'span'"
    assert (
        messages[5]
        == f"event: {len(json.dumps(events[5], separators=(',', ':')))} bytes of JSON, over the limit of 262144"
    )
    assert messages[8] == "latency_ms: A valid number is required."
    assert messages[9] == "event: must be a JSON object, not a string"
    assert messages[10] == "name: contains a NUL character, which cannot be stored"
    assert messages[11] == "state" + ".next" * 63 + ": nested deeper than 64 levels"
    assert messages[12] == "tags[1]: Not a valid string."
    assert messages[13] == "run_id: Not a valid string."
    assert response.json()["results"][9]["id"] is None
    assert response.json()["results"][4]["error"] is None

    with organization_scope(tenant.organization):
        assert sorted(Run.objects.values_list("trace_id", flat=True)) == ["good-run", "other-run"]
        assert list(Step.objects.values_list("span_id", flat=True)) == ["good-step"]
        assert list(Message.objects.filter(run__trace_id="good-run").values_list("content", flat=True)) == ["new"]
        assert not ToolCall.objects.exists() and not MemorySnapshot.objects.exists()


def test_event_just_under_the_size_limit_is_accepted(ingest_client):
    event = {"type": "step", "id": "s", "run_id": "r", "input": ""}
    padding = batch.MAX_EVENT_BYTES - len(json.dumps(event, separators=(",", ":")))
    event["input"] = "é" * (padding // 2)  # two bytes each in UTF-8
    response = send(ingest_client, [event])
    assert statuses(response) == [(201, "created")]


@pytest.mark.parametrize(
    ("event", "message"),
    [
        ({"type": "run", "id": 12}, "id: Not a valid string."),
        ({"type": "run", "id": ""}, "id: This field may not be blank."),
        ({"type": "run"}, "id: This field is required."),
        ({"type": "run", "id": "r", "status": "done"}, 'status: "done" is not a valid choice.'),
        ({"type": "run", "id": "r", "status": None}, "status: This field may not be null."),
        (
            {"type": "run", "id": "r", "metadata": ["a"]},
            'metadata: Expected a dictionary of items but got type "list".',
        ),
        ({"type": "run", "id": "r", "tags": "vip"}, 'tags: Expected a list of items but got type "str".'),
        ({"type": "run", "id": "r", "name": 5}, "name: Not a valid string."),
        ({"type": "run", "id": "x" * 129}, "id: Ensure this field has no more than 128 characters."),
        ({"type": "run", "id": "r", "parent_run_id": "r"}, "parent_run_id: a run cannot be its own parent"),
        ({"type": "run", "id": "r", "started_at": 1763640000}, "started_at: Datetime has wrong format."),
        (
            {"type": "run", "id": "r", "started_at": "9999-12-31T23:59:59-01:00"},
            "started_at: Datetime value out of range",
        ),
        ({"type": "run", "id": "r", "ended_at": "2026-13-45T99:00:00Z"}, "ended_at: Datetime has wrong format."),
        ({"type": "step", "id": "s", "run_id": "r", "kind": ["llm"]}, "kind: "),
        (
            {"type": "step", "id": "s", "run_id": "r", "input_tokens": "12"},
            "input_tokens: A valid integer is required.",
        ),
        (
            {"type": "step", "id": "s", "run_id": "r", "output_tokens": True},
            "output_tokens: A valid integer is required.",
        ),
        ({"type": "step", "id": "s", "run_id": "r", "input_tokens": -1}, "input_tokens: Ensure this value is greater"),
        ({"type": "step", "id": "s", "run_id": "r", "input_tokens": 10**19}, "input_tokens: Ensure this value is less"),
        ({"type": "step", "id": "s", "run_id": "r", "attributes": "x"}, "attributes: Expected a dictionary"),
        ({"type": "message", "id": "m", "run_id": "r", "role": "user"}, "position: This field is required."),
        ({"type": "message", "id": "m", "run_id": "r", "position": 1.5, "role": "u"}, "position: A valid integer"),
        ({"type": "message", "id": "m", "run_id": "r", "position": 1}, "role: This field is required."),
        ({"type": "tool_call", "id": "c", "run_id": "r"}, "tool_name: This field is required."),
        ({"type": "tool_call", "id": "c", "run_id": "r", "tool_name": "t", "latency_ms": -5}, "latency_ms: Ensure"),
        (
            {"type": "memory", "id": "m", "run_id": "r", "sequence": 1, "state": None},
            "state: This field may not be null.",
        ),
        ({"type": "memory", "id": "m", "run_id": "r", "state": {}}, "sequence: This field is required."),
        ({"id": "r"}, "type: must be one of run, step, message, tool_call, memory; got none"),
        ({"type": ["run"], "id": "r"}, "type: must be one of run, step, message, tool_call, memory; got an array"),
        ({"type": "run", "id": "r", "metadata": {"a": [1, {"b": "\u0000"}]}}, "metadata.a[1].b: contains a NUL"),
        ({"type": "run", "id": "r", "metadata": {"k\u0000": 1}}, "metadata: a key contains a NUL character"),
    ],
)
def test_malformed_event_is_400_with_a_message_naming_the_field(tenant, ingest_client, event, message):
    response = send(ingest_client, [event, {"type": "run", "id": "neighbour"}])
    assert response.status_code == 207
    bad, good = response.json()["results"]
    assert (bad["status"], bad["code"], bad["error"]["code"]) == (400, "invalid", "invalid")
    assert bad["error"]["message"].startswith(message), bad["error"]["message"]
    assert (good["status"], good["code"]) == (201, "created")
    assert row_counts(tenant)["Run"] == 1


@pytest.mark.parametrize(
    ("literal", "path"),
    [
        ("NaN", "metadata.score"),
        ("Infinity", "metadata.score"),
        ("-Infinity", "metadata.score"),
        ("1e999", "metadata.score"),
    ],
)
def test_nan_and_infinity_are_400_for_their_event_only(tenant, ingest_client, literal, path):
    body = '{"events": [{"type": "run", "id": "r", "metadata": {"score": LITERAL}}, {"type": "run", "id": "ok"}]}'
    body = body.replace("LITERAL", literal)
    response = send_raw(ingest_client, body.encode())
    assert response.status_code == 207
    assert statuses(response) == [(400, "invalid"), (201, "created")]
    assert response.json()["results"][0]["error"]["message"] == f"{path}: NaN and Infinity are not valid JSON numbers"


def test_unpaired_surrogate_is_400_and_never_echoed_raw(tenant, ingest_client):
    body = b'{"events": [{"type": "run", "id": "bad\\ud800id", "name": "x"}, {"type": "run", "id": "ok"}]}'
    response = send_raw(ingest_client, body)
    assert response.status_code == 207
    first = response.json()["results"][0]
    assert (first["status"], first["id"]) == (400, "bad?id")
    assert first["error"]["message"] == "id: contains an unpaired surrogate (invalid Unicode)"


def test_nul_in_an_id_is_400_and_the_answer_can_be_stored_for_idempotency(tenant, ingest_client):
    response = send(ingest_client, [{"type": "run", "id": "a\u0000b"}], HTTP_IDEMPOTENCY_KEY="nul-id")
    assert statuses(response) == [(400, "invalid")]
    assert response.json()["results"][0]["id"] == "a\ufffdb"
    replay = send(ingest_client, [{"type": "run", "id": "a\u0000b"}], HTTP_IDEMPOTENCY_KEY="nul-id")
    assert replay["Idempotent-Replayed"] == "true"


# --- Whole-request errors --------------------------------------------------------


@pytest.mark.parametrize(
    ("body", "status", "code", "message"),
    [
        (b'{"events": [{"type": "run", "id": "\xff\xfe"}]}', 400, "parse_error", "the body is not valid UTF-8 (byte"),
        (b'{"events": [', 400, "parse_error", "the body is not valid JSON"),
        (b"[" * 100_000 + b"]" * 100_000, 400, "parse_error", "the body is nested deeper than 64 levels"),
        (b'[{"type": "run", "id": "r"}]', 400, "invalid", "the body must be a JSON object"),
        (b'"events"', 400, "invalid", "the body must be a JSON object"),
        (b"{}", 400, "invalid", "events: required"),
        (b'{"events": {"type": "run"}}', 400, "invalid", "events: required, a list"),
        (b'{"events": []}', 400, "invalid", "events: the list is empty"),
        (b"", 400, "parse_error", "the body is empty"),
    ],
)
def test_undecodable_or_misshapen_body_is_400_with_the_platform_error_body(
    tenant, ingest_client, body, status, code, message
):
    response = send_raw(ingest_client, body)
    assert response.status_code == status, response.content
    error = response.json()["error"]
    assert error["code"] == code
    assert error["message"].startswith(message), error["message"]
    assert row_counts(tenant)["Run"] == 0


def test_body_over_the_batch_size_limit_is_413(tenant, ingest_client):
    event = {"type": "step", "id": "s", "run_id": "r", "input": "x" * 200_000}
    events = [dict(event, id=f"s{n}") for n in range(60)]  # about 12 MB
    response = send(ingest_client, events)
    assert response.status_code == 413
    assert response.json()["error"]["code"] == "too_large"
    assert row_counts(tenant)["Step"] == 0


def test_batch_over_the_event_count_limit_is_413(tenant, ingest_client):
    events = [{"type": "run", "id": f"r{n}"} for n in range(batch.MAX_BATCH_EVENTS + 1)]
    response = send(ingest_client, events)
    assert response.status_code == 413
    assert response.json()["error"]["message"].startswith("events: 5001 events, over the limit of 5000")
    assert row_counts(tenant)["Run"] == 0


def chunked_request(raw_key: str, body: bytes):
    """A POST without Content-Length, whose body is readable as under ASGI (uvicorn hands
    a chunked upload over whole)."""
    import io

    from rest_framework.test import APIRequestFactory

    request = APIRequestFactory().post(
        URL, data=b"", content_type="application/json", HTTP_AUTHORIZATION=f"Bearer {raw_key}"
    )
    request.META.pop("CONTENT_LENGTH", None)
    request.META["HTTP_TRANSFER_ENCODING"] = "chunked"
    request._stream = io.BytesIO(body)
    return request


def test_chunked_body_without_content_length_is_read(tenant, make_api_key):
    _key, raw_key = make_api_key(tenant.project, ["ingest"])
    body = json.dumps({"events": [{"type": "run", "id": "chunked", "name": "streamed"}]}).encode()
    response = batch.IngestView.as_view()(chunked_request(raw_key, body))
    assert response.status_code == 207
    assert response.data["results"][0]["code"] == "created"
    assert stored_run(tenant, "chunked").name == "streamed"


def test_chunked_body_over_the_batch_limit_is_413_and_an_empty_one_400(tenant, make_api_key, monkeypatch):
    _key, raw_key = make_api_key(tenant.project, ["ingest"])
    monkeypatch.setattr(batch, "MAX_BATCH_BYTES", 1000)
    too_big = json.dumps({"events": [{"type": "run", "id": "r", "name": "x" * 1000}]}).encode()
    assert batch.IngestView.as_view()(chunked_request(raw_key, too_big)).status_code == 413
    empty = batch.IngestView.as_view()(chunked_request(raw_key, b""))
    assert (empty.status_code, empty.data["error"]["message"]) == (400, "the body is empty")
    assert row_counts(tenant)["Run"] == 0


def test_wrong_content_type_is_415(ingest_client):
    response = ingest_client.post(URL, data="events=1", content_type="application/x-www-form-urlencoded")
    assert response.status_code == 415
    assert response.json()["error"]["code"] == "unsupported_media_type"


# --- Tenancy and authentication ------------------------------------------------------


def test_project_and_organization_in_the_payload_are_refused_and_never_used(tenant, other_tenant, ingest_client):
    with organization_scope(other_tenant.organization):
        ingest(project=other_tenant.project, runs=[RunEvent("shared", {"name": "theirs"})], announce=False)
    foreign = {"project": other_tenant.project.pk, "organization": other_tenant.organization.pk}

    in_the_batch = ingest_client.post(URL, {"events": [{"type": "run", "id": "shared"}], **foreign}, format="json")
    in_an_event = ingest_client.post(
        URL, {"events": [{"type": "run", "id": "shared", "name": "mine", **foreign}]}, format="json"
    )

    assert in_the_batch.status_code == 400
    assert in_the_batch.json()["error"]["message"] == (
        "unknown fields 'organization', 'project': the fields are events"
    )
    assert statuses(in_an_event) == [(400, "invalid")]
    assert in_an_event.json()["results"][0]["error"]["message"].startswith(
        "unknown fields 'organization', 'project': the fields are type, id, name,"
    )
    assert row_counts(tenant)["Run"] == 0
    assert stored_run(other_tenant, "shared").name == "theirs"
    assert row_counts(other_tenant)["Run"] == 1


def test_request_without_an_api_key_is_401(api_client, tenant):
    response = api_client.post(URL, {"events": [{"type": "run", "id": "r"}]}, format="json")
    assert response.status_code == 401
    assert response.json()["error"]["code"] == "not_authenticated"
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'


def test_key_without_the_ingest_scope_is_403(tenant, key_client):
    response = send(key_client(tenant.project, ["read", "execute"]), [{"type": "run", "id": "r"}])
    assert response.status_code == 403
    assert response.json()["error"]["code"] == "permission_denied"
    assert row_counts(tenant)["Run"] == 0


@pytest.mark.parametrize("role", ["owner", "member"])
def test_signed_in_user_is_refused_because_the_batch_api_takes_keys_only(tenant, client_for, role):
    response = send(client_for(tenant.user(role)), [{"type": "run", "id": "r"}])
    assert response.status_code == 403
    assert "API key" in response.json()["error"]["message"]
    assert row_counts(tenant)["Run"] == 0


# --- Database outages and idempotency ------------------------------------------------


@pytest.mark.parametrize("error", [OperationalError, InterfaceError])
def test_database_unavailable_is_503_with_retry_after_and_nothing_stored(tenant, ingest_client, monkeypatch, error):
    def database_down(**kwargs):
        raise error("connection refused")

    monkeypatch.setattr(batch, "ingest", database_down)
    response = send(ingest_client, mixed_batch())
    assert response.status_code == 503
    assert response["Retry-After"] == str(batch.RETRY_AFTER_SECONDS)
    assert response.json()["error"]["code"] == "unavailable"
    assert row_counts(tenant)["Run"] == 0


def test_a_batch_is_stored_while_redis_alone_is_down(tenant, ingest_client, redis_down):
    # Rate limits and live updates need Redis; storing the batch does not.
    response = send(ingest_client, mixed_batch(), HTTP_IDEMPOTENCY_KEY="while-redis-is-down")

    assert response.status_code == 207
    assert statuses(response) == [(201, "created")] * 10
    assert row_counts(tenant)["Run"] > 0 and row_counts(tenant)["Step"] > 0
    # The follow-up work (costs) is marked in PostgreSQL, for beat's ledger refresh: no
    # Celery message was needed, none was lost.
    from billing.models import LedgerBacklog

    with organization_scope(tenant.organization):
        run_ids = set(Run.objects.filter(project=tenant.project).values_list("pk", flat=True))
    assert set(LedgerBacklog.objects.values_list("run_id", flat=True)) == run_ids
    replay = send(ingest_client, mixed_batch(), HTTP_IDEMPOTENCY_KEY="while-redis-is-down")
    assert replay["Idempotent-Replayed"] == "true"


def test_a_batch_is_still_refused_when_postgresql_fails_while_redis_is_down(tenant, ingest_client, redis_down):
    def refuse(execute, sql, params, many, context):
        raise OperationalError("connection refused")

    with connection.execute_wrapper(refuse):
        response = send(ingest_client, mixed_batch())
    assert response.status_code == 503
    assert row_counts(tenant)["Run"] == 0


def test_retry_after_a_503_with_the_same_idempotency_key_stores_the_batch(tenant, ingest_client, monkeypatch):
    real_ingest = batch.ingest

    def database_down(**kwargs):
        raise OperationalError("server closed the connection unexpectedly")

    monkeypatch.setattr(batch, "ingest", database_down)
    assert send(ingest_client, mixed_batch(), HTTP_IDEMPOTENCY_KEY="k-1").status_code == 503
    monkeypatch.setattr(batch, "ingest", real_ingest)
    retry = send(ingest_client, mixed_batch(), HTTP_IDEMPOTENCY_KEY="k-1")
    assert retry.status_code == 207
    assert statuses(retry) == [(201, "created")] * 10


def test_idempotency_key_replays_the_first_answer_without_storing_again(tenant, ingest_client, monkeypatch):
    first = send(ingest_client, mixed_batch(), HTTP_IDEMPOTENCY_KEY="batch-7")
    counts = row_counts(tenant)
    calls = []
    monkeypatch.setattr(batch, "ingest", lambda **kwargs: calls.append(kwargs))

    replay = send(ingest_client, mixed_batch(), HTTP_IDEMPOTENCY_KEY="batch-7")

    assert replay.status_code == 207
    assert replay["Idempotent-Replayed"] == "true"
    assert replay.json() == first.json()  # "created", as the first time
    assert calls == [] and row_counts(tenant) == counts
    other_body = send(ingest_client, [{"type": "run", "id": "different"}], HTTP_IDEMPOTENCY_KEY="batch-7")
    assert other_body.status_code == 422


def test_batch_event_types_are_documented_in_the_openapi_schema(client):
    document = json.loads(client.get("/api/schema/", HTTP_ACCEPT="application/vnd.oai.openapi+json").content)
    operation = document["paths"]["/api/v1/ingest"]["post"]
    assert "207" in operation["responses"]
    schemas = document["components"]["schemas"]
    mapping = schemas["IngestEventRequest"]["discriminator"]["mapping"]
    assert set(mapping) == {"run", "step", "message", "tool_call", "memory"}
    run_fields = set(schemas["RunEventRequest"]["properties"])
    assert {"id", "status", "parent_run_id", "session_id", "tags", "metadata", "started_at"} <= run_fields
    assert {"run_id", "parent_id", "kind", "model", "input_tokens", "cached_input_tokens"} <= set(
        schemas["StepEventRequest"]["properties"]
    )
    assert {"index", "id", "type", "status", "code", "error"} <= set(schemas["IngestResult"]["properties"])


def test_batch_with_huge_token_counts_is_refused_per_event_not_a_5xx(tenant, key_client):
    """The run's total cost is numeric(18, 9): 200 steps claiming 10^12 tokens each
    overflowed it, and the batch answered 500 (every later batch of that run too)."""
    client = key_client(tenant.project, ["ingest"])
    events = [
        {
            "type": "step",
            "id": f"s{i}",
            "run_id": "r",
            "kind": "llm",
            "model": "magistral-medium-2509",
            "input_tokens": 10**12,
            "output_tokens": 10**12,
            "started_at": "2026-11-20T12:00:00Z",
        }
        for i in range(200)
    ]
    response = client.post("/api/v1/ingest", {"events": events}, format="json")
    assert response.status_code == 207
    results = response.json()["results"]
    assert {(r["status"], r["code"]) for r in results} == {(400, "invalid")}
    assert results[0]["error"]["message"].startswith("input_tokens:")


# --- Usage parts and reported cost ---------------------------------------------------------------

# After the catalog's part rates took effect (2026-11-25).
PRICED_AT = "2026-11-26T10:00:00Z"


def test_usage_parts_and_a_reported_cost_are_stored_and_each_token_priced_once(tenant, ingest_client, read_client):
    step = {
        "type": "step",
        "id": "call",
        "run_id": "r",
        "kind": "llm",
        "model": "o3-2025-04-16",
        "started_at": PRICED_AT,
        "ended_at": PRICED_AT,
        "input_tokens": 10_000,
        "cached_input_tokens": 4_000,
        "cache_write_input_tokens": 1_000,
        "output_tokens": 5_000,
        "reasoning_output_tokens": 4_000,
        "modality_tokens": {"input": {"Image": 800}},
        "reported_cost": "0.054",
        "reported_cost_source": "provider",
    }
    response = send(ingest_client, [{"type": "run", "id": "r"}, step])
    assert statuses(response) == [(201, "created"), (201, "created")]
    with organization_scope(tenant.organization):
        stored = Step.objects.get(project=tenant.project, span_id="call")
    # OpenAI's o3 rates: 5,000 uncached and 1,000 written at $2, 4,000 cached at $0.50,
    # 1,000 output and 4,000 reasoning at $8 per million.
    assert stored.cost == Decimal("0.054")
    assert (stored.reported_cost, stored.reported_cost_currency, stored.reported_cost_source) == (
        Decimal("0.054"),
        "USD",
        "provider",
    )
    assert not stored.reported_cost_differs
    assert stored.modality_tokens == {"input": {"image": 800}}
    run = stored_run(tenant, "r")
    detail = read_client.get(f"/api/v1/projects/{tenant.organization.slug}/{tenant.project.slug}/runs/{run.pk}/").json()
    assert (detail["cache_write_input_tokens"], detail["reasoning_output_tokens"]) == (1_000, 4_000)
    assert Decimal(detail["reported_cost"]) == Decimal("0.054") == Decimal(detail["total_cost"])


@pytest.mark.parametrize(
    ("fields", "message"),
    [
        ({"cache_write_input_tokens": -1}, "cache_write_input_tokens: Ensure this value is greater than or equal to 0"),
        ({"reasoning_output_tokens": "12"}, "reasoning_output_tokens: A valid integer is required"),
        ({"modality_tokens": {"input": {"image": -3}}}, "modality_tokens: input.image: -3 is not a token count"),
        ({"modality_tokens": {"sideways": {}}}, "modality_tokens: 'sideways': must be input or output"),
        ({"reported_cost": -0.5}, "reported_cost: cost -0.5 is not an amount"),
        ({"reported_cost": "cheap"}, "reported_cost: cost 'cheap' is not an amount"),
        ({"reported_cost": 1, "reported_cost_currency": "ZZZ"}, "reported_cost: unknown currency 'ZZZ'"),
    ],
)
def test_bad_usage_or_cost_is_invalid_for_its_event_only(tenant, ingest_client, fields, message):
    step = {"type": "step", "id": "s", "run_id": "r", "model": "gpt-4o", **fields}
    response = send(ingest_client, [step, {"type": "run", "id": "r"}])
    assert response.status_code == 207
    bad, good = response.json()["results"]
    assert (bad["status"], bad["code"]) == (400, "invalid")
    assert bad["error"]["message"].startswith(message), bad["error"]["message"]
    assert (good["status"], good["code"]) == (201, "created")
    assert row_counts(tenant)["Step"] == 0
