"""The exit codes as documented: every ``SafepointError`` of ``safepoint.errors`` is drawn in its docstring's tree,
with the exit code it really ends with where that is not its parent's, and every ``ExitCode`` is in the README's
exit-code sentence with its number. A new error or code that the user's documentation does not name fails here."""

from __future__ import annotations

import re
from pathlib import Path

import safepoint.errors as errors
from safepoint.errors import ExitCode, SafepointError

README = (Path(__file__).resolve().parent.parent / "README.md").read_text()


def _errors() -> list[type[SafepointError]]:
    return [
        value
        for value in vars(errors).values()
        if isinstance(value, type) and issubclass(value, SafepointError) and value.__module__ == errors.__name__
    ]


def _drawn() -> dict[str, int | None]:
    """Each name of the docstring's tree, with the exit code drawn beside it (None: its parent's)."""
    drawn: dict[str, int | None] = {}
    for line in (errors.__doc__ or "").splitlines():
        found = re.match(r"^\s*[│├└─ ]*([A-Z]\w+)\b\s*(\d+)?", line)
        if found and ("─" in line or found.group(1) == "SafepointError"):
            drawn[found.group(1)] = int(found.group(2)) if found.group(2) else None
    return drawn


def test_every_error_is_in_the_tree_with_its_exit_code():
    drawn = _drawn()
    assert "SafepointError" in drawn and "DiskFullError" in drawn  # the walk reads the tree
    assert [cls.__name__ for cls in _errors() if cls.__name__ not in drawn] == []
    wrong = [
        f"{cls.__name__}: drawn {drawn[cls.__name__]}, ends with {int(cls.exit_code)}"
        for cls in _errors()
        if drawn.get(cls.__name__) is not None and drawn[cls.__name__] != int(cls.exit_code)
    ]
    assert wrong == []
    parent_code = {
        cls: next(b for b in cls.__mro__[1:] if issubclass(b, SafepointError)).exit_code
        for cls in _errors()
        if cls is not SafepointError
    }
    unsaid = [
        cls.__name__ for cls, code in parent_code.items() if cls.exit_code != code and drawn.get(cls.__name__) is None
    ]
    assert unsaid == []


def test_every_exit_code_is_in_the_readme():
    start = README.index("code of `safepoint.ExitCode`")
    sentence = README[start : README.index("anything else", start)]
    missing = [
        code.name
        for code in ExitCode
        if code not in (ExitCode.OK, ExitCode.FAILED) and f" {int(code)} " not in sentence
    ]
    assert missing == []
