"""JSON paths into an output (``evals.scoring.values``)."""

from __future__ import annotations

import pytest

from evals.scoring.values import parse_path, resolve_path

# --- JSON paths ----------------------------------------------------------------------------------


def test_paths_read_keys_and_indexes():
    assert parse_path("a.b[0].c") == ["a", "b", 0, "c"]
    assert parse_path("[1]") == [1] and parse_path("") == []
    document = {"a": {"b": [{"c": 7}, {"c": 8}]}}
    assert resolve_path(document, parse_path("a.b[-1].c")) == 8
    assert resolve_path(document, parse_path("a.b.0.c")) == 7  # a number after a dot indexes a list
    assert resolve_path('{"a": {"b": [1]}}', parse_path("a.b[0]")) == 1  # JSON text is parsed


@pytest.mark.parametrize("path", ["a..b", "a[x]", "a[0", ".a", "a."])
def test_malformed_paths_are_refused(path):
    with pytest.raises(ValueError, match="is not a path"):
        parse_path(path)
