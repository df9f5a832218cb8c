"""Word and line diffs (``runs.compare.text``): the word diff spells both texts, the
side-by-side view pairs changed lines, and long outputs are cut with a flag."""

from __future__ import annotations

from runs.compare import text


def test_word_diff_spells_both_texts_and_separates_words_whitespace_and_punctuation():
    a, b = "the cat sat,\non the mat", "the dog sat;\non the  mat!"

    segments = text.word_diff(a, b)

    assert segments == [
        {"op": "equal", "text": "the "},
        {"op": "delete", "text": "cat"},
        {"op": "insert", "text": "dog"},
        {"op": "equal", "text": " sat"},
        {"op": "delete", "text": ","},
        {"op": "insert", "text": ";"},
        {"op": "equal", "text": "\non the"},
        {"op": "delete", "text": " "},
        {"op": "insert", "text": "  "},
        {"op": "equal", "text": "mat"},
        {"op": "insert", "text": "!"},
    ]
    assert "".join(s["text"] for s in segments if s["op"] != "insert") == a
    assert "".join(s["text"] for s in segments if s["op"] != "delete") == b


def test_side_by_side_pairs_changed_lines_and_lists_added_and_removed_ones():
    rows = text.side_by_side("one\ntwo\nthree", "one\n2\nthree\nfour")

    assert [(row["op"], row["a"] and row["a"]["number"], row["b"] and row["b"]["number"]) for row in rows] == [
        ("equal", 1, 1),
        ("changed", 2, 2),
        ("equal", 3, 3),
        ("added", None, 4),
    ]
    assert rows[1]["a"]["segments"] == [{"op": "delete", "text": "two"}]
    assert rows[1]["b"]["segments"] == [{"op": "insert", "text": "2"}]


def test_long_outputs_are_cut_with_a_flag_and_still_diffed():
    words = [f"w{n % 97}" for n in range(12_000)]
    a = " ".join(words)
    b = " ".join(words[:5000] + ["new"] + words[5001:])  # as long as the word it replaces

    output = text.output_diff(a, b)

    assert output["a"]["truncated"] and len(output["a"]["text"]) == text.MAX_TEXT_CHARS
    assert [s for s in output["inline"] if s["op"] != "equal"] == [
        {"op": "delete", "text": words[5000]},
        {"op": "insert", "text": "new"},
    ]
