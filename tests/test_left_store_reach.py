"""The hold rule knows where the store really is (issue 11 §4): a store opened with ``--store PATH`` outside the
workspace, or under another folder name inside it, is protected from commands (``rm -rf``, ``mv``, redirections,
``chmod -R``, through ``..`` or a ``cd``) as the default ``.agent-runtime`` is; paths beside it are not held. End
to end, a held command never runs without a decision, and the store is left whole."""

from __future__ import annotations

import pytest

import safepoint
from safepoint.core.command_reach import DEFAULT_PROTECTED, classify_with_reach, protected_for
from safepoint.core.commands import DEFAULT_COMMAND_RULES

OUTSIDE = protected_for("/home/u/stores/proj", "/home/u/ws")  # --store /home/u/stores/proj
RENAMED = protected_for("/home/u/ws/.sp-state", "/home/u/ws")  # --store .sp-state inside the workspace
PLAIN_NAME = protected_for("/home/u/ws/state", "/home/u/ws")  # a folder name without a dot


def held(command: str, protected=DEFAULT_PROTECTED) -> bool:
    return "store_or_git" in classify_with_reach(command, DEFAULT_COMMAND_RULES, protected).side_effects


@pytest.mark.parametrize(
    ("command", "protected"),
    [
        ("rm -rf /home/u/stores/proj", OUTSIDE),
        ("rm -rf ../stores/proj/runs", OUTSIDE),
        ("cd .. && rm -rf stores/proj", OUTSIDE),
        ("mv /home/u/stores/proj /tmp/gone", OUTSIDE),
        ("echo x > /home/u/stores/proj/runs/r/owner.json", OUTSIDE),
        ("truncate -s 0 /home/u/stores/proj/runs/r/ledger.jsonl", OUTSIDE),
        ("chmod -R 777 /home/u/stores/proj", OUTSIDE),
        ("rm -rf /HOME/u/Stores/Proj", OUTSIDE),  # a case-insensitive filesystem
        ("rm -rf /home/u/stores/proj/", OUTSIDE),
        ("rm -rf .sp-state", RENAMED),
        ("rm -rf ./.SP-state/runs", RENAMED),
        ("rm -rf .s*", RENAMED),
        ("cd sub && rm -rf ../.sp-state", RENAMED),
        ("echo x >> .sp-state/runs/r/ledger.jsonl", RENAMED),
        ("rm -rf state", PLAIN_NAME),
        ("mv state old-state", PLAIN_NAME),
        ("rm -rf .git", OUTSIDE),  # .git stays protected wherever the store is
    ],
)
def test_a_command_that_reaches_the_store_where_it_is_is_held(command, protected):
    assert held(command, protected)


@pytest.mark.parametrize(
    ("command", "protected"),
    [
        ("rm -rf /home/u/stores/project2", OUTSIDE),  # a name that only begins like it
        ("rm -rf /home/u/stores/other", OUTSIDE),
        ("rm -rf build", OUTSIDE),
        ("cat /home/u/stores/proj/runs/r/owner.json", OUTSIDE),  # reading is not writing
        ("rm -rf src/state", PLAIN_NAME),  # another folder of that name, elsewhere
        ("rm -rf *", RENAMED),  # no dotglob: bash does not match .sp-state
        ("echo x > notes.txt", RENAMED),
    ],
)
def test_a_command_beside_it_is_not_held(command, protected):
    assert not held(command, protected)


def test_only_the_default_name_is_known_without_a_location():
    assert held("rm -rf .agent-runtime") and not held("rm -rf /home/u/stores/proj")


@pytest.mark.parametrize("where", ["outside", "renamed"])
def test_a_run_on_a_store_opened_elsewhere_holds_the_command_that_would_delete_it(tmp_path, where):
    workspace = tmp_path / "ws"
    workspace.mkdir()
    store = tmp_path / "stores" / "proj" if where == "outside" else workspace / ".sp-state"
    target = str(store) if where == "outside" else ".sp-state"
    sp = safepoint.open(f"file:{store}", workspace=str(workspace))
    try:
        with sp.start("t", run_id="r", approval="none", approval_timeout_s=0.2) as run:
            result = run.call_result("run_command", {"command": f"rm -rf {target}"}, call_id="c1")
            moved = run.call_result("run_command", {"command": f"mv {target} {tmp_path / 'gone'}"}, call_id="c2")
            ok = run.call_result("run_command", {"command": "echo fine > out.txt"}, call_id="c3")
        assert result.status != "succeeded" and "approval" in result.observation, result.observation
        assert moved.status != "succeeded" and "approval" in moved.observation, moved.observation
        assert ok.status == "succeeded", ok.observation
        assert (store / "runs" / "r").is_dir() and not (tmp_path / "gone").exists()
        assert [e.status for e in sp.ledger("r")][:2] != ["succeeded", "succeeded"]
    finally:
        sp.close()
