from __future__ import annotations

import difflib

import pytest
from hypothesis import assume, given, settings
from hypothesis import strategies as st

from safepoint.core.unified_diff import (
    FileDiff,
    Hunk,
    apply_file_diff,
    check_applied,
    parse_unified_diff,
    reverse_file_diff,
    touched_paths,
)
from safepoint.errors import ToolFailure

NO_NL = "\\ No newline at end of file"


def split_keepends(text: str) -> list[str]:
    """Lines with their '\\n' only (str.splitlines would also split on '\\r', '\\x0c', ...)."""
    parts = text.split("\n")
    return [p + "\n" for p in parts[:-1]] + ([parts[-1]] if parts[-1] else [])


def make_diff(old: str, new: str, context: int = 3) -> str:
    """difflib's unified diff, with the '\\ No newline at end of file' marker difflib leaves out."""
    out = []
    for line in difflib.unified_diff(split_keepends(old), split_keepends(new), "a/f", "b/f", n=context):
        out.append(line if line.endswith("\n") else line + "\n" + NO_NL + "\n")
    return "".join(out)


def one(text: str) -> FileDiff:
    files = parse_unified_diff(text)
    assert len(files) == 1
    return files[0]


# ---------------------------------------------------------------------------------------------------- parsing


def test_parse_git_style_headers_with_diff_git_and_index_lines() -> None:
    text = (
        "From 1234 Mon Sep 17 00:00:00 2001\n"
        "Subject: [PATCH] tweak\n"
        "---\n"
        " src/x.py | 2 +-\n"
        "diff --git a/src/x.py b/src/x.py\n"
        "index 83db48f..bf269f4 100644\n"
        "--- a/src/x.py\n"
        "+++ b/src/x.py\n"
        "@@ -1,3 +1,3 @@ def f():\n"
        " one\n"
        "-two\n"
        "+TWO\n"
        " three\n"
        "diff --git a/new.txt b/new.txt\n"
        "new file mode 100644\n"
        "index 0000000..e69de29\n"
        "--- /dev/null\n"
        "+++ b/new.txt\n"
        "@@ -0,0 +1 @@\n"
        "+hello\n"
        "diff --git a/gone.txt b/gone.txt\n"
        "deleted file mode 100644\n"
        "--- a/gone.txt\n"
        "+++ /dev/null\n"
        "@@ -1,2 +0,0 @@\n"
        "-bye\n"
        "-now\n"
        "-- \n"
        "2.43.0\n"
    )
    files = parse_unified_diff(text)
    assert [(f.old_path, f.new_path) for f in files] == [
        ("src/x.py", "src/x.py"),
        (None, "new.txt"),
        ("gone.txt", None),
    ]
    assert files[0].hunks == (
        Hunk(old_start=1, old_len=3, new_start=1, new_len=3, lines=(" one", "-two", "+TWO", " three")),
    )
    assert files[1].hunks[0].lines == ("+hello",)
    assert (files[1].hunks[0].new_start, files[1].hunks[0].new_len) == (1, 1)
    assert files[2].hunks[0].lines == ("-bye", "-now")
    assert touched_paths(text) == ["src/x.py", "new.txt", "gone.txt"]


def test_parse_plain_paths_with_timestamps_keep_their_names() -> None:
    text = (
        "--- lib/x.c.orig\t2024-01-01 10:00:00.000000000 +0000\n"
        "+++ lib/x.c\t2024-01-02 10:00:00.000000000 +0000\n"
        "@@ -1 +1 @@\n"
        "-a\n"
        "+b\n"
    )
    diff = one(text)
    assert (diff.old_path, diff.new_path) == ("lib/x.c.orig", "lib/x.c")
    assert touched_paths(text) == ["lib/x.c", "lib/x.c.orig"]


