"""OTLP values made storable or refused (``runs.otlp.attributes`` and the cleaners of
``runs.events``): NaN, NUL characters, surrogates, depth, sizes, token counts, times,
texts cut to their columns, stable ids."""

from __future__ import annotations

import base64
import math

import pytest

from agentops.jsonsafe import MAX_DEPTH, NUL_REMOVED, SURROGATES_REPLACED, TRUNCATED
from runs.events import TEXT_CUT, noting
from runs.otlp import map_traces
from runs.otlp.attributes import text_value
from tests.runs.otlp_helpers import (
    CHILD,
    ROOT,
    SECOND,
    T0,
    make_request,
    make_span,
    mapped,
    step_of,
    storable,
)

# --- Hostile values --------------------------------------------------------------------------------


def test_nan_and_infinite_doubles_are_kept_as_strings():
    step = step_of(
        make_span({"score": math.nan, "high": math.inf, "low": -math.inf, "in_json": '{"x": NaN, "y": [Infinity]}'})
    )
    assert (step.attributes["score"], step.attributes["high"], step.attributes["low"]) == (
        "NaN",
        "Infinity",
        "-Infinity",
    )
    storable(step.attributes)


def test_nul_characters_and_unpaired_surrogates_are_removed():
    span = make_span(
        {
            "ke\x00y": "va\x00lue",
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "a\\u0000b\\ud800c"}]}]',
            "session.id": "s\x00-1",
        },
        name="na\x00me",
    )
    batch = mapped(span)
    (step,), (message,) = batch.steps, batch.messages
    assert step.attributes["key"] == "value"
    assert step.name == "name"
    assert step.run_hints["session_id"] == "s-1"
    assert message.content == "ab?c"
    storable(step.input)
    storable(step.attributes)
    # Stored, and the client is told what changed (partial_success, nothing rejected).
    assert batch.error_message("spans") == (
        f"1 of 1 spans stored with changes: span {ROOT.hex()}: "
        "NUL characters removed, unpaired surrogates replaced by ?"
    )


@pytest.mark.parametrize(
    ("value", "expected", "notes"),
    [
        ("  gpt-4o \n", "gpt-4o", set()),
        ("a\x00b", "ab", {NUL_REMOVED}),
        ("mod\u00e8le", "mod\u00e8le", set()),
        ("x\ud800y", "x?y", {SURROGATES_REPLACED}),
        ("abcdefghij", "abcd", {TEXT_CUT}),
        (True, "true", set()),
        (12, "12", set()),
        (None, "", set()),
        (["a"], "", set()),
        ({"a": 1}, "", set()),
    ],
)
def test_a_scalar_attribute_becomes_column_text(value, expected, notes):
    with noting() as noted:
        assert text_value(value, 4 if value == "abcdefghij" else 100) == expected
    assert noted == notes


def test_a_span_stored_as_sent_gets_no_message():
    batch = mapped(make_span({"gen_ai.usage.input_tokens": 12, "text": "plain"}))
    assert (batch.rejected, batch.changed, batch.error_message("spans")) == (0, 0, "")


def test_a_span_without_an_end_time_is_rejected_not_left_running():
    batch = map_traces(make_request(make_span(end=0)))
    assert (batch.rejected, batch.steps) == (1, [])
    assert batch.error_message("spans") == (
        f"1 of 1 spans rejected: span {ROOT.hex()}: end_time_unix_nano is 0 (unset): send a span once it has ended"
    )


@pytest.mark.parametrize(("start", "end"), [(2**64 - 1, T0), (T0, 2**64 - 1), (2**63, 2**63 + SECOND)])
def test_a_span_with_a_time_after_2262_is_rejected(start, end):
    batch = map_traces(make_request(make_span(start=start, end=end)))
    assert (batch.rejected, batch.steps) == (1, [])
    assert "is after 2262: an overflow, not a time" in batch.error_message("spans")


def test_invalid_utf8_bytes_are_base64():
    step = step_of(make_span({"raw": b"\xff\xfe\xc3\x28"}))
    assert base64.b64decode(step.attributes["raw"]) == b"\xff\xfe\xc3\x28"


def test_deeply_nested_values_are_kept_to_the_maximum_depth_and_cut_beyond():
    # Protobuf refuses messages nested deeper than 100 (about 45 levels of attribute
    # lists, a 400 at the endpoint); JSON inside a string attribute can go deeper.
    nested = "leaf"
    for _ in range(40):
        nested = [nested]
    deeper = "[" * 100 + "]" * 100
    deepest = "[" * 5000 + "]" * 5000  # beyond what Python's JSON parser accepts
    step = step_of(make_span({"nested": nested, "gen_ai.output.messages": deeper, "input.value": deepest}))

    def depth_of(value):
        depth = 0
        while isinstance(value, list) and value:
            value, depth = value[0], depth + 1
        return depth, value

    assert depth_of(step.attributes["nested"]) == (40, "leaf")
    assert depth_of(step.output) == (MAX_DEPTH, TRUNCATED)
    assert step.input == deepest  # not parsable: kept as the text it was
    storable(step.attributes)
    storable(step.output)


