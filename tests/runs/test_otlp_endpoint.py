"""The OTLP/HTTP receivers: encodings, compression, the OTLP response codes and bodies,
API key authentication, the project from the key, idempotency, and a database outage."""

from __future__ import annotations

import asyncio
import base64
import gzip
import io
import json
import math
import zlib
from decimal import Decimal

import pytest
from django.db import InterfaceError, OperationalError, connection
from google.protobuf import json_format
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceResponse
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.proto.trace.v1.trace_pb2 import Status

from agentops.scoping import organization_scope
from agentops.services.api_keys import api_key_revoke
from runs.models import MemorySnapshot, Message, Run, Step, ToolCall
from runs.otlp import decode
from tests.runs.otlp_helpers import (
    CHILD,
    ROOT,
    SECOND,
    T0,
    TRACE,
    make_log,
    make_logs_request,
    make_request,
    make_span,
)

URL = "/api/v1/otlp/v1/traces"
LOGS_URL = "/api/v1/otlp/v1/logs"
PROTOBUF = "application/x-protobuf"
JSON = "application/json"
TOOL = bytes.fromhex("eee19b7ec3c1b172")


def agent_trace(trace_id: bytes = TRACE, resource=None):
    """An agent run: the root agent span, a chat call with messages, a tool call that
    leaves a memory snapshot."""
    chat_messages = json.dumps([{"role": "user", "parts": [{"type": "text", "content": "Weather in Paris?"}]}])
    return make_request(
        make_span(
            {"gen_ai.operation.name": "invoke_agent", "gen_ai.agent.name": "weather", "session.id": "s-1"},
            name="invoke_agent weather",
            trace_id=trace_id,
            start=T0,
            end=T0 + 5 * SECOND,
            status=Status.STATUS_CODE_OK,
        ),
        make_span(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "mistral-large-2512",
                "gen_ai.usage.input_tokens": 1_000_000,
                "gen_ai.usage.output_tokens": 1_000_000,
                "gen_ai.input.messages": chat_messages,
            },
            name="chat mistral-large-2512",
            trace_id=trace_id,
            span_id=CHILD,
            parent=ROOT,
            start=T0 + SECOND,
            end=T0 + 3 * SECOND,
        ),
        make_span(
            {
                "gen_ai.operation.name": "execute_tool",
                "gen_ai.tool.name": "get_weather",
                "gen_ai.tool.call.id": "call_1",
                "agentops.memory": '{"city": "Paris"}',
            },
            name="execute_tool get_weather",
            trace_id=trace_id,
            span_id=TOOL,
            parent=ROOT,
            start=T0 + 3 * SECOND,
            end=T0 + 4 * SECOND,
        ),
        resource=resource,
    )


def otlp_json(message) -> bytes:
    """``message`` in OTLP/JSON: the proto3 JSON mapping with hex trace and span ids."""
    document = json_format.MessageToDict(message)

    def hexify(item: dict) -> None:
        for key in ("traceId", "spanId", "parentSpanId"):
            if key in item:
                item[key] = base64.b64decode(item[key]).hex()

    for resource_spans in document.get("resourceSpans", []):
        for scope_spans in resource_spans.get("scopeSpans", []):
            for span in scope_spans.get("spans", []):
                hexify(span)
    for resource_logs in document.get("resourceLogs", []):
        for scope_logs in resource_logs.get("scopeLogs", []):
            for record in scope_logs.get("logRecords", []):
                hexify(record)
    return json.dumps(document).encode()


@pytest.fixture
def key(tenant, make_api_key) -> str:
    """A key of the tenant's project that may only ingest."""
    return make_api_key(tenant.project, ["ingest"])[1]


def post(client, body: bytes, key: str | None, *, content_type=PROTOBUF, encoding=None, url=URL):
    headers = {}
    if key is not None:
        headers["Authorization"] = f"Bearer {key}"
    if encoding is not None:
        headers["Content-Encoding"] = encoding
    return client.post(url, data=body, content_type=content_type, headers=headers)