def test_parse_git_quoted_path_and_path_with_space() -> None:
    text = (
        '--- "a/t\\303\\251st\\tx.txt"\n'
        '+++ "b/t\\303\\251st\\tx.txt"\n'
        "@@ -1 +1 @@\n-a\n+b\n"
        "--- a/with space.txt\t\n"
        "+++ b/with space.txt\t\n"
        "@@ -1 +1 @@\n-a\n+b\n"
    )
    assert [(f.old_path, f.new_path) for f in parse_unified_diff(text)] == [
        ("tést\tx.txt", "tést\tx.txt"),
        ("with space.txt", "with space.txt"),
    ]


def test_lines_that_look_like_headers_inside_a_hunk_are_hunk_lines() -> None:
    text = "--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n--- a/x\n+++ b/x\n-\n+\n"
    diff = one(text)
    assert diff.hunks[0].lines == ("--- a/x", "+++ b/x", "-", "+")
    assert apply_file_diff(diff, b"-- a/x\n\n") == b"++ b/x\n\n"


def test_an_empty_line_in_a_hunk_is_an_empty_context_line() -> None:
    diff = one("--- a/f\n+++ b/f\n@@ -1,3 +1,3 @@\n a\n\n-b\n+c\n")
    assert diff.hunks[0].lines == (" a", " ", "-b", "+c")
    assert apply_file_diff(diff, b"a\n\nb\n") == b"a\n\nc\n"


def test_text_without_a_diff_parses_to_nothing() -> None:
    assert parse_unified_diff("") == []
    assert parse_unified_diff("just a message\n---\nnothing here\n") == []
    assert touched_paths("just a message\n") == []


@pytest.mark.parametrize(
    ("text", "line", "words"),
    [
        ("--- a/f\n+++ b/f\n@@ -1 +1\n-a\n+b\n", 3, "bad hunk header"),
        ("--- a/f\n+++ b/f\n@@ -x +1 @@\n-a\n+b\n", 3, "bad hunk header"),
        ("--- a/f\n+++ b/f\n-a\n+b\n", 3, "expected a hunk header"),
        ("--- a/f\n+++ b/f\n", 3, "expected a hunk header"),
        ("--- a/f\n@@ -1 +1 @@\n-a\n+b\n", 2, "without a '--- old' / '+++ new' file header"),
        ("@@ -1 +1 @@\n-a\n+b\n", 1, "without a '--- old' / '+++ new' file header"),
        ("--- /dev/null\n+++ /dev/null\n@@ -0,0 +1 @@\n+a\n", 1, "both sides"),
        ("--- \n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n", 1, "without a path"),
        ('--- "a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n', 1, "unterminated quoted path"),
        ("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+b\n", 6, "ends inside the hunk at line 3"),
        ("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+b\n@@ -5 +5 @@\n-c\n+d\n", 6, "fewer lines than"),
        ("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n-b\n+c\n", 5, "more old lines"),
        ("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n+c\n", 6, "undercounts"),
        ("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n c\n", 6, "undercounts"),
        ("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n*b\n", 5, "expected a hunk line"),
        ("--- a/f\n+++ b/f\n@@ -1,2 +1 @@\n-a\n" + NO_NL + "\n-b\n+c\n", 6, "follows the old side"),
        ("--- a/f\n+++ b/f\n@@ -1 +1 @@\n" + NO_NL + "\n-a\n+b\n", 4, "does not follow a hunk line"),
        ("--- a/f\n+++ b/f\n@@ -5 +5 @@\n-a\n+b\n@@ -1 +1 @@\n-c\n+d\n", 6, "out of order"),
        ("--- /dev/null\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n", 3, "from /dev/null has old lines"),
        ("--- a/f\n+++ /dev/null\n@@ -1 +1 @@\n-a\n+b\n", 3, "to /dev/null has new lines"),
        ("--- a/f\n+++ b/f\n@@ -0,0 +0,0 @@\n", 3, "empty hunk"),
        ("--- a/f\n+++ b/f\n@@ -0,1 +1 @@\n-a\n+b\n", 3, "at line 0"),
    ],
)
def test_malformed_diffs_raise_one_line_with_the_line_number(text: str, line: int, words: str) -> None:
    with pytest.raises(ToolFailure) as caught:
        parse_unified_diff(text)
    message = str(caught.value)
    assert message.startswith(f"malformed diff at line {line}: ")
    assert words in message
    assert "\n" not in message
    assert touched_paths(text) == []


