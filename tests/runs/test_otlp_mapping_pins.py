"""Bugs found in the OTLP mapping (runs/otlp/) and pinned. The rest of the
mapping's tests are in test_otlp_mapping.py."""


def test_a_span_whose_parent_id_is_not_hex_is_rejected_not_made_a_root():
    """In OTLP/JSON a parent id that is not hex stood in as b"\\x00", which reads as "no
    parent": the span became a second root (overriding the run's name, input, output
    and status) instead of being rejected like a bad trace or span id."""
    import json

    from runs.otlp import decode, mapping

    span = {
        "traceId": "0af7651916cd43dd8448eb211c80319c",
        "spanId": "b7ad6b7169203331",
        "parentSpanId": "not-hex!",
        "name": "child",
        "startTimeUnixNano": "1763640000000000000",
        "endTimeUnixNano": "1763640001000000000",
    }
    body = json.dumps({"resourceSpans": [{"scopeSpans": [{"spans": [span]}]}]}).encode()
    batch = mapping.map_traces(decode.decode_traces(body, decode.JSON))
    assert (batch.rejected, batch.steps) == (1, [])
    assert "parent span id" in batch.problems[0]
