"""OTLP/HTTP request bodies in, response bodies out.

OTLP/HTTP (opentelemetry-proto ``docs/specification.md``) posts an
``ExportTraceServiceRequest`` or ``ExportLogsServiceRequest`` either as binary protobuf
(``application/x-protobuf``) or in the proto3 JSON mapping (``application/json``), where
trace and span ids are hex strings instead of base64. The body may be gzip- or
deflate-compressed. The answer uses the request's content type: the export response on
success, a ``google.rpc.Status`` on failure.

Nothing here knows about Django: the view hands over a file-like stream and headers.
"""

from __future__ import annotations

import base64
import zlib
from typing import Any, BinaryIO

from google.protobuf import json_format
from google.protobuf.message import DecodeError, Message
from google.rpc import code_pb2, status_pb2
from opentelemetry.proto.collector.logs.v1.logs_service_pb2 import ExportLogsServiceRequest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from agentops import jsonsafe

PROTOBUF = "application/x-protobuf"
JSON = "application/json"
READ_CHUNK_BYTES = 64 * 1024
# Stands in for an id that is not hex in an OTLP/JSON body: one byte is never a valid
# trace or span id, so the mapping rejects that span (partial success) instead of the
# whole request failing. Not zero: an all-zero parent id means "no parent", and a span
# with an unreadable parent would have become a root.
INVALID_ID = b"\xff"
# The protobuf decoder refuses messages nested deeper than 100; in OTLP/JSON a message
# level is at most two of JSON's (an object, and the array of a repeated field).
MAX_JSON_DEPTH = 200

# google.rpc.Status codes (gRPC codes) for the HTTP statuses these endpoints answer with.
GRPC_CODE_FOR_HTTP_STATUS = {
    400: code_pb2.INVALID_ARGUMENT,
    401: code_pb2.UNAUTHENTICATED,
    403: code_pb2.PERMISSION_DENIED,
    404: code_pb2.NOT_FOUND,
    405: code_pb2.UNIMPLEMENTED,
    413: code_pb2.RESOURCE_EXHAUSTED,
    415: code_pb2.INVALID_ARGUMENT,
    429: code_pb2.RESOURCE_EXHAUSTED,
    503: code_pb2.UNAVAILABLE,
}


class BodyRejected(Exception):
    """The request body cannot be taken; ``status`` is the HTTP status to answer with."""

    status = 400


class UndecodableBody(BodyRejected):
    status = 400


class BodyTooLarge(BodyRejected):
    status = 413


class UnsupportedMediaType(BodyRejected):
    status = 415


def media_type(content_type: str | None) -> str:
    """``PROTOBUF`` or ``JSON`` for a Content-Type header (parameters such as
    ``charset`` ignored), else UnsupportedMediaType."""
    main = (content_type or "").split(";", 1)[0].strip().lower()
    if main in (PROTOBUF, JSON):
        return main
    raise UnsupportedMediaType(
        f"Content-Type {main or '(none)'!r} is not supported; send {PROTOBUF} or {JSON} (OTLP/HTTP)"
    )


def read_body(stream: BinaryIO, *, content_length: int | None, limit: int) -> bytes:
    """Read at most ``limit`` bytes from ``stream``; BodyTooLarge beyond that. A declared
    Content-Length over the limit is refused before anything is read."""
    if content_length is not None and content_length > limit:
        raise BodyTooLarge(f"the body is {content_length} bytes; the limit is {limit} bytes")
    chunks: list[bytes] = []
    total = 0
    while True:
        # One byte past the limit is enough to know the body is too large.
        chunk = stream.read(min(READ_CHUNK_BYTES, limit + 1 - total))
        if not chunk:
            break
        chunks.append(chunk)
        total += len(chunk)
        if total > limit:
            raise BodyTooLarge(f"the body is larger than the limit of {limit} bytes")
    return b"".join(chunks)


def decompress(body: bytes, content_encoding: str | None, *, limit: int) -> bytes:
    """``body`` decoded from its Content-Encoding (none, gzip or deflate). Inflates in
    bounded steps, so a small compressed body that expands past ``limit`` (a
    decompression bomb) is refused after ``limit`` bytes, not after filling memory."""
    encoding = (content_encoding or "").strip().lower()
    if encoding in ("", "identity"):
        return body
    if encoding in ("gzip", "x-gzip"):
        return _inflate(body, 16 + zlib.MAX_WBITS, limit, gzip=True)
    if encoding == "deflate":
        # HTTP's "deflate" is the zlib format; some clients send raw deflate instead.
        try:
            return _inflate(body, zlib.MAX_WBITS, limit)
        except UndecodableBody:
            return _inflate(body, -zlib.MAX_WBITS, limit)
    raise UnsupportedMediaType(f"Content-Encoding {encoding!r} is not supported; send gzip, deflate or none")