# --------------------------------------------------------------------------------------------------- applying


def test_creation_from_dev_null() -> None:
    diff = one("--- /dev/null\n+++ b/new.txt\n@@ -0,0 +1,2 @@\n+hello\n+world\n")
    assert apply_file_diff(diff, None) == b"hello\nworld\n"
    with pytest.raises(ToolFailure, match=r"new\.txt: the diff creates it but it already exists"):
        apply_file_diff(diff, b"hello\nworld\n")


def test_deletion_to_dev_null() -> None:
    diff = one("--- a/old.txt\n+++ /dev/null\n@@ -1,2 +0,0 @@\n-bye\n-now\n")
    assert apply_file_diff(diff, b"bye\nnow\n") is None
    with pytest.raises(ToolFailure, match=r"old\.txt: the diff deletes it but the file has lines"):
        apply_file_diff(diff, b"bye\nnow\nmore\n")
    with pytest.raises(ToolFailure, match=r"old\.txt: the file does not exist"):
        apply_file_diff(diff, None)


def test_modification_with_several_hunks() -> None:
    old = "".join(f"line {i}\n" for i in range(1, 31))
    new = old.replace("line 3\n", "line three\n").replace("line 15\n", "").replace("line 28\n", "line 28\nextra\n")
    text = make_diff(old, new)
    diff = one(text)
    assert len(diff.hunks) == 3
    assert apply_file_diff(diff, old.encode()) == new.encode()
    assert apply_file_diff(reverse_file_diff(diff), new.encode()) == old.encode()


def test_hunks_match_at_an_offset_nearest_first() -> None:
    diff = one("--- a/f\n+++ b/f\n@@ -3,3 +3,3 @@\n a\n-b\n+B\n c\n@@ -10,2 +10,2 @@\n-x\n+X\n y\n")
    body = "a\nb\nc\n" + "z\n" * 5 + "x\ny\n"
    # Stated at line 3; 4 extra lines on top put the first hunk at +4, and the second inherits that offset.
    shifted = "top\n" * 4 + body
    assert (
        apply_file_diff(diff, shifted.encode())
        == ("top\n" * 4 + body.replace("b\n", "B\n").replace("x\n", "X\n")).encode()
    )
    # Two copies of the first hunk's lines: the one nearest the stated line wins, forward before backward.
    twice = "a\nb\nc\n" + "a\nb\nc\n" + "q\n" * 10 + "x\ny\n"
    assert apply_file_diff(diff, twice.encode()) == ("a\nb\nc\n" + "a\nB\nc\n" + "q\n" * 10 + "X\ny\n").encode()
    earlier = "a\nb\nc\n" + "q\n" * 10 + "x\ny\n"
    assert apply_file_diff(diff, earlier.encode()) == ("a\nB\nc\n" + "q\n" * 10 + "X\ny\n").encode()


def test_no_fuzz_a_changed_context_line_fails_naming_the_file_and_hunk() -> None:
    diff = one("--- a/src/app.py\n+++ b/src/app.py\n@@ -1,3 +1,3 @@\n a\n-b\n+B\n c\n")
    with pytest.raises(ToolFailure) as caught:
        apply_file_diff(diff, b"a\nb\nC\n")
    message = str(caught.value)
    assert "patch does not apply to src/app.py" in message
    assert "hunk 1 of 1 (@@ -1,3 +1,3 @@)" in message
    assert "regenerate the diff" in message
    assert "\n" not in message


def test_trailing_whitespace_and_crlf_are_not_ignored() -> None:
    diff = one("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n")
    for content in (b"a \n", b"a\r\n", b"a"):
        with pytest.raises(ToolFailure, match="does not apply to f"):
            apply_file_diff(diff, content)


