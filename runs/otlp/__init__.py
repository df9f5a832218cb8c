"""OpenTelemetry (OTLP/HTTP) ingestion: ``decode`` turns request bodies into protobuf
messages, ``mapping`` turns those messages into the events of ``runs.services.ingest``."""
