"""`make demo` runs `safepoint demo`: it must keep working, and it checks its own claims (exit 0 only if true)."""

from __future__ import annotations

import subprocess

from .conftest import PY, cli_env


def test_the_demo_kills_resumes_and_rolls_back_without_sending_twice():
    result = subprocess.run([PY, "-m", "safepoint", "demo"], env=cli_env(), capture_output=True, text=True, timeout=180)
    assert result.returncode == 0, result.stdout[-2000:] + result.stderr[-2000:]
    assert "notification: sent once" in result.stdout
    assert "killed agent process" in result.stdout
    assert "kept (a conflict for you to resolve)" in result.stdout