def test_no_newline_at_end_added_and_removed() -> None:
    with_nl, without_nl = "x\ny\n", "x\ny"
    remove_nl = make_diff(with_nl, without_nl)
    assert remove_nl.endswith("+y\n" + NO_NL + "\n")
    diff = one(remove_nl)
    assert diff.hunks[0].new_no_newline and not diff.hunks[0].old_no_newline
    assert apply_file_diff(diff, with_nl.encode()) == without_nl.encode()
    assert apply_file_diff(reverse_file_diff(diff), without_nl.encode()) == with_nl.encode()

    add_nl = make_diff(without_nl, with_nl)
    diff = one(add_nl)
    assert diff.hunks[0].old_no_newline and not diff.hunks[0].new_no_newline
    assert apply_file_diff(diff, without_nl.encode()) == with_nl.encode()
    # The old side says "no newline at the end": a file that has one does not match.
    with pytest.raises(ToolFailure):
        apply_file_diff(diff, with_nl.encode())


def test_no_newline_on_a_context_line_means_both_sides() -> None:
    diff = one("--- a/f\n+++ b/f\n@@ -1,2 +1,2 @@\n-a\n+b\n end\n" + NO_NL + "\n")
    hunk = diff.hunks[0]
    assert hunk.old_no_newline and hunk.new_no_newline
    assert apply_file_diff(diff, b"a\nend") == b"b\nend"
    with pytest.raises(ToolFailure):
        apply_file_diff(diff, b"a\nend\n")


def test_a_line_without_newline_cannot_land_mid_file() -> None:
    diff = one("--- a/f\n+++ b/f\n@@ -1 +1 @@\n-a\n+b\n" + NO_NL + "\n")
    assert apply_file_diff(diff, b"a\n") == b"b"
    with pytest.raises(ToolFailure):
        apply_file_diff(diff, b"a\nmore\n")


def test_creation_of_a_file_without_final_newline() -> None:
    diff = one("--- /dev/null\n+++ b/f\n@@ -0,0 +1,2 @@\n+a\n+b\n" + NO_NL + "\n")
    assert apply_file_diff(diff, None) == b"a\nb"
    assert check_applied(diff, b"a\nb") == "applied"
    assert check_applied(diff, b"a\nb\n") == "neither"


def test_crlf_content_keeps_its_line_endings() -> None:
    old = "one\r\ntwo\r\nthree\r\n"
    new = "one\r\n2\r\nthree\r\nfour\r\n"
    text = make_diff(old, new)
    assert "-two\r\n" in text
    diff = one(text)
    assert "-two\r" in diff.hunks[0].lines
    assert apply_file_diff(diff, old.encode()) == new.encode()
    assert apply_file_diff(reverse_file_diff(diff), new.encode()) == old.encode()
    # The same change with LF endings does not match CRLF content.
    lf = one(make_diff(old.replace("\r\n", "\n"), new.replace("\r\n", "\n")))
    with pytest.raises(ToolFailure):
        apply_file_diff(lf, old.encode())


def test_mixed_endings_and_a_lone_cr_in_a_line() -> None:
    old = "a\r\nb\rc\nd"
    new = "a\r\nb\rC\nd"
    diff = one(make_diff(old, new))
    assert apply_file_diff(diff, old.encode()) == new.encode()


def test_invalid_utf8_bytes_round_trip() -> None:
    old = b"caf\xe9\n\xff\xfe\nend\n"
    new = b"caf\xe9\nchanged\nend\n"
    text = make_diff(old.decode("utf-8", "surrogateescape"), new.decode("utf-8", "surrogateescape"))
    diff = one(text)
    assert apply_file_diff(diff, old) == new
    assert apply_file_diff(reverse_file_diff(diff), new) == old


