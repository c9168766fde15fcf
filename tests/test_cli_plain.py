"""cli.plain: the status table fits the terminal, keeps every run on its own line, colours only when asked."""

from __future__ import annotations

from safepoint.cli.plain import status_table, table
from safepoint.results import RunSummary


def _row(run_id: str, status: str, task: str, terminal: str | None = None, problems: int = 0) -> RunSummary:
    return RunSummary(
        run_id=run_id,
        status=status,
        terminal_status=terminal,
        task=task,
        step=3,
        calls=12,
        problems=problems,
        created_at="2026-12-01T00:00:00+00:00",
    )


def test_columns_align_and_the_last_is_cut_to_the_width():
    text = table(["a", "bb", "task"], [["1", "x", "t" * 200], ["22", "yyy", "short"]], width=40, colour=False)
    lines = text.splitlines()
    assert all(len(line) <= 40 for line in lines)
    assert lines[0].startswith("a   bb   task")
    assert lines[2].endswith("…") and lines[3].endswith("short")
    assert "\x1b[" not in text


def test_a_closed_run_shows_its_terminal_status_under_its_status_and_colours_only_on_request():
    rows = [_row("r1", "completed", "fix it"), _row("r2", "closed", "other", "user_cancelled", problems=1)]
    plain = status_table(rows, colour=False)
    lines = plain.splitlines()
    assert lines[0].split() == ["run_id", "status", "step", "calls", "problems", "task"]
    assert lines[2].split() == ["r1", "completed", "3", "12", "0", "fix", "it"]
    assert lines[3].split()[:2] == ["r2", "closed"] and lines[4].strip() == "user_cancelled"
    coloured = status_table(rows, colour=True)
    assert "\x1b[32mcompleted" in coloured and "\x1b[31mclosed" in coloured
