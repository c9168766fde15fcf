"""A workspace's own command rules (``.safepoint/commands.toml``): ``safepoint classify`` shows the verdict they
give, and the ``run_command`` tool of a run in that workspace is judged by them."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

import safepoint
from safepoint.api import classify
from safepoint.errors import ConfigError, ExitCode
from tests.conftest import safepoint_in_process

RULES = """
read_only = ["mytool"]

[programs.report]
grade = "read_only"
harmless = ["-v"]
takes_value = ["--out"]
writes_value = ["--out"]

[programs.report.options."--out"]
grade = "local_write"
phrase = "writes the report"
"""


@pytest.fixture
def workspace(tmp_path: Path) -> Path:
    (tmp_path / ".safepoint").mkdir()
    (tmp_path / ".safepoint" / "commands.toml").write_text(RULES)
    return tmp_path


def test_classify_uses_the_workspaces_rules_by_default(workspace: Path) -> None:
    report = classify("mytool --all", workspace=str(workspace))
    assert (report.idempotency, report.replay_policy, report.risk_level) == ("idempotent", "auto", "low")
    assert report.rules == ".safepoint/commands.toml"
    report = classify("report --out r.html data", workspace=str(workspace))
    assert report.replay_policy == "ask"
    assert report.write_targets == ("r.html",)
    assert any("`report --out` writes the report" in r for r in report.reasons)


def test_classify_without_a_rules_file_uses_the_built_in_rules(tmp_path: Path) -> None:
    report = classify("mytool --all", workspace=str(tmp_path))
    assert report.replay_policy == "ask"
    assert report.rules == "built-in"


def test_rules_given_explicitly_replace_the_workspace_lookup(workspace: Path, tmp_path: Path) -> None:
    other = tmp_path / "other.json"
    other.write_text(json.dumps({"read_only": ["othertool"]}))
    report = classify("othertool", workspace=str(workspace), rules=str(other))
    assert report.replay_policy == "auto"
    assert classify("mytool", workspace=str(workspace), rules=str(other)).replay_policy == "ask"


@pytest.mark.parametrize(
    ("content", "fragment"),
    [
        ("read_only = [", "not valid TOML"),
        ('colour = "x"', "unknown key 'colour'"),
        ('[programs.x]\ngrade = "sometimes"', "grade 'sometimes'"),
    ],
)
def test_a_bad_rules_file_is_one_line_naming_it(workspace: Path, content: str, fragment: str) -> None:
    (workspace / ".safepoint" / "commands.toml").write_text(content)
    with pytest.raises(ConfigError) as info:
        classify("ls", workspace=str(workspace))
    assert fragment in str(info.value)
    assert ".safepoint/commands.toml" in str(info.value)


def test_the_run_command_tool_of_a_run_in_the_workspace_honours_its_rules(workspace: Path) -> None:
    sp = safepoint.open(f"file:{workspace / '.agent-runtime'}", workspace=str(workspace))
    try:
        run_command = sp.registry().get("run_command")
        assert run_command.classify({"command": "mytool --all"}).replay_policy == "auto"
        assert run_command.classify({"command": "report --bad"}).replay_policy == "ask"
        assert run_command.capture_hints is not None
        assert run_command.capture_hints({"command": "report --out=r.html x"}) == ["r.html"]
        assert run_command.classify({"command": "sed -n '1e id' f"}).replay_policy == "ask"
    finally:
        sp.store.close()


def test_without_rules_the_run_command_tool_keeps_the_built_in_rules(tmp_path: Path) -> None:
    sp = safepoint.open(f"file:{tmp_path / '.agent-runtime'}", workspace=str(tmp_path))
    try:
        run_command = sp.registry().get("run_command")
        assert run_command.classify({"command": "mytool"}).replay_policy == "ask"
        assert run_command.classify({"command": "ls -la"}).replay_policy == "auto"
    finally:
        sp.store.close()


def test_cli_classify_prints_the_verdict_and_exits_zero(workspace: Path) -> None:
    done = safepoint_in_process("classify", "git diff --output=o.txt; ls", "--workspace", workspace)
    assert done.returncode == 0, done.stderr
    assert "replay_policy: ask" in done.stdout
    assert "write_targets: o.txt" in done.stdout
    assert "`git diff --output` writes a file" in done.stdout


def test_cli_classify_json(workspace: Path) -> None:
    done = safepoint_in_process("classify", "mytool x", "--workspace", workspace, "--json")
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert report["replay_policy"] == "auto"
    assert report["rules"] == ".safepoint/commands.toml"
    assert set(report) >= {"idempotency", "replay_policy", "risk_level", "side_effects", "reasons", "write_targets"}


def test_cli_classify_an_unparsable_line_is_a_verdict_not_an_error(tmp_path: Path) -> None:
    done = safepoint_in_process("classify", 'echo "unterminated', "--workspace", tmp_path, "--json")
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout)["replay_policy"] == "ask"


def test_cli_classify_a_bad_rules_file_exits_with_the_usage_code(tmp_path: Path) -> None:
    done = safepoint_in_process("classify", "ls", "--workspace", tmp_path, "--rules", tmp_path / "missing.toml")
    assert done.returncode == ExitCode.USAGE
    assert done.stderr.count("\n") == 1 and "missing.toml" in done.stderr
    assert "Traceback" not in done.stderr


def test_the_readmes_example_rules_load_and_do_what_it_says(tmp_path: Path) -> None:
    readme = (Path(__file__).resolve().parent.parent / "README.md").read_text()
    section = readme.split("### How `run_command` lines are judged, and your own rules", 1)[1]
    example = section.split("```toml\n", 1)[1].split("```", 1)[0]
    (tmp_path / "rules.toml").write_text(example)
    rules = str(tmp_path / "rules.toml")
    assert classify("mytool --x", workspace=str(tmp_path), rules=rules).replay_policy == "auto"
    assert classify("make release", workspace=str(tmp_path), rules=rules).replay_policy == "never"
    assert classify("mycli show", workspace=str(tmp_path), rules=rules).replay_policy == "auto"
    report = classify("report --out r.txt -v", workspace=str(tmp_path), rules=rules)
    assert report.replay_policy == "ask" and report.write_targets == ("r.txt",)
    assert classify("rg --my-new-flag x", workspace=str(tmp_path), rules=rules).replay_policy == "auto"
    assert classify("git status --short", workspace=str(tmp_path), rules=rules).replay_policy == "ask"