def rpc_status(response) -> status_pb2.Status:
    """The google.rpc.Status of an error answer, in the answer's content type."""
    if response["Content-Type"] == JSON:
        return json_format.Parse(response.content, status_pb2.Status())
    return status_pb2.Status.FromString(response.content)


def counts(project) -> tuple[int, ...]:
    with organization_scope(project.organization):
        return tuple(
            model.objects.filter(project=project).count() for model in (Run, Step, Message, ToolCall, MemorySnapshot)
        )


def the_run(project) -> Run:
    with organization_scope(project.organization):
        return Run.objects.get(project=project)


# --- Encodings ---------------------------------------------------------------------------------


def test_protobuf_export_is_stored_and_answered_in_protobuf(client, tenant, key):
    response = post(client, agent_trace().SerializeToString(), key)

    assert response.status_code == 200
    assert response["Content-Type"] == PROTOBUF
    answer = ExportTraceServiceResponse.FromString(response.content)
    assert not answer.HasField("partial_success")
    assert counts(tenant.project) == (1, 3, 1, 1, 1)
    run = the_run(tenant.project)
    assert (run.trace_id, run.name, run.agent_name, run.session_id, run.status) == (
        TRACE.hex(),
        "invoke_agent weather",
        "weather",
        "s-1",
        "succeeded",
    )
    assert str(run.total_cost) == "2.000000000"  # 1M in x 0.50 + 1M out x 1.50


def test_json_export_with_hex_ids_is_stored_and_answered_in_json(client, tenant, key):
    response = post(client, otlp_json(agent_trace()), key, content_type="application/json; charset=utf-8")

    assert response.status_code == 200
    assert response["Content-Type"] == JSON
    assert response.json() == {}
    with organization_scope(tenant.organization):
        steps = {s.span_id: s for s in Step.objects.filter(project=tenant.project)}
    assert set(steps) == {ROOT.hex(), CHILD.hex(), TOOL.hex()}
    assert steps[CHILD.hex()].parent_span_id == ROOT.hex()
    assert (steps[CHILD.hex()].kind, steps[TOOL.hex()].kind) == ("llm", "tool")


@pytest.mark.parametrize(
    ("encoding", "compress"),
    [
        ("gzip", gzip.compress),
        ("deflate", zlib.compress),
        ("deflate", lambda data: zlib.compress(data)[2:-4]),  # raw deflate, as some clients send
    ],
    ids=["gzip", "deflate", "raw-deflate"],
)
def test_compressed_bodies_are_accepted(client, tenant, key, encoding, compress):
    response = post(client, compress(agent_trace().SerializeToString()), key, encoding=encoding)
    assert response.status_code == 200
    assert counts(tenant.project)[:2] == (1, 3)


def test_a_body_over_djangos_upload_limit_is_accepted(client, tenant, key, settings):
    settings.DATA_UPLOAD_MAX_MEMORY_SIZE = 200  # Django's own limit would answer 400
    body = agent_trace().SerializeToString()
    assert len(body) > 200

    assert post(client, body, key).status_code == 200
    assert counts(tenant.project)[1] == 3


# --- Bad input ---------------------------------------------------------------------------------


@pytest.mark.parametrize("content_type", ["text/plain", "application/xml", "application/grpc", ""])
def test_other_content_types_are_415_with_a_json_status(client, tenant, key, content_type):
    response = post(client, agent_trace().SerializeToString(), key, content_type=content_type)
    assert response.status_code == 415
    assert response["Content-Type"] == JSON
    assert "is not supported" in rpc_status(response).message
    assert counts(tenant.project)[0] == 0


def test_an_unsupported_content_encoding_is_415_in_the_requests_content_type(client, key):
    response = post(client, b"whatever", key, encoding="br")
    assert response.status_code == 415
    assert response["Content-Type"] == PROTOBUF
    assert rpc_status(response).message == "Content-Encoding 'br' is not supported; send gzip, deflate or none"