def _inflate(data: bytes, wbits: int, limit: int, *, gzip: bool = False) -> bytes:
    out: list[bytes] = []
    total = 0
    try:
        while True:
            decompressor = zlib.decompressobj(wbits)
            pending = data
            while True:
                chunk = decompressor.decompress(pending, limit + 1 - total)
                total += len(chunk)
                if total > limit:
                    raise BodyTooLarge(f"the decompressed body is larger than the limit of {limit} bytes")
                out.append(chunk)
                pending = decompressor.unconsumed_tail
                if decompressor.eof or (not pending and not chunk):
                    break
            if not decompressor.eof:
                raise UndecodableBody("the compressed body is truncated")
            data = decompressor.unused_data
            # A gzip body may hold several members one after another (and some writers
            # pad with zero bytes).
            if not gzip or not data.strip(b"\x00"):
                break
    except zlib.error as exc:
        raise UndecodableBody(f"the body could not be decompressed: {exc}") from None
    return b"".join(out)


def decode_traces(body: bytes, media: str) -> ExportTraceServiceRequest:
    """The ExportTraceServiceRequest in ``body``, or UndecodableBody."""
    return _decode(body, media, ExportTraceServiceRequest(), _hex_ids_in_traces)


def decode_logs(body: bytes, media: str) -> ExportLogsServiceRequest:
    """The ExportLogsServiceRequest in ``body``, or UndecodableBody."""
    return _decode(body, media, ExportLogsServiceRequest(), _hex_ids_in_logs)


def _decode(body: bytes, media: str, message: Message, convert_ids) -> Any:
    name = message.DESCRIPTOR.name
    if media == PROTOBUF:
        try:
            message.ParseFromString(body)
        except (DecodeError, RecursionError) as exc:
            raise UndecodableBody(f"the body is not a valid {name} protobuf: {exc}") from None
        return message
    try:
        # Bounded depth, no recursion; NaN, NUL characters and the like are the mapping's.
        document = jsonsafe.loads(body, max_depth=MAX_JSON_DEPTH, strict=False) if body.strip() else {}
    except ValueError as exc:  # bad JSON, bad UTF-8, or too deep
        raise UndecodableBody(f"the body is not valid JSON: {exc}") from None
    if not isinstance(document, dict):
        raise UndecodableBody(f"the body must be a JSON object ({name})")
    convert_ids(document)
    try:
        json_format.ParseDict(document, message, ignore_unknown_fields=True)
    except (json_format.ParseError, ValueError, TypeError, RecursionError) as exc:
        raise UndecodableBody(f"the body is not a valid {name} in OTLP/JSON: {exc}") from None
    return message


def _items(container: Any, *keys: str) -> list:
    """The list under the first of ``keys`` (lowerCamelCase or the proto field name)."""
    if not isinstance(container, dict):
        return []
    for key in keys:
        value = container.get(key)
        if isinstance(value, list):
            return value
    return []


def _hex_to_base64(record: Any, *keys: str) -> None:
    """OTLP/JSON sends ids as hex; the proto3 JSON parser expects base64."""
    if not isinstance(record, dict):
        return
    for key in keys:
        value = record.get(key)
        if not isinstance(value, str):
            continue  # absent, or a wrong type the parser will report
        try:
            raw = bytes.fromhex(value)
        except ValueError:
            raw = INVALID_ID
        record[key] = base64.b64encode(raw).decode("ascii")


_TRACE_ID = ("traceId", "trace_id")
_SPAN_ID = ("spanId", "span_id")


def _hex_ids_in_traces(document: dict) -> None:
    for resource_spans in _items(document, "resourceSpans", "resource_spans"):
        for scope_spans in _items(resource_spans, "scopeSpans", "scope_spans"):
            for span in _items(scope_spans, "spans"):
                _hex_to_base64(span, *_TRACE_ID, *_SPAN_ID, "parentSpanId", "parent_span_id")
                for link in _items(span, "links"):
                    _hex_to_base64(link, *_TRACE_ID, *_SPAN_ID)


def _hex_ids_in_logs(document: dict) -> None:
    for resource_logs in _items(document, "resourceLogs", "resource_logs"):
        for scope_logs in _items(resource_logs, "scopeLogs", "scope_logs"):
            for record in _items(scope_logs, "logRecords", "log_records"):
                _hex_to_base64(record, *_TRACE_ID, *_SPAN_ID)


def encode_message(message: Message, media: str) -> bytes:
    """``message`` in the request's encoding."""
    if media == JSON:
        return json_format.MessageToJson(message, indent=None).encode()
    return message.SerializeToString()


def encode_status(http_status: int, message: str, media: str) -> bytes:
    """The ``google.rpc.Status`` body OTLP/HTTP prescribes for 4xx and 5xx answers."""
    status = status_pb2.Status(code=GRPC_CODE_FOR_HTTP_STATUS.get(http_status, code_pb2.UNKNOWN), message=message)
    return encode_message(status, media)