def test_reverse_swaps_paths_flags_and_puts_removed_lines_first() -> None:
    diff = FileDiff(
        old_path="a.txt",
        new_path="b.txt",
        hunks=(
            Hunk(
                old_start=2,
                old_len=2,
                new_start=2,
                new_len=1,
                lines=(" k", "-x", "-y", "+z"),
                new_no_newline=True,
            ),
        ),
    )
    back = reverse_file_diff(diff)
    assert (back.old_path, back.new_path) == ("b.txt", "a.txt")
    assert back.hunks == (
        Hunk(
            old_start=2,
            old_len=1,
            new_start=2,
            new_len=2,
            lines=(" k", "-z", "+x", "+y"),
            old_no_newline=True,
        ),
    )
    assert reverse_file_diff(back) == diff


def test_check_applied_all_three_states() -> None:
    diff = one(make_diff("a\nb\nc\n", "a\nB\nc\n"))
    assert check_applied(diff, b"a\nb\nc\n") == "applies"
    assert check_applied(diff, b"a\nB\nc\n") == "applied"
    assert check_applied(diff, b"a\nX\nc\n") == "neither"
    assert check_applied(diff, None) == "neither"


def test_check_applied_creation_and_deletion() -> None:
    create = one("--- /dev/null\n+++ b/n\n@@ -0,0 +1 @@\n+hi\n")
    assert check_applied(create, None) == "applies"
    assert check_applied(create, b"hi\n") == "applied"
    assert check_applied(create, b"other\n") == "neither"
    delete = reverse_file_diff(create)
    assert check_applied(delete, b"hi\n") == "applies"
    assert check_applied(delete, None) == "applied"
    assert check_applied(delete, b"other\n") == "neither"


def test_check_applied_prefers_applies_when_both_directions_apply() -> None:
    # Adding a duplicate line: the result still contains the context, so the diff applies again (as with git).
    diff = one(make_diff("a\n", "a\na\n"))
    assert apply_file_diff(reverse_file_diff(diff), b"a\na\n") == b"a\n"
    assert check_applied(diff, b"a\na\n") == "applies"


def test_zero_context_hunks() -> None:
    old = "a\nb\nc\nd\n"
    new = "x\na\nc\nd\ny"
    diff = one(make_diff(old, new, context=0))
    assert all(not line.startswith(" ") for hunk in diff.hunks for line in hunk.lines)
    assert apply_file_diff(diff, old.encode()) == new.encode()
    assert apply_file_diff(reverse_file_diff(diff), new.encode()) == old.encode()


def test_touched_paths_deduplicates_in_order() -> None:
    text = (
        "--- a/one\n+++ b/one\n@@ -1 +1 @@\n-a\n+b\n"
        "--- a/two\n+++ b/two\n@@ -1 +1 @@\n-a\n+b\n"
        "--- a/one\n+++ b/one\n@@ -5 +5 @@\n-a\n+b\n"
        "--- a/old\n+++ b/renamed\n@@ -1 +1 @@\n-a\n+b\n"
    )
    assert touched_paths(text) == ["one", "two", "renamed", "old"]


# ------------------------------------------------------------------------------------------------- properties

_line_text = st.one_of(
    st.sampled_from(["a", "b", "c", "", " ", "x\r", "-- a/f", "++ b/f", "\\", "@@ -1 +1 @@", "-", "+"]),
    st.text(st.characters(codec="utf-8", exclude_characters="\n"), max_size=6),
)
_lines = st.lists(_line_text, max_size=12)


def _content(lines: list[str], final_newline: bool) -> str:
    text = "".join(line + "\n" for line in lines)
    return text if final_newline or not text else text[:-1]


def _check_round_trip(old: str, new: str, context: int) -> None:
    text = make_diff(old, new, context)
    files = parse_unified_diff(text)
    if old == new:
        assert files == []
        return
    assert len(files) == 1
    diff = files[0]
    assert (diff.old_path, diff.new_path) == ("f", "f")
    assert touched_paths(text) == ["f"]
    old_bytes, new_bytes = old.encode(), new.encode()
    assert apply_file_diff(diff, old_bytes) == new_bytes
    back = reverse_file_diff(diff)
    assert apply_file_diff(back, new_bytes) == old_bytes
    assert reverse_file_diff(back) == diff
    assert check_applied(diff, old_bytes) == "applies"
    try:
        apply_file_diff(diff, new_bytes)
    except ToolFailure:
        assert check_applied(diff, new_bytes) == "applied"
    else:  # the result still holds the diff's old side (e.g. a duplicated line): it would apply again
        assert check_applied(diff, new_bytes) == "applies"