def test_huge_values_are_kept():
    big = "x" * 5_000_000
    step = step_of(make_span({"input.value": big}))
    assert step.input == big


@pytest.mark.parametrize(
    "value", [-5, math.nan, math.inf, 2.5, "many", "12abc", True, 10**15, 2**63 - 1, [1, 2], {"n": 1}], ids=repr
)
def test_a_span_whose_token_count_is_not_a_count_is_rejected_naming_it(value):
    good = make_span({"gen_ai.usage.input_tokens": 5}, span_id=CHILD, parent=ROOT)
    bad = make_span({"gen_ai.usage.input_tokens": value, "gen_ai.usage.output_tokens": 3})

    batch = map_traces(make_request(bad, good))

    assert [step.span_id for step in batch.steps] == [CHILD.hex()]  # never stored as 0
    assert batch.rejected == 1
    assert f"span {ROOT.hex()}: gen_ai.usage.input_tokens: " in batch.error_message("spans")
    assert "is not a token count" in batch.error_message("spans")


def test_token_counts_sent_as_text_or_whole_doubles_are_read():
    step = step_of(make_span({"gen_ai.usage.input_tokens": "120", "gen_ai.usage.output_tokens": 7.0}))
    assert (step.input_tokens, step.output_tokens) == (120, 7)


def test_a_span_ending_before_it_starts_keeps_outputs_after_inputs_and_no_negative_latency():
    messages = '[{"role": "user", "parts": [{"type": "text", "content": "x"}]}]'
    span = make_span(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": messages,
            "gen_ai.output.messages": messages.replace("user", "assistant"),
        },
        start=T0 + 10 * SECOND,
        end=T0,
    )
    incoming, outgoing = mapped(span).messages
    assert outgoing.position > incoming.position
    tool = make_span({"gen_ai.operation.name": "execute_tool"}, start=T0 + 10 * SECOND, end=T0)
    assert mapped(tool).tool_calls[0].latency_ms == 0.0


def test_overlong_texts_are_cut_to_their_columns():
    step = step_of(
        make_span(
            {"gen_ai.request.model": "m" * 1000, "session.id": "s" * 1000, "langfuse.trace.tags": ["t" * 500]},
            name="n" * 2000,
        )
    )
    assert (len(step.name), len(step.model), len(step.run_hints["session_id"])) == (500, 200, 200)
    assert step.run_hints["tags"] == ["t" * 100]


def test_resending_the_same_request_maps_to_the_same_ids():
    span = make_span(
        {
            "gen_ai.operation.name": "chat",
            "gen_ai.input.messages": '[{"role": "user", "parts": [{"type": "text", "content": "x"}]}]',
        }
    )
    first, second = mapped(span), mapped(span)
    assert [m.message_id for m in first.messages] == [m.message_id for m in second.messages]
    assert first.steps == second.steps


# --- JSON sent as text ---------------------------------------------------------------------------

_JSON_TEXTS = [
    '{"a": [1, 2.5, "x"], "b": {"c": null, "d": true}}',
    '  [{"role": "user", "content": "hi"}]  ',
    '{"nan": NaN}',
    "[Infinity, -Infinity]",
    '{"big": 1e400, "small": -1E+999, "fine": 1e300, "tiny": 1e-400}',
    "[" + "9" * 400 + ".5]",
    '{"nul": "a\\u0000b"}',
    '{"surrogate": "\\ud800", "astral": "\\ud83d\\ude00"}',
    '{"accent": "héllo"}',
    "[" * 70 + "1" + "]" * 70,
    "[" * 40 + "1" + "]" * 40,
    "42",
    "NaN",
    "1e999",
    "true",
    '"quoted"',
    "not json",
    "{broken",
    '{"a": 1} trailing',
    "",
    "   ",
    '{"a": 1, "a": 2}',
    "[" * 5000 + "]" * 5000,
]


@pytest.mark.parametrize("text", _JSON_TEXTS, ids=range(len(_JSON_TEXTS)))
@pytest.mark.parametrize("any_json", [False, True])
def test_json_text_is_parsed_and_cleaned_as_json_safe_cleans_it(text, any_json):
    """parse_json_text skips json_safe's walk when the text cannot hold what it changes:
    the value and what is noted are those of json_from_text then json_safe."""
    from agentops.jsonsafe import json_from_text
    from runs.events import json_safe, noting
    from runs.otlp.attributes import parse_json_text

    with noting() as expected_notes:
        parsed = json_from_text(text, any_json=any_json)
        expected = text if parsed is text else json_safe(parsed)
    with noting() as notes:
        value = parse_json_text(text, any_json=any_json)
    assert repr(value) == repr(expected)
    assert notes == expected_notes
