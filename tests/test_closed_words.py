"""How a closed run's end is said (issue 9 §4): every command that names it says what happened in the words
``status`` and ``explain`` use: "cancelled by USER at T", "context reset by USER at T", or the seed's terminal
status (kept verbatim in the records) without the stray full stop it had inside a sentence."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import cli_env, safepoint_in_process
from tests.test_ledger_damage import NOTIFY, RUN, _killed_run


def _closed(tmp_path: Path, *how: str) -> tuple[str, str]:
    """A run killed after a call that never repeats, then closed ``how``; what resume said as it closed it (or
    as it refused), and what a second resume says."""
    _killed_run(tmp_path, NOTIFY)
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "outbox.jsonl"))
    first = safepoint_in_process(*how, "-w", tmp_path / "ws", env=env)
    again = safepoint_in_process("resume", RUN, "-w", tmp_path / "ws", env=env)
    assert again.returncode != 0
    return first.stderr, again.stderr


def test_a_run_restart_recovery_closed_says_so_without_a_stray_full_stop(tmp_path):
    first, again = _closed(tmp_path, "resume", RUN, "--model", "another-model")
    for said in (first, again):
        assert "Closed during restart recovery without reporting a result, at " in said, said
        assert "result.," not in said and "result. See" not in said and "\n" not in said.strip(), said
    assert "written under model" in first  # why it was not resumed, as before


@pytest.mark.parametrize(("verb", "said"), [("cancel", "cancelled by "), ("reset", "context reset by ")])
def test_resume_after_a_person_closed_the_run_names_the_person_and_the_time(tmp_path, verb, said):
    _, again = _closed(tmp_path, verb, RUN)
    status = safepoint_in_process("status", RUN, "-w", tmp_path / "ws", env=cli_env()).stdout
    detail = again.split("is closed (", 1)[1].split(")", 1)[0]
    assert detail.startswith(said) and " at " in detail, again
    assert detail in " ".join(status.split()), (detail, status)  # the very words status shows