@settings(max_examples=300)
@given(old=_lines, new=_lines, context=st.integers(0, 3))
def test_property_round_trip_with_final_newlines(old: list[str], new: list[str], context: int) -> None:
    _check_round_trip(_content(old, True), _content(new, True), context)


@settings(max_examples=300)
@given(old=_lines, new=_lines, old_nl=st.booleans(), new_nl=st.booleans(), context=st.integers(0, 3))
def test_property_round_trip_with_or_without_final_newline(
    old: list[str], new: list[str], old_nl: bool, new_nl: bool, context: int
) -> None:
    _check_round_trip(_content(old, old_nl), _content(new, new_nl), context)


@settings(max_examples=80)
@given(
    old=st.lists(_line_text, min_size=1, max_size=12, unique=True),
    new=_lines,
    pad=st.lists(_line_text, min_size=1, max_size=5),
    context=st.integers(1, 3),
)
def test_property_lines_added_on_top_shift_every_hunk(
    old: list[str], new: list[str], pad: list[str], context: int
) -> None:
    # Old lines are distinct and the padding shares none of them, so each hunk matches in exactly one place.
    assume(not set(pad) & set(old))
    old_text, new_text = _content(old, True), _content(new, True)
    files = parse_unified_diff(make_diff(old_text, new_text, context))
    assume(files)
    top = _content(pad, True)
    blind = any(
        not any(line.startswith(" ") for line in hunk.lines) and any(line.startswith("-") for line in hunk.lines)
        for hunk in files[0].hunks
    )
    if blind:  # a hunk that removes lines with no context around them holds to its stated line, like `git apply`
        with pytest.raises(ToolFailure, match="no context lines"):
            apply_file_diff(files[0], (top + old_text).encode())
        return
    assert apply_file_diff(files[0], (top + old_text).encode()) == (top + new_text).encode()
    assert check_applied(files[0], (top + new_text).encode()) in ("applied", "applies")


def test_a_zero_context_hunk_edits_the_line_it_states_not_the_nearest_identical_one() -> None:
    # Two identical lines; a `diff -U0` of a change to the second one must not edit the first.
    old = "x = 1\nkeep\nx = 1\n"
    new = "x = 1\nkeep\nx = 2\n"
    diff = one(make_diff(old, new, context=0))
    assert all(not line.startswith(" ") for hunk in diff.hunks for line in hunk.lines)
    assert apply_file_diff(diff, old.encode()) == new.encode()
    # The same hunk stated one line off (as a model writes it from memory) is refused, not moved to a neighbour.
    shifted = "--- a/f\n+++ b/f\n@@ -2 +2 @@\n-x = 1\n+x = 2\n"
    with pytest.raises(ToolFailure, match=r"no context lines.*line 2"):
        apply_file_diff(one(shifted), old.encode())
    # A pure deletion and a multi-line replacement without context are held to their stated lines too.
    with pytest.raises(ToolFailure, match="no context lines"):
        apply_file_diff(one("--- a/f\n+++ b/f\n@@ -2,2 +1,0 @@\n-x = 1\n-keep\n"), old.encode())
    assert apply_file_diff(one("--- a/f\n+++ b/f\n@@ -2,2 +1,0 @@\n-keep\n-x = 1\n"), old.encode()) == b"x = 1\n"


def test_a_hunk_with_context_still_finds_its_lines_when_the_file_moved() -> None:
    old = "a\nb\nc\nd\ne\n"
    diff = one(make_diff(old, old.replace("c\n", "C\n"), context=1))
    assert apply_file_diff(diff, ("top\n" * 3 + old).encode()) == ("top\n" * 3 + old.replace("c\n", "C\n")).encode()
