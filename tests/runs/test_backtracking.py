"""Patterns that backtrack catastrophically are refused by reading them, the same way
on every machine; patterns that only look alike are accepted."""

import pytest

from runs.services.backtracking import catastrophic_backtracking
from runs.services.redaction import validate_custom_pattern


@pytest.mark.parametrize(
    ("pattern", "reason"),
    [
        (r"^(a+)+$", "nested repetition"),
        (r"^(b+)+$", "nested repetition"),
        (r"(a*)*", "nested repetition"),
        (r"^((a+)+)+$", "nested repetition"),
        (r"(x+x+)+y", "nested repetition"),
        (r"(\d+\s?)+$", "nested repetition"),
        (r"(\s?\w+)+", "nested repetition"),
        (r"^(\d{1,3})+$", "nested repetition"),
        (r"(?:.*a){12}", "nested repetition"),
        (r"(a|a)+", "alternatives that can match the same text"),
        (r"^(a|aa)+$", "alternatives that can match the same text"),
        (r"(\w|\d)+", "alternatives that can match the same text"),
        (r"(?i)(A|a)+", "alternatives that can match the same text"),
    ],
)
def test_a_catastrophic_pattern_is_refused_with_the_shape_to_rewrite(pattern, reason):
    assert catastrophic_backtracking(pattern) == reason
    with pytest.raises(ValueError, match=f"catastrophic backtracking: {reason}"):
        validate_custom_pattern(pattern)


@pytest.mark.parametrize(
    "pattern",
    [
        r"^ORD-\d{6}$",
        r"ticket-\d+",
        r"\d+\d+",  # polynomial at worst: bounded by the time budget when it runs
        r"(\w+\.)+com",  # the dot ends each iteration
        r"(?:\d{1,3}\.){3}\d{1,3}",
        r"(a?b)+",
        r"(?>a+)+",  # atomic: never backtracked into
        r"(a++)+",  # possessive
        r"sk-[A-Za-z0-9]{20,}",
        r"\b\w+@\w+\.\w+\b",
        r"\p{L}+",
        r"(?P<word>ab)+(?P=word)",
        r"[(]+",
        r"\(a+\)+",
        r"(foo|bar)+",
        r"(?x) a + # a comment with a ( in it",
        r"(?i)secret-[a-z]+",
    ],
)
def test_a_safe_pattern_is_accepted(pattern):
    assert catastrophic_backtracking(pattern) is None
    assert validate_custom_pattern(pattern) == pattern


def test_nested_repetition_is_refused_before_the_engine_compiles_it():
    # Compiling this takes the `regex` engine seconds (exponential in the nesting): the
    # check reads the text first and refuses it without compiling.
    pattern = "(" * 25 + "a+" + ")+" * 25
    with pytest.raises(ValueError, match="catastrophic backtracking: nested repetition"):
        validate_custom_pattern(pattern)


def test_groups_nested_too_deeply_to_read_are_refused_not_a_crash():
    pattern = "(" * 240 + "a" + ")" * 240
    with pytest.raises(ValueError, match="catastrophic backtracking: groups nested too deeply"):
        validate_custom_pattern(pattern)


@pytest.mark.parametrize("pattern", ["\\", "(", "[a-", "a{2,1}", "(?P<", "*a"])
def test_a_pattern_that_does_not_compile_is_refused_as_invalid(pattern):
    with pytest.raises(ValueError, match="invalid regular expression"):
        validate_custom_pattern(pattern)
