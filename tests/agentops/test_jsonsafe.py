"""agentops.jsonsafe: JSON from outside is parsed with bounded depth and without
recursion, and what PostgreSQL cannot store is found, with where it is."""

from __future__ import annotations

import json

import pytest

from agentops import jsonsafe


def refusal(text: str, **options) -> str:
    with pytest.raises(ValueError) as caught:
        jsonsafe.loads(text, **options)
    return str(caught.value)


@pytest.mark.parametrize("depth", [1, 2, 63, 64])
def test_json_up_to_the_depth_limit_is_read(depth):
    assert jsonsafe.loads("[" * depth + "]" * depth) is not None


@pytest.mark.parametrize("depth", [65, 900, 10_000, 1_000_000])
def test_json_deeper_than_the_limit_is_refused_at_any_depth(depth):
    assert refusal("[" * depth + "]" * depth).endswith("nested deeper than 64 levels")


def test_brackets_and_escaped_quotes_inside_strings_are_not_nesting():
    text = json.dumps({"a": ['[[[["{{{{', '\\"[[[[', "]]]]"]})
    assert jsonsafe.loads(text, max_depth=2) == {"a": ['[[[["{{{{', '\\"[[[[', "]]]]"]}


def test_depth_is_counted_in_objects_and_arrays_alike():
    assert refusal('{"a": [{"b": [1]}]}', max_depth=3) == "a[0].b: nested deeper than 3 levels"
    assert jsonsafe.loads('{"a": [{"b": 1}]}', max_depth=3) == {"a": [{"b": 1}]}


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ('{"a": "x\\u0000"}', "a: contains a NUL character, which cannot be stored"),
        ('{"a": {"k\\u0000": 1}}', "a: a key contains a NUL character, which cannot be stored"),
        ('["ok", "\\udc00"]', "[1]: contains an unpaired surrogate (invalid Unicode)"),
        ('{"n": NaN}', "NaN is not a JSON number (NaN and Infinity are not valid JSON numbers)"),
        ('{"n": 1e400}', "1e400 is too large for a number"),
    ],
)
def test_what_postgresql_cannot_store_is_refused_naming_where(text, problem):
    assert refusal(text) == problem


def test_an_escaped_backslash_before_u0000_and_a_surrogate_pair_are_fine():
    assert jsonsafe.loads(json.dumps({"a": "\\u0000", "smile": "\U0001f600"})) == {
        "a": "\\u0000",
        "smile": "\U0001f600",
    }


def test_not_strict_leaves_storage_to_the_caller_but_still_bounds_depth():
    assert jsonsafe.loads('{"a": NaN, "b": "\\u0000"}', strict=False)["b"] == "\x00"
    assert refusal("[" * 100 + "]" * 100, strict=False) == "[0]" * 64 + ": nested deeper than 64 levels"


def test_syntax_errors_stay_json_decode_errors():
    with pytest.raises(json.JSONDecodeError):
        jsonsafe.loads('{"a": ')


def test_storage_problem_walks_deep_values_without_recursion():
    deep: list = []
    for _ in range(100_000):
        deep = [deep]
    assert jsonsafe.storage_problem({"x": deep}).endswith(": nested deeper than 64 levels")
    assert jsonsafe.storage_problem({"x": [1.5, "ok", None, True, {"y": 2}]}) == ""


# --- The cleaner: one walk, a lossy and a lossless variant ------------------------------


def test_the_lossy_cleaner_makes_nan_and_infinity_null_and_leaves_other_values_as_they_are():
    from decimal import Decimal

    value = {"a\x00": [float("nan"), float("inf"), float("-inf"), 1.5, "x\x00\ud800"], "n": Decimal("2.5")}
    assert jsonsafe.storable_lossy(value) == {"a": [None, None, None, 1.5, "x?"], "n": Decimal("2.5")}


def test_the_lossless_cleaner_keeps_nan_and_infinity_as_text_and_says_what_it_changed():
    from decimal import Decimal

    notes = []
    value = {"a\x00": [float("nan"), float("inf"), float("-inf"), 1.5, "x\ud800"], "n": Decimal("2.5")}
    cleaned = jsonsafe.storable_lossless(value, note=notes.append)
    assert cleaned == {"a": ["NaN", "Infinity", "-Infinity", 1.5, "x?"], "n": "2.5"}
    assert set(notes) == {jsonsafe.NUL_REMOVED, jsonsafe.NOT_FINITE_AS_TEXT, jsonsafe.SURROGATES_REPLACED}
    assert jsonsafe.storage_problem(cleaned) == ""


@pytest.mark.parametrize("clean", [jsonsafe.storable_lossy, jsonsafe.storable_lossless])
def test_both_cleaners_cut_nesting_beyond_the_limit_at_the_same_level(clean):
    def nested(depth):
        value = []
        for _ in range(depth - 1):
            value = [value]
        return value

    assert clean(nested(jsonsafe.MAX_DEPTH)) == nested(jsonsafe.MAX_DEPTH)
    cut = clean(nested(jsonsafe.MAX_DEPTH + 1))
    for _ in range(jsonsafe.MAX_DEPTH - 1):
        (cut,) = cut
    assert cut == [jsonsafe.TRUNCATED]
    assert jsonsafe.storable_text("a\x00b") == "ab"


# --- JSON held in a text -----------------------------------------------------------------


@pytest.mark.parametrize(
    "value, parsed",
    [
        (' {"a": [1, 2]} ', {"a": [1, 2]}),
        ("42", "42"),
        ("true", "true"),
        ("{not json", "{not json"),
        ("", ""),
        ({"a": 1}, {"a": 1}),
        (None, None),
    ],
)
def test_a_json_object_or_array_held_in_a_text_is_parsed_and_anything_else_kept(value, parsed):
    assert jsonsafe.json_from_text(value) == parsed


def test_json_read_from_a_text_is_not_cleaned_the_caller_chooses_a_cleaner():
    one, nan = jsonsafe.json_from_text("[1, NaN]")
    assert one == 1 and nan != nan
    assert jsonsafe.storable_lossless(jsonsafe.json_from_text("[1, NaN]")) == [1, "NaN"]


def test_any_json_text_is_parsed_when_asked_and_a_long_or_deep_text_stays_text():
    assert jsonsafe.json_from_text("42", any_json=True) == 42
    assert jsonsafe.json_from_text('"hi"', any_json=True) == "hi"
    assert jsonsafe.json_from_text("[1]", max_chars=4) == [1]
    assert jsonsafe.json_from_text("[1]", max_chars=3) == "[1]"
    deep = "[" * 100_000 + "]" * 100_000
    assert jsonsafe.json_from_text(deep) == deep
