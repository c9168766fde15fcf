"""Bash's brace expansion as the command judgement reads it: the cases its quote and escape scanning decides."""

from __future__ import annotations

import pytest

from safepoint.core.command_braces import LIMIT, expand_braces


@pytest.mark.parametrize(
    ("raw", "words"),
    [
        (".{git,agent-runtime}", [".git", ".agent-runtime"]),
        ("a{b,c{d,e}}f", ["abf", "acdf", "acef"]),
        ("x{1..3}", ["x1", "x2", "x3"]),
        ("{08..10}", ["08", "09", "10"]),
        ("{a..e..2}", ["a", "c", "e"]),
        ("'{a,b}'", ["'{a,b}'"]),  # quoted: text
        ('"{a,b}"', ['"{a,b}"']),
        ("\\{a,b}", ["\\{a,b}"]),  # escaped brace: text
        ('"\\"{a,b}"', ['"\\"{a,b}"']),  # an escaped quote does not end the quoted part
        ("{a\\,b,c}", ["a\\,b", "c"]),  # an escaped comma does not split
        ("${x:-{a,b}}", ["${x:-{a,b}}"]),  # a parameter's braces
        ("${x}{a,b}", ["${x}a", "${x}b"]),
        ("{a}", ["{a}"]),  # neither a list nor a sequence
        ("{}", ["{}"]),
        ("'{'{a,b}", ["'{'a", "'{'b"]),
    ],
)
def test_a_word_expands_as_bash_expands_it(raw, words):
    assert expand_braces(raw) == words


def test_past_the_bound_the_words_are_unknown():
    assert expand_braces("{a,b}" * 7) is None  # 128 words
    assert expand_braces("{1..1000}") is None
    assert expand_braces("{a,b}" * 6) is not None and len(expand_braces("{a,b}" * 6) or []) == LIMIT
