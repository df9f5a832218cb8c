"""OpenTelemetry (OTLP/HTTP) ingestion: export requests -> the events of ``runs.events``,
which the receivers (``runs.api.otlp``) hand to ``runs.ingest.ingest()``.

Pure functions of decoded protobuf messages: no database, no settings, nothing of
``runs.ingest``. The modules, from the request down:

- ``decode``: request bodies (protobuf or JSON, compressed or not) -> protobuf messages;
- ``spans``: ``map_traces()``, every span a step, with its messages, tool call, memory;
- ``logs``: ``map_logs()``, the GenAI message events among the log records;
- ``conventions``: the GenAI, OpenInference and Langfuse vocabularies (kind, usage,
  payloads, run hints);
- ``messages``: a model call's messages, in one shape whatever the vocabulary;
- ``attributes``: OTLP values as plain JSON, text, counts, ids and times;
- ``partial_success``: what was rejected, and what was stored changed (``MappedBatch``).

Whatever a client sends, the events hold valid PostgreSQL ``jsonb`` and ``text``: no
NaN or Infinity (kept as the strings ``"NaN"``, ``"Infinity"``), no NUL characters, no
unpaired surrogates (``?``), at most ``MAX_DEPTH`` levels of nesting; bytes are base64;
text columns are cut to their length. Attributes are free-form telemetry (a model's
output may hold a NUL), so these are cleaned rather than refused, and every span or log
record so changed is named in ``partial_success`` (with nothing rejected, the OTLP way
of a warning). What cannot be meant as sent is refused: a span whose end time is unset
(0), a time after 2262 (beyond signed 64-bit nanoseconds: an overflow, not a clock), a
token count that is not a whole number from 0 to ``MAX_TOKENS``. A span that cannot be
stored is rejected alone (partial success), never the batch.
"""

from runs.otlp.logs import map_logs
from runs.otlp.partial_success import MappedBatch
from runs.otlp.spans import map_traces

__all__ = ["MappedBatch", "map_logs", "map_traces"]
