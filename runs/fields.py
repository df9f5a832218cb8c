"""Model fields of the trace store."""

from django.db import models


class PayloadJSONField(models.JSONField):
    """A JSON column for trace payloads (inputs, outputs, attributes).

    It names its SQL placeholder, which keeps Django's PostgreSQL bulk insert from
    packing the rows into UNNEST arrays: psycopg builds such an array of large JSON
    documents in pure Python, which made ingestion several times slower than binding
    each document as its own parameter (measured with bench/ingest_otlp.py).
    """

    def get_placeholder(self, value, compiler, connection):
        return "%s"