def test_garbage_bytes_are_400_with_a_protobuf_status(client, tenant, key):
    response = post(client, b"\xff\xff\xff\xff this is not protobuf", key)
    assert response.status_code == 400
    assert response["Content-Type"] == PROTOBUF
    status = rpc_status(response)
    assert status.code == code_pb2.INVALID_ARGUMENT
    assert status.message.startswith("the body is not a valid ExportTraceServiceRequest protobuf")
    assert counts(tenant.project)[0] == 0


@pytest.mark.parametrize(
    ("body", "message"),
    [
        (b"{not json", "the body is not valid JSON"),
        (b"\xff\xfe\x00garbage", "the body is not valid JSON"),
        (b"[1, 2]", "the body must be a JSON object"),
        (b'{"resourceSpans": 5}', "the body is not a valid ExportTraceServiceRequest in OTLP/JSON"),
    ],
)
def test_invalid_json_is_400_with_a_json_status(client, key, body, message):
    response = post(client, body, key, content_type=JSON)
    assert response.status_code == 400
    assert response["Content-Type"] == JSON
    assert rpc_status(response).message.startswith(message)


def test_a_corrupt_or_truncated_gzip_body_is_400(client, key):
    compressed = gzip.compress(agent_trace().SerializeToString())
    assert post(client, b"not gzip at all", key, encoding="gzip").status_code == 400
    truncated = post(client, compressed[: len(compressed) // 2], key, encoding="gzip")
    assert truncated.status_code == 400
    assert rpc_status(truncated).message == "the compressed body is truncated"


def test_attributes_nested_deeper_than_protobuf_allows_are_400_not_a_server_error(client, key):
    # Protobuf parsers stop at 100 levels of messages; hand-encode a deeper attribute.
    def field(number: int, payload: bytes) -> bytes:
        length, varint = len(payload), b""
        while True:
            byte = length & 0x7F
            length >>= 7
            varint += bytes([byte | (0x80 if length else 0)])
            if not length:
                return bytes([number << 3 | 2]) + varint + payload

    value = field(1, b"leaf")  # AnyValue.string_value
    for _ in range(120):
        value = field(5, field(1, value))  # AnyValue.array_value.values[0]
    span = field(9, field(1, b"deep") + field(2, value))  # Span.attributes (KeyValue)
    body = field(1, field(2, field(2, span)))  # resource_spans.scope_spans.spans

    response = post(client, body, key)
    assert response.status_code == 400


def test_hostile_values_are_stored_without_a_server_error(client, tenant, key):
    messages = '[{"role": "user", "parts": [{"type": "text", "content": "a\\u0000b\\ud800 NaN"}], "x": NaN}]'
    request = make_request(
        make_span(
            {
                "gen_ai.operation.name": "chat",
                "gen_ai.request.model": "mistral-large-2512",
                "gen_ai.input.messages": messages,
                "score": math.nan,
                "limit": math.inf,
                "raw": b"\xff\xfe\xc3\x28",
                "nul\x00key": "nul\x00value",
                "huge": "word " * 600_000,
                "deep": '{"a":' * 200 + "1" + "}" * 200,
            },
            name="chat\x00",
            start=T0 + 10 * SECOND,
            end=T0,  # ends before it starts
        )
    )
    response = post(client, request.SerializeToString(), key)

    assert response.status_code == 200
    # Stored, cleaned, and the exporter is told how (a warning: nothing rejected).
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 0
    assert partial.error_message == (
        f"1 of 1 spans stored with changes: span {ROOT.hex()}: NUL characters removed, NaN or Infinity kept as text, "
        "unpaired surrogates replaced by ?"
    )
    with organization_scope(tenant.organization):
        step = Step.objects.get(project=tenant.project)
        message = Message.objects.get(project=tenant.project)
    assert (step.name, step.input_tokens, step.output_tokens, step.duration_ms) == ("chat", 0, 0, 0.0)
    assert (step.attributes["score"], step.attributes["limit"], step.attributes["nulkey"]) == (
        "NaN",
        "Infinity",
        "nulvalue",
    )
    assert message.content == "ab? NaN"


def test_hostile_values_in_a_large_export_are_stored_as_in_a_small_one(client, tenant, key):
    """A large export's rows go by COPY, its JSON encoded without the search for what
    jsonb refuses (the mapping's values cannot hold it): stored as one span's are (the
    test above)."""
    messages = '[{"role": "user", "parts": [{"type": "text", "content": "a\\u0000b\\ud800 \U0001f600"}], "x": NaN}]'
    chat = {
        "gen_ai.operation.name": "chat",
        "gen_ai.request.model": "mistral-large-2512",
        "gen_ai.input.messages": messages,
        "score": math.nan,
        "limit": -math.inf,
        "nul\x00key": "nul\x00value",
        "emoji": "\U0001f600",
    }
    tool = {
        "gen_ai.operation.name": "execute_tool",
        "gen_ai.tool.name": "search",
        "gen_ai.tool.call.arguments": '{"n": 123456789012345678901234567890, "none": null, "x": NaN, "s": "\\u0000"}',
    }
    traces = [bytes([index + 1]) * 16 for index in range(30)]  # 30 runs, 120 rows: by COPY
    spans = [
        span
        for trace in traces
        for span in (
            make_span(chat, name="chat", trace_id=trace),
            make_span(tool, name="search", span_id=CHILD, parent=ROOT, trace_id=trace),
        )
    ]

    response = post(client, make_request(*spans).SerializeToString(), key)

    assert response.status_code == 200
    assert ExportTraceServiceResponse.FromString(response.content).partial_success.rejected_spans == 0
    with organization_scope(tenant.organization):
        chats = list(Step.objects.filter(project=tenant.project, kind="llm"))
        contents = set(Message.objects.filter(project=tenant.project, role="user").values_list("content", flat=True))
        arguments = list(ToolCall.objects.filter(project=tenant.project).values_list("arguments", flat=True))
    assert len(chats) == 30
    for step in chats:
        stored = step.attributes
        assert (stored["score"], stored["limit"], stored["nulkey"], stored["emoji"]) == (
            "NaN",
            "-Infinity",
            "nulvalue",
            "\U0001f600",
        )
    assert contents == {"ab? \U0001f600"}
    assert arguments == [{"n": 123456789012345678901234567890, "none": None, "x": "NaN", "s": ""}] * 30


# --- Size limits ---------------------------------------------------------------------------------


def test_a_body_over_the_limit_is_413(client, tenant, key, settings):
    settings.OTLP_MAX_BODY_BYTES = 1000
    body = make_request(make_span({"padding": "x" * 2000})).SerializeToString()

    response = post(client, body, key)
    assert response.status_code == 413
    assert rpc_status(response).code == code_pb2.RESOURCE_EXHAUSTED
    assert counts(tenant.project)[0] == 0


def test_a_small_compressed_body_that_expands_past_the_limit_is_413(client, tenant, key, settings):
    settings.OTLP_MAX_BODY_BYTES = 1024 * 1024
    bomb = gzip.compress(make_request(make_span({"padding": "\x01" * 20_000_000})).SerializeToString())
    assert len(bomb) < 100_000

    response = post(client, bomb, key, encoding="gzip")
    assert response.status_code == 413
    assert rpc_status(response).message == "the decompressed body is larger than the limit of 1048576 bytes"


def test_reading_stops_one_byte_past_the_limit_without_a_content_length():
    class Stream(io.BytesIO):
        read_sizes: list[int] = []

        def read(self, size=-1):
            self.read_sizes.append(size)
            return super().read(size)

    stream = Stream(b"x" * 10_000_000)
    with pytest.raises(decode.BodyTooLarge):
        decode.read_body(stream, content_length=None, limit=100_000)
    assert sum(stream.read_sizes) == 100_001
    assert decode.read_body(io.BytesIO(b"x" * 100_000), content_length=None, limit=100_000) == b"x" * 100_000


def test_a_declared_length_over_the_limit_is_refused_before_reading():
    with pytest.raises(decode.BodyTooLarge, match="the body is 5000 bytes; the limit is 100 bytes"):
        decode.read_body(io.BytesIO(b""), content_length=5000, limit=100)


def test_a_multi_member_gzip_body_is_read_whole():
    body = gzip.compress(b"first ") + gzip.compress(b"second")
    assert decode.decompress(body, "gzip", limit=100) == b"first second"


# --- Partial success ---------------------------------------------------------------------------------


def test_spans_with_invalid_ids_are_rejected_in_partial_success_and_the_others_stored(client, tenant, key):
    request = agent_trace()
    spans = request.resource_spans[0].scope_spans[0].spans
    spans.add().CopyFrom(make_span(span_id=b"", name="no id"))
    spans.add().CopyFrom(make_span(trace_id=b"\x00" * 16, span_id=bytes.fromhex("0102030405060708")))

    response = post(client, request.SerializeToString(), key)

    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 2
    assert partial.error_message.startswith("2 of 5 spans rejected: span (no id): invalid span id (empty)")
    assert counts(tenant.project)[:2] == (1, 3)


def test_a_span_that_never_ended_is_rejected_and_its_run_not_left_running(client, tenant, key):
    request = agent_trace()
    spans = request.resource_spans[0].scope_spans[0].spans
    spans[0].end_time_unix_nano = 0  # the root: its run would stay running forever
    spans[0].start_time_unix_nano = 2**64 - 1  # the year 2554

    response = post(client, request.SerializeToString(), key)

    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert (response.status_code, partial.rejected_spans) == (200, 1)
    assert partial.error_message == (
        f"1 of 3 spans rejected: span {ROOT.hex()}: end_time_unix_nano is 0 (unset): send a span once it has ended"
    )
    run = the_run(tenant.project)
    assert run.started_at.year == 2026


def test_a_token_count_no_model_call_has_is_rejected_not_stored_as_zero(client, tenant, key):
    request = agent_trace()
    chat = request.resource_spans[0].scope_spans[0].spans[1]
    for attribute in chat.attributes:
        if attribute.key == "gen_ai.usage.input_tokens":
            attribute.value.int_value = 2**63 - 1

    response = post(client, otlp_json(request), key, content_type=JSON)

    partial = response.json()["partialSuccess"]
    assert (response.status_code, partial["rejectedSpans"]) == (200, "1")
    assert partial["errorMessage"] == (
        f"1 of 3 spans rejected: span {CHILD.hex()}: gen_ai.usage.input_tokens: 9223372036854775807 is not a "
        "token count (a whole number from 0 to 100,000,000)"
    )
    with organization_scope(tenant.organization):
        assert not Step.objects.filter(project=tenant.project, span_id=CHILD.hex()).exists()


def test_a_json_span_with_an_id_that_is_not_hex_is_rejected_alone(client, tenant, key):
    document = json.loads(otlp_json(agent_trace()))
    document["resourceSpans"][0]["scopeSpans"][0]["spans"][2]["spanId"] = "not-hex!"

    response = post(client, json.dumps(document).encode(), key, content_type=JSON)

    assert response.status_code == 200
    assert response.json()["partialSuccess"]["rejectedSpans"] == "1"  # int64 is a string in proto3 JSON
    assert "invalid span id" in response.json()["partialSuccess"]["errorMessage"]
    assert counts(tenant.project)[:2] == (1, 2)


# --- Authentication and tenancy ---------------------------------------------------------------------------


def test_no_key_is_401_with_a_status_body(client, tenant):
    response = post(client, agent_trace().SerializeToString(), None)
    assert response.status_code == 401
    assert response["WWW-Authenticate"] == 'Bearer realm="api"'
    assert rpc_status(response).code == code_pb2.UNAUTHENTICATED
    assert counts(tenant.project)[0] == 0


def test_an_unknown_key_is_401(client, tenant):
    response = post(client, agent_trace().SerializeToString(), "ao_not-a-real-key", content_type=JSON)
    assert response.status_code == 401
    assert response["Content-Type"] == JSON
    assert rpc_status(response).message == "invalid API key"


def test_a_revoked_key_is_401(client, tenant, make_api_key):
    api_key, raw = make_api_key(tenant.project, ["ingest"])
    with organization_scope(tenant.organization):
        api_key_revoke(key=api_key, actor=None)

    response = post(client, agent_trace().SerializeToString(), raw)
    assert response.status_code == 401
    assert rpc_status(response).message == "this API key has been revoked"
    assert counts(tenant.project)[0] == 0


def test_a_key_without_the_ingest_scope_is_403(client, tenant, make_api_key):
    _, raw = make_api_key(tenant.project, ["read", "execute"])
    response = post(client, agent_trace().SerializeToString(), raw)
    assert response.status_code == 403
    assert rpc_status(response).code == code_pb2.PERMISSION_DENIED
    assert "do not allow it to send traces" in rpc_status(response).message
    assert counts(tenant.project)[0] == 0


def test_the_project_comes_from_the_key_not_the_payload(client, tenant, other_tenant, key):
    resource = {
        "project": other_tenant.project.slug,
        "project.id": other_tenant.project.pk,
        "organization": other_tenant.organization.slug,
        "langfuse.project.id": str(other_tenant.project.pk),
    }
    response = post(client, agent_trace(resource=resource).SerializeToString(), key)

    assert response.status_code == 200
    assert counts(tenant.project)[:2] == (1, 3)
    assert counts(other_tenant.project) == (0, 0, 0, 0, 0)


def test_each_tenants_key_writes_to_its_own_project_only(client, tenant, other_tenant, key, make_api_key):
    _, other_key = make_api_key(other_tenant.project, ["ingest"])
    body = agent_trace().SerializeToString()  # the very same trace id from both

    assert post(client, body, key).status_code == 200
    assert post(client, body, other_key).status_code == 200

    assert counts(tenant.project) == counts(other_tenant.project) == (1, 3, 1, 1, 1)
    ours, theirs = the_run(tenant.project), the_run(other_tenant.project)
    assert ours.pk != theirs.pk
    assert (ours.organization_id, theirs.organization_id) == (tenant.organization.pk, other_tenant.organization.pk)


def test_resending_the_same_body_three_times_adds_no_rows(client, tenant, key):
    body = agent_trace().SerializeToString()
    for _ in range(3):
        assert post(client, body, key).status_code == 200
    assert counts(tenant.project) == (1, 3, 1, 1, 1)
    assert str(the_run(tenant.project).total_cost) == "2.000000000"


# --- Server-side conditions ------------------------------------------------------------------------------


@pytest.mark.parametrize(("error", "content_type"), [(OperationalError, PROTOBUF), (InterfaceError, JSON)])
def test_database_unreachable_is_503_with_retry_after(client, tenant, key, monkeypatch, error, content_type):
    def database_down(**kwargs):
        raise error("could not connect to server: Connection refused")

    monkeypatch.setattr("runs.api.otlp.ingest", database_down)
    body = agent_trace().SerializeToString() if content_type == PROTOBUF else otlp_json(agent_trace())

    response = post(client, body, key, content_type=content_type)

    assert response.status_code == 503
    assert int(response["Retry-After"]) >= 1
    assert response["Content-Type"] == content_type
    assert rpc_status(response).code == code_pb2.UNAVAILABLE
    assert counts(tenant.project)[0] == 0


def test_spans_are_stored_while_redis_alone_is_down(client, tenant, key, redis_down):
    # Rate limits and live updates need Redis; storing the spans does not.
    response = post(client, agent_trace().SerializeToString(), key)

    assert response.status_code == 200
    assert counts(tenant.project)[:2] == (1, 3)


def test_spans_are_still_refused_when_postgresql_fails_while_redis_is_down(client, tenant, key, redis_down):
    def refuse(execute, sql, params, many, context):
        raise OperationalError("connection refused")

    with connection.execute_wrapper(refuse):
        response = post(client, agent_trace().SerializeToString(), key)
    assert response.status_code == 503
    assert counts(tenant.project)[0] == 0


def test_a_throttled_key_gets_429_with_retry_after_in_the_otlp_shape(client, tenant, key, monkeypatch):
    from rest_framework.throttling import SimpleRateThrottle

    monkeypatch.setattr(SimpleRateThrottle, "THROTTLE_RATES", {"api_key": "2/min", "user": "1000/min"})
    body = agent_trace().SerializeToString()
    assert [post(client, body, key).status_code for _ in range(2)] == [200, 200]

    response = post(client, body, key)
    assert response.status_code == 429
    assert int(response["Retry-After"]) >= 1
    assert rpc_status(response).code == code_pb2.RESOURCE_EXHAUSTED


def test_an_accept_header_asking_for_protobuf_is_not_refused(client, tenant, key):
    response = client.post(
        URL,
        data=agent_trace().SerializeToString(),
        content_type=PROTOBUF,
        headers={"Authorization": f"Bearer {key}", "Accept": PROTOBUF},
    )
    assert response.status_code == 200
    assert response["Content-Type"] == PROTOBUF


def test_other_methods_are_405(client, key):
    response = client.get(URL, headers={"Authorization": f"Bearer {key}"})
    assert response.status_code == 405


# --- Logs ------------------------------------------------------------------------------------------------


def test_gen_ai_log_events_are_stored_as_messages_of_their_span(client, tenant, key):
    assert post(client, agent_trace().SerializeToString(), key).status_code == 200
    request = make_logs_request(
        make_log("gen_ai.user.message", {"content": "Weather in Paris?"}, time=T0 + SECOND),
        make_log("gen_ai.choice", {"finish_reason": "stop", "message": {"content": "21C"}}, time=T0 + 2 * SECOND),
        make_log("gen_ai.user.message", {"content": "no trace"}, trace_id=b""),
        make_log("http.request", "GET /"),
    )

    response = post(client, request.SerializeToString(), key, url=LOGS_URL)

    assert response.status_code == 200
    partial = ExportLogsServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_log_records == 1
    assert partial.error_message.startswith("1 of 4 log records rejected: gen_ai.user.message log record")
    with organization_scope(tenant.organization):
        logged = Message.objects.filter(project=tenant.project, message_id__contains=":log:").order_by("position")
        assert [(m.role, m.content, m.step.span_id) for m in logged] == [
            ("user", "Weather in Paris?", CHILD.hex()),
            ("assistant", "21C", CHILD.hex()),
        ]


def test_gen_ai_log_events_in_json_are_stored(client, tenant, key):
    request = make_logs_request(make_log("gen_ai.system.message", {"content": "Be brief."}))

    response = post(client, otlp_json(request), key, content_type=JSON, url=LOGS_URL)

    assert response.status_code == 200
    assert response["Content-Type"] == JSON
    assert response.json() == {}
    with organization_scope(tenant.organization):
        message = Message.objects.get(project=tenant.project)
    assert (message.role, message.content, message.span_id) == ("system", "Be brief.", CHILD.hex())


def test_logs_need_the_ingest_scope_too(client, tenant, make_api_key):
    _, raw = make_api_key(tenant.project, ["read"])
    response = post(client, make_logs_request().SerializeToString(), raw, url=LOGS_URL)
    assert response.status_code == 403
    assert "do not allow it to send logs" in rpc_status(response).message


# --- Under ASGI, as uvicorn serves it ----------------------------------------------------------------------


@pytest.mark.django_db(transaction=True)
async def test_a_chunked_body_without_content_length_is_read_under_asgi(tenant, make_api_key):
    from asgiref.sync import sync_to_async
    from django.core.asgi import get_asgi_application
    from django.db import connections

    _, raw = await sync_to_async(make_api_key)(tenant.project, ["ingest"])
    body = gzip.compress(agent_trace().SerializeToString())
    chunks = [body[index : index + 100] for index in range(0, len(body), 100)]
    scope = {
        "type": "http",
        "asgi": {"version": "3.0"},
        "http_version": "1.1",
        "method": "POST",
        "scheme": "http",
        "path": URL,
        "raw_path": URL.encode(),
        "query_string": b"",
        "root_path": "",
        "headers": [
            (b"host", b"testserver"),
            (b"content-type", PROTOBUF.encode()),
            (b"content-encoding", b"gzip"),
            (b"transfer-encoding", b"chunked"),
            (b"authorization", f"Bearer {raw}".encode()),
        ],
        "client": ("127.0.0.1", 50000),
        "server": ("testserver", 80),
    }
    sent = []

    async def receive():
        if not chunks:  # the body is sent: the client waits for the answer
            await asyncio.Event().wait()
        chunk = chunks.pop(0)
        return {"type": "http.request", "body": chunk, "more_body": bool(chunks)}

    async def send(message):
        sent.append(message)

    try:
        await get_asgi_application()(scope, receive, send)
        stored = await sync_to_async(counts)(tenant.project)
    finally:
        # The thread that ran the sync code keeps its connection open otherwise, and
        # the test database could not be dropped at the end of the run.
        await sync_to_async(connections.close_all)()

    assert sent[0]["status"] == 200
    assert {name.lower(): value for name, value in sent[0]["headers"]}[b"content-type"] == PROTOBUF.encode()
    assert stored == (1, 3, 1, 1, 1)


# --- Usage parts and reported cost ---------------------------------------------------------------

# After the catalog's part rates took effect (2026-11-25).
PRICED = T0 + 7 * 24 * 3600 * SECOND


def test_usage_parts_and_a_reported_cost_are_stored_each_token_priced_once(client, tenant, key):
    span = make_span(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.request.model": "claude-sonnet-4-5",
            "gen_ai.usage.input_tokens": 10_000,
            "gen_ai.usage.cache_read.input_tokens": 6_000,
            "gen_ai.usage.cache_creation.input_tokens": 2_000,
            "gen_ai.usage.output_tokens": 3_000,
            "gen_ai.usage.reasoning.output_tokens": 1_000,
            "gen_ai.usage.cost.amount": 0.07,
            "gen_ai.usage.cost.currency": "USD",
            "gen_ai.usage.cost.source": "provider",
        },
        start=PRICED,
        end=PRICED + SECOND,
    )
    response = post(client, make_request(span).SerializeToString(), key)
    assert response.status_code == 200
    with organization_scope(tenant.organization):
        step = Step.objects.get(project=tenant.project)
        run = Run.objects.get(project=tenant.project)
    # Anthropic's rates: 2,000 at $3, 6,000 read at $0.30, 2,000 written at $3.75,
    # 2,000 output and 1,000 thinking at $15 per million.
    assert step.cost == Decimal("0.0603")
    assert (step.reported_cost, step.reported_cost_source) == (Decimal("0.07"), "provider")
    assert step.reported_cost_differs, "0.07 is more than 5 % away from 0.0603"
    assert (run.cache_write_input_tokens, run.reasoning_output_tokens) == (2_000, 1_000)
    assert (run.total_cost, run.reported_cost, run.reported_steps_computed_cost) == (
        Decimal("0.0603"),
        Decimal("0.07"),
        Decimal("0.0603"),
    )


def test_spans_with_bad_usage_or_cost_are_rejected_in_partial_success_and_the_others_stored(client, tenant, key):
    request = agent_trace()
    spans = request.resource_spans[0].scope_spans[0].spans
    spans.add().CopyFrom(
        make_span(
            {"gen_ai.request.model": "gpt-4o", "gen_ai.usage.reasoning.output_tokens": -1},
            span_id=bytes.fromhex("0102030405060708"),
            parent=ROOT,
        )
    )
    spans.add().CopyFrom(
        make_span(
            {"gen_ai.request.model": "gpt-4o", "gen_ai.usage.cost": 1, "gen_ai.usage.cost.currency": "DOGE"},
            span_id=bytes.fromhex("0102030405060709"),
            parent=ROOT,
        )
    )

    response = post(client, request.SerializeToString(), key)

    assert response.status_code == 200
    partial = ExportTraceServiceResponse.FromString(response.content).partial_success
    assert partial.rejected_spans == 2
    assert "gen_ai.usage.reasoning.output_tokens: -1 is not a token count" in partial.error_message
    assert "unknown currency 'DOGE'" in partial.error_message
    assert counts(tenant.project)[:2] == (1, 3)
