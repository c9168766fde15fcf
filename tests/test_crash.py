"""Crash tests: real ``safepoint`` processes killed with SIGKILL, then resumed.

Every run and resume is a child process (``python -m safepoint ...``); what they left is read back through the
CLI called in process (``explain``, ``ledger``). Each case is its own test with its own workspace. Checked is
what a crash must never break: the run completes on resume, a non-idempotent notification is never sent twice,
the workspace ends byte-identical to an uninterrupted run's, the ledger accounts for every call and leaves none
``started``.

1. every named fault point (``failpoints.POINTS``), at several occurrences and with ``:tool`` filters; a command
   with effects interrupted mid-call waits for ``--replay`` / ``--skip``; the model keeps its task after a resume;
2. SIGKILL from the test at random (seeded) moments, sometimes several times in a row, and at two moments no fault
   point marks (while the run is created, inside a workspace file write);
3. a damaged log: torn tail, flipped byte in a checkpoint record;
4. bad input: one ``safepoint:`` line on stderr, a non-zero exit code, nothing half-written.
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from safepoint.engine import failpoints
from tests.conftest import cli_env, safepoint_in_process

PY = sys.executable
TIMEOUT = 120  # seconds for one child process: a hang fails the test instead of blocking it
RUN_ID = "crash-run"
FINAL_STATUSES = {"succeeded", "failed", "uncertain"}
CALL_POINTS = ("before_started", "after_started", "after_tool", "after_outcome")  # reached once per call


# ------------------------------------------------------------------------------------------------- scenarios


def _call(tool: str, **args: Any) -> dict[str, Any]:
    return {"tool": tool, "args": args}


def _patch(path: str, old: list[str], new: list[str]) -> str:
    """A one-hunk unified diff replacing the whole of ``path`` (``old`` empty: the diff creates the file)."""
    head = f"--- a/{path}\n" if old else "--- /dev/null\n"
    body = "".join(f"-{line}\n" for line in old) + "".join(f"+{line}\n" for line in new)
    old_range = f"1,{len(old)}" if old else "0,0"
    return f"{head}+++ b/{path}\n@@ -{old_range} +1,{len(new)} @@\n{body}"


TASK = "Write the notes and the app, patch both, run a command, tell the team, update the changelog."

# Nine calls over seven turns: writes, two patches (one touching two files), a command with an effect and a
# read-only one, the notification in the middle, reads; several turns hold two calls.
MAIN_SCENARIO: dict[str, Any] = {
    "task": TASK,
    "model": "scripted-v1",
    "turns": [
        {
            "text": "Writing the notes and the app.",
            "tool_calls": [
                _call("write_file", path="notes.txt", content="alpha\nbeta\n"),
                _call("write_file", path="src/app.py", content="VALUE = 1\n"),
            ],
        },
        {
            "text": "Patching the notes.",
            "tool_calls": [_call("apply_patch", patch=_patch("notes.txt", ["alpha", "beta"], ["alpha", "gamma"]))],
        },
        {
            "text": "Running commands.",
            "tool_calls": [
                _call("run_command", command="echo hi > made_by_command.txt"),
                _call("run_command", command="wc -l notes.txt"),
            ],
        },
        {
            "text": "Telling the team.",
            "tool_calls": [_call("send_notification", to="#dev", message="notes and app are ready")],
        },
        {
            "text": "Patching the app and adding docs; reading the notes back.",
            "tool_calls": [
                _call(
                    "apply_patch",
                    patch=_patch("src/app.py", ["VALUE = 1"], ["VALUE = 2"])
                    + _patch("docs/NOTES.md", [], ["# Notes", "see notes.txt"]),
                ),
                _call("read_file", path="notes.txt"),
            ],
        },
        {
            "text": "Updating the changelog.",
            "tool_calls": [_call("write_file", path="CHANGELOG.md", content="- notes, app, docs\n")],
        },
        {"text": "Done."},
    ],
}


@dataclass(frozen=True)
class Hit:
    """One time a fault point is reached in an uninterrupted run."""

    point: str
    tool: str | None = None
    call_id: str | None = None


def scenario_calls(scenario: dict[str, Any]) -> list[tuple[str, str]]:
    """``(call_id, tool)`` of every call, numbered as the scenario runner numbers them (``call_1``, ...)."""
    found = []
    for turn in scenario["turns"]:
        for call in turn.get("tool_calls", []):
            found.append((call.get("call_id") or f"call_{len(found) + 1}", call["tool"]))
    return found


def scenario_hits(scenario: dict[str, Any]) -> list[Hit]:
    """The fault points an uninterrupted run reaches, in order (mirrors the agent loop and the call driver)."""
    calls = iter(scenario_calls(scenario))
    hits: list[Hit] = []
    for turn in scenario["turns"]:
        hits += [Hit("before_step"), Hit("after_model")]
        for _ in turn.get("tool_calls", []):
            call_id, tool = next(calls)
            hits += [Hit(point, tool, call_id) for point in CALL_POINTS]
        if turn.get("tool_calls"):
            hits.append(Hit("after_step"))
    return hits


def crash_index(scenario: dict[str, Any], spec: str) -> int:
    """Where in ``scenario_hits`` the failpoint ``point[:tool][@n]`` fires."""
    name, _, count = spec.partition("@")
    point, _, tool = name.partition(":")
    matching = [
        index
        for index, hit in enumerate(scenario_hits(scenario))
        if hit.point == point and (not tool or hit.tool == tool)
    ]
    assert len(matching) >= int(count or 1), f"{spec} is never reached by the scenario"
    return matching[int(count or 1) - 1]


def notification_hit(scenario: dict[str, Any], point: str) -> int:
    hits = scenario_hits(scenario)
    return next(i for i, hit in enumerate(hits) if hit.point == point and hit.tool == "send_notification")


def expected_sends(scenario: dict[str, Any], spec: str | None) -> int:
    """The notification goes out once, except when the crash fell between its durable `started` and its run."""
    if spec is None:
        return 1
    index = crash_index(scenario, spec)
    started = index >= notification_hit(scenario, "after_started")
    ran = index >= notification_hit(scenario, "after_tool")
    return 0 if started and not ran else 1


# ------------------------------------------------------------------------------------------------- processes


def safepoint(*args: object, env: dict[str, str], timeout: float = TIMEOUT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [PY, "-m", "safepoint", *map(str, args)],
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def safepoint_json(*args: object, env: dict[str, str]) -> Any:
    """A read-only command's --json output, from the CLI called in process (no kill or race involved)."""
    done = safepoint_in_process(*args, "--json", env=env)
    assert done.returncode == 0, f"safepoint {' '.join(map(str, args))} failed: {done.stderr}"
    return json.loads(done.stdout)


def describe(done: subprocess.CompletedProcess[str]) -> str:
    return f"exit {done.returncode}\nstdout: {done.stdout[-2000:]}\nstderr: {done.stderr[-2000:]}"


@dataclass
class Setup:
    """One scenario, one workspace, one outbox, in a test's own folder."""

    base: Path
    scenario: dict[str, Any]

    def __post_init__(self) -> None:
        self.base.mkdir(parents=True, exist_ok=True)
        self.workspace = self.base / "ws"
        self.workspace.mkdir(exist_ok=True)
        self.outbox = self.base / "outbox.jsonl"  # outside the workspace: an external effect
        self.scenario_path = self.base / "scenario.json"
        self.scenario_path.write_text(json.dumps(self.scenario, indent=1))
        self.env = cli_env(SAFEPOINT_OUTBOX=str(self.outbox))

    @property
    def run_dir(self) -> Path:
        return self.workspace / ".agent-runtime" / "runs" / RUN_ID

    @property
    def log_path(self) -> Path:
        return self.run_dir / "ledger.jsonl"

    def run(self, failpoint: str | None = None) -> subprocess.CompletedProcess[str]:
        env = dict(self.env)
        if failpoint:
            env["SAFEPOINT_FAILPOINT"] = failpoint
        return safepoint(
            "run", self.scenario_path, "--workspace", self.workspace, "--run-id", RUN_ID, "--json", env=env
        )

    def popen_run(self) -> subprocess.Popen[bytes]:
        args = ["run", str(self.scenario_path), "--workspace", str(self.workspace), "--run-id", RUN_ID, "--json"]
        return self._popen(args)

    def popen_resume(self) -> subprocess.Popen[bytes]:
        return self._popen(["resume", RUN_ID, "--workspace", str(self.workspace), "--json"])

    def _popen(self, args: list[str]) -> subprocess.Popen[bytes]:
        with open(self.base / "killed-stderr.txt", "ab") as stderr:  # kept for a failure's post-mortem
            return subprocess.Popen(
                [PY, "-m", "safepoint", *args], env=self.env, stdout=subprocess.DEVNULL, stderr=stderr
            )

    def resume(self, *decisions: str) -> subprocess.CompletedProcess[str]:
        """The resume after a crash, in process: the crash was the point, it happened in a real child; what is on
        disk is all a resume reads (no kill or race here; the kills go through popen_resume)."""
        return safepoint_in_process("resume", RUN_ID, "--workspace", self.workspace, *decisions, "--json", env=self.env)

    def explain(self) -> dict[str, Any]:
        data: dict[str, Any] = safepoint_json("explain", RUN_ID, "--workspace", self.workspace, env=self.env)
        return data

    def ledger(self) -> list[dict[str, Any]]:
        rows: list[dict[str, Any]] = safepoint_json("ledger", RUN_ID, "--workspace", self.workspace, env=self.env)
        return rows

    def sent(self) -> list[dict[str, Any]]:
        if not self.outbox.exists():
            return []
        return [json.loads(line) for line in self.outbox.read_text().splitlines() if line.strip()]

    def files(self) -> dict[str, bytes]:
        return snapshot(self.workspace)


def snapshot(workspace: Path) -> dict[str, bytes]:
    """Every file of the workspace but the runtime folder, by relative path."""
    found = {}
    for folder, dirs, names in os.walk(workspace):
        if Path(folder) == workspace:
            dirs[:] = [d for d in dirs if d != ".agent-runtime"]
        for name in names:
            path = Path(folder) / name
            found[str(path.relative_to(workspace))] = path.read_bytes()
    return found


def checkpoint_number(checkpoint_id: str | None) -> int:
    return int(checkpoint_id.rsplit("_", 1)[1]) if checkpoint_id else 0


def assert_completed(setup: Setup, reference: dict[str, bytes], *, sends: int | None) -> dict[str, Any]:
    """The invariants of a finished run. ``sends`` None: at most once (the crash moment is not known)."""
    sent = setup.sent()
    if sends is None:
        assert len(sent) <= 1, f"notification sent {len(sent)} times: {sent}"
    else:
        assert len(sent) == sends, f"notification sent {len(sent)} times, expected {sends}: {sent}"
    assert all(line["run_id"] == RUN_ID for line in sent)

    assert setup.files() == reference, "workspace differs from an uninterrupted run's"

    explained = setup.explain()
    assert explained["status"] == "completed", explained
    calls = {call["call_id"]: call for call in explained["calls"]}
    for call_id, tool in scenario_calls(setup.scenario):
        assert call_id in calls, f"{call_id} ({tool}) is missing from explain: {sorted(calls)}"
        call = calls[call_id]
        assert call["tool"] == tool
        assert call["status"] in FINAL_STATUSES, call
        if call["status"] == "uncertain":
            assert call["tool"] == "send_notification" and call["replay_policy"] == "never", call
    notification = next(call for call in calls.values() if call["tool"] == "send_notification")
    if notification["status"] == "succeeded":
        assert len(sent) == 1, "the ledger says the notification succeeded, the outbox disagrees"

    started = [row for row in setup.ledger() if row["status"] == "started"]
    assert not started, f"calls left `started` after completion: {started}"
    return explained


# --------------------------------------------------------------------------------------- 1. every fault point


# Calls of MAIN_SCENARIO by occurrence: @1 first call of a run, @2 second call of a turn, @3 a patch, @4 the
# command with an effect, @5 a read-only command, @6 the notification, @7 the two-file patch.
MATRIX_CASES = [
    *(f"before_step@{n}" for n in (1, 3, 4, 7)),  # 7: the final answer's step
    *(f"after_model@{n}" for n in (1, 4, 7)),
    *(f"{point}@{n}" for point in CALL_POINTS for n in (1, 2, 3, 4, 5, 7)),
    *(f"{point}:send_notification" for point in CALL_POINTS),
    *(f"after_step@{n}" for n in (1, 3, 6)),  # 6: the last step with calls
]
ASK_CALLS = {"call_4"}  # `echo hi > made_by_command.txt`: writes a file, so it is never re-run without asking


def test_matrix_covers_every_point() -> None:
    assert {case.split("@")[0].split(":")[0] for case in MATRIX_CASES} == set(failpoints.POINTS)
    assert {hit.point for hit in scenario_hits(MAIN_SCENARIO)} == set(failpoints.POINTS)


@pytest.fixture(scope="module")
def main_reference(tmp_path_factory: pytest.TempPathFactory) -> dict[str, bytes]:
    """The workspace an uninterrupted run of the main scenario leaves."""
    setup = Setup(tmp_path_factory.mktemp("reference"), MAIN_SCENARIO)
    done = setup.run()
    assert done.returncode == 0, describe(done)
    assert len(setup.sent()) == 1
    files = setup.files()
    assert set(files) == {"notes.txt", "src/app.py", "made_by_command.txt", "docs/NOTES.md", "CHANGELOG.md"}
    assert files["notes.txt"] == b"alpha\ngamma\n" and files["src/app.py"] == b"VALUE = 2\n"
    return files


@pytest.mark.parametrize("spec", MATRIX_CASES)
def test_failpoint(tmp_path: Path, spec: str, main_reference: dict[str, bytes]) -> None:
    """SIGKILL at a named fault point, then one resume: the run completes and every invariant holds."""
    setup = Setup(tmp_path, MAIN_SCENARIO)
    crashed = setup.run(spec)
    assert crashed.returncode == -signal.SIGKILL, f"{spec} did not kill the run: {describe(crashed)}"

    hit = scenario_hits(MAIN_SCENARIO)[crash_index(MAIN_SCENARIO, spec)]
    waits = hit.call_id in ASK_CALLS and hit.point in ("after_started", "after_tool")
    resumed = setup.resume()
    if waits:
        assert resumed.returncode == 3, f"resume after {spec} should wait for a decision: {describe(resumed)}"
        explained = setup.explain()
        assert explained["status"] == "waiting_decision", explained
        assert [d["call_id"] for d in explained["needs_decision"]] == [hit.call_id], explained
        # `echo hi > f` writes the same bytes however often it runs: replaying it is the right call here.
        resumed = setup.resume("--replay", hit.call_id)
    assert resumed.returncode == 0, f"resume after {spec}: {describe(resumed)}"
    assert json.loads(resumed.stdout.splitlines()[-1])["status"] == "completed"
    assert_completed(setup, main_reference, sends=expected_sends(MAIN_SCENARIO, spec))


# ---------------------------------------------------------------- 1b. a command with effects waits for a person

DECISION_SCENARIO: dict[str, Any] = {
    "task": "Record a run of the command, then tell the team.",
    "turns": [
        {"text": "Writing.", "tool_calls": [_call("write_file", path="a.txt", content="a\n")]},
        {"text": "Appending.", "tool_calls": [_call("run_command", command="echo hi >> made_by_command.txt")]},
        {"text": "Telling.", "tool_calls": [_call("send_notification", to="#dev", message="appended")]},
        {"text": "Done."},
    ],
}


@pytest.mark.parametrize(
    ("point", "choice"),
    [
        ("after_tool", "--skip"),  # it ran once: skipping leaves one run
        ("after_tool", "--replay"),  # it ran once: replaying runs it a second time
        ("after_started", "--replay"),  # it never ran: replaying runs it once
    ],
)
def test_command_with_effects_waits_for_a_decision(tmp_path: Path, point: str, choice: str) -> None:
    setup = Setup(tmp_path, DECISION_SCENARIO)
    crashed = setup.run(f"{point}:run_command")
    assert crashed.returncode == -signal.SIGKILL, describe(crashed)
    ran_before_crash = 1 if point == "after_tool" else 0
    effect = setup.workspace / "made_by_command.txt"
    assert (effect.read_text() if effect.exists() else "") == "hi\n" * ran_before_crash

    waiting = setup.resume()
    assert waiting.returncode == 3, describe(waiting)
    assert json.loads(waiting.stdout.splitlines()[-1])["status"] == "waiting_decision"
    assert (effect.read_text() if effect.exists() else "") == "hi\n" * ran_before_crash, "waiting ran the command"
    explained = setup.explain()
    assert explained["status"] == "waiting_decision"
    assert explained["needs_decision"] == [
        {
            "call_id": "call_2",
            "tool": "run_command",
            "why": explained["needs_decision"][0]["why"],
            "choices": ["replay", "skip"],  # what resume accepts for it (a command that can run again: both)
            "commands": [f"safepoint resume {RUN_ID} --replay call_2", f"safepoint resume {RUN_ID} --skip call_2"],
        }
    ]
    command = next(call for call in explained["calls"] if call["call_id"] == "call_2")
    assert (command["idempotency"], command["replay_policy"], command["replayable"]) == ("non_idempotent", "ask", False)
    assert setup.sent() == [], "the notification comes after the command: nothing may be sent while waiting"

    done = setup.resume(choice, "call_2")
    assert done.returncode == 0, describe(done)
    runs = ran_before_crash + (1 if choice == "--replay" else 0)
    assert (effect.read_text() if effect.exists() else "") == "hi\n" * runs, f"{choice} ran the command wrongly"
    assert len(setup.sent()) == 1

    explained = setup.explain()
    assert explained["status"] == "completed" and explained["needs_decision"] == []
    statuses = {call["call_id"]: call["status"] for call in explained["calls"]}
    assert set(statuses) == {"call_1", "call_2", "call_3"}
    assert statuses["call_1"] == statuses["call_3"] == "succeeded"
    assert statuses["call_2"] == ("succeeded" if choice == "--replay" else "uncertain")
    rows = {row["call_id"]: row for row in setup.ledger()}
    assert all(row["status"] != "started" for row in rows.values())
    if choice == "--skip":
        assert rows["call_2"]["decision"] == "skip"


# ---------------------------------------------------------------------------------------- 2. random moments


def _long_scenario() -> dict[str, Any]:
    turns = []
    for i in range(48):
        calls = [
            _call("write_file", path=f"files/f{i % 7}.txt", content=f"version {i}\n" * (i + 1)),
            _call("run_command", command="true"),
        ]
        if i % 3 == 0:
            calls.append(_call("read_file", path=f"files/f{i % 7}.txt"))
        if i == 24:
            calls = [_call("send_notification", to="#ops", message="halfway there")]
        turns.append({"text": f"turn {i}", "tool_calls": calls})
    turns.append({"text": "Done."})
    return {"task": "A long run of small steps.", "turns": turns}


LONG_SCENARIO = _long_scenario()


@pytest.fixture(scope="module")
def long_reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[dict[str, bytes], float]:
    """The files of an uninterrupted run of the long scenario, and how long that run took."""
    setup = Setup(tmp_path_factory.mktemp("long-reference"), LONG_SCENARIO)
    began = time.monotonic()
    done = setup.run()
    duration = time.monotonic() - began
    assert done.returncode == 0, describe(done)
    assert len(setup.sent()) == 1
    return setup.files(), duration


def run_status(setup: Setup) -> str | None:
    """The run's recorded status read straight from the store (None: the run was never created)."""
    if not (setup.run_dir / "run.json").exists():
        return None
    from safepoint.engine.session import load_view
    from safepoint.store.file_store import FileStore

    return load_view(FileStore(str(setup.workspace / ".agent-runtime")), RUN_ID).status


def kill_after(process: subprocess.Popen[bytes], delay: float) -> bool:
    """SIGKILL ``process`` after ``delay`` seconds unless it ended first. True if it was killed."""
    try:
        process.wait(timeout=delay)
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
    process.wait(timeout=TIMEOUT)
    return process.returncode == -signal.SIGKILL


# The first kill hits `run`, later ones hit `resume`. Five fixed seeds (there were eight): every named moment is
# killed at in test_failpoint already; these add unnamed ones, one, two and three kills in a row among them.
KILLS_PER_SEED = (1, 1, 3, 1, 2)


@pytest.mark.parametrize("seed", range(len(KILLS_PER_SEED)))
def test_sigkill_at_random_moments(tmp_path: Path, seed: int, long_reference: tuple[dict[str, bytes], float]) -> None:
    reference, duration = long_reference
    rng = random.Random(seed)
    setup = Setup(tmp_path, LONG_SCENARIO)
    for _ in range(KILLS_PER_SEED[seed]):
        status = run_status(setup)
        if status == "completed":
            break
        process = setup.popen_run() if status is None else setup.popen_resume()
        kill_after(process, rng.uniform(0, duration))
    status = run_status(setup)
    if status is None:  # killed before the run existed: start it again
        done = setup.run()
        assert done.returncode == 0, describe(done)
    elif status != "completed":
        done = setup.resume()
        assert done.returncode == 0, describe(done)
    assert_completed(setup, reference, sends=None)


# Moments a random kill can hit but no named fault point marks: a `safepoint run` paused there (it creates MARKER
# and sleeps), so the test kills it at exactly that moment.
PAUSED_SAFEPOINT = """
import os, sys, time
marker, moment, args = sys.argv[1], sys.argv[2], sys.argv[3:]

def pause():
    open(marker, "w").close()
    time.sleep(3600)

if moment == "run-header":  # the run's folder exists, its header (run.json) is not written yet
    from safepoint.store import file_store as files
    atomic_write = files.atomic_write
    def paused_atomic_write(path, data, **kwargs):
        if os.path.basename(path) == "run.json":
            pause()
        return atomic_write(path, data, **kwargs)
    files.atomic_write = paused_atomic_write
elif moment == "workspace-write":  # a tool's new file content is in its temp file, not renamed into place yet
    replace = os.replace
    def paused_replace(src, dst, *rest, **kwargs):
        if os.path.basename(src).startswith(".safepoint-"):
            pause()
        return replace(src, dst, *rest, **kwargs)
    os.replace = paused_replace
else:
    raise SystemExit(f"unknown moment {moment}")
sys.argv = ["safepoint", *args]
from safepoint.cli.app import main
main()
"""


def kill_run_at(setup: Setup, moment: str) -> None:
    marker = setup.base / f"paused-{moment}"
    args = ["run", setup.scenario_path, "--workspace", setup.workspace, "--run-id", RUN_ID, "--json"]
    process = subprocess.Popen(
        [PY, "-c", PAUSED_SAFEPOINT, marker, moment, *map(str, args)], env=setup.env, stdout=subprocess.DEVNULL
    )
    deadline = time.monotonic() + TIMEOUT
    while not marker.exists():
        assert process.poll() is None, f"the run ended before reaching {moment}"
        assert time.monotonic() < deadline, f"the run never reached {moment}"
        time.sleep(0.01)
    process.send_signal(signal.SIGKILL)
    assert process.wait(timeout=TIMEOUT) == -signal.SIGKILL


def test_kill_while_the_run_is_created(tmp_path: Path, main_reference: dict[str, bytes]) -> None:
    """Killed while `run` creates the run: the run id must not be left stuck (neither resumable nor startable)."""
    setup = Setup(tmp_path, MAIN_SCENARIO)
    kill_run_at(setup, "run-header")
    resumed = setup.resume()
    if resumed.returncode != 0:  # the run does not exist as far as resume can tell: starting it again must work
        again = setup.run()
        assert again.returncode == 0, (
            f"after a kill while creating run {RUN_ID!r} (left: {sorted(os.listdir(setup.run_dir))}), "
            f"resume says: {resumed.stderr.strip()!r}; run again says: {again.stderr.strip()!r}"
        )
    assert_completed(setup, main_reference, sends=1)


def test_kill_inside_a_file_write(tmp_path: Path, main_reference: dict[str, bytes]) -> None:
    """Killed while write_file writes: resume redoes the write and leaves no temp file in the user's workspace."""
    setup = Setup(tmp_path, MAIN_SCENARIO)
    kill_run_at(setup, "workspace-write")
    done = setup.resume()
    assert done.returncode == 0, describe(done)
    assert_completed(setup, main_reference, sends=1)


# -------------------------------------------------------------------------------------------- 3. corruption


def last_line_bounds(data: bytes) -> tuple[int, int]:
    """Start and end (exclusive, newline excluded) of the last line of a newline-terminated log."""
    assert data.endswith(b"\n")
    start = data.rfind(b"\n", 0, len(data) - 1) + 1
    return start, len(data) - 1


@pytest.mark.parametrize("crash", ["after_outcome:send_notification", "after_tool:send_notification", None])
def test_torn_tail_is_quarantined_and_resume_completes(
    tmp_path: Path, crash: str | None, main_reference: dict[str, bytes]
) -> None:
    setup = Setup(tmp_path, MAIN_SCENARIO)
    first = setup.run(crash)
    assert first.returncode == (-signal.SIGKILL if crash else 0), describe(first)
    before = setup.explain()

    data = setup.log_path.read_bytes()
    start, end = last_line_bounds(data)
    if crash:
        assert b'"kind":"checkpoint"' in data[start:end], "the crash should leave a checkpoint as the last record"
    cut = start + (end - start) // 2
    torn = data[start:cut]
    setup.log_path.write_bytes(data[:cut])

    after = setup.explain()
    assert [p["kind"] for p in after["problems"]] == ["torn"], after["problems"]
    if crash:
        earlier = checkpoint_number(after["resume_from"]["checkpoint_id"])
        assert earlier < checkpoint_number(before["resume_from"]["checkpoint_id"]), (before, after)
    else:
        assert after["status"] != "completed", "the completion record was torn off"
        assert checkpoint_number(after["resume_from"]["checkpoint_id"]) <= checkpoint_number(
            before["resume_from"]["checkpoint_id"]
        )

    done = setup.resume()
    assert done.returncode == 0, describe(done)
    quarantine = setup.run_dir / "ledger.jsonl.torn"
    assert quarantine.exists(), "the torn tail was not quarantined"
    assert torn in quarantine.read_bytes(), "the torn bytes were lost"
    assert setup.log_path.read_bytes().startswith(data[:start]), "records before the torn tail changed"
    explained = assert_completed(setup, main_reference, sends=expected_sends(MAIN_SCENARIO, crash))
    assert not [p for p in explained["problems"] if p["kind"] == "torn"], explained["problems"]


@pytest.mark.parametrize("crash", ["after_step@3", "after_tool:send_notification"])
def test_flipped_byte_in_last_checkpoint(tmp_path: Path, crash: str, main_reference: dict[str, bytes]) -> None:
    setup = Setup(tmp_path, MAIN_SCENARIO)
    first = setup.run(crash)
    assert first.returncode == -signal.SIGKILL, describe(first)
    before = setup.explain()

    data = bytearray(setup.log_path.read_bytes())
    lines = data.split(b"\n")
    index = max(i for i, line in enumerate(lines) if b'"kind":"checkpoint"' in line)
    offset = sum(len(line) + 1 for line in lines[:index]) + len(lines[index]) // 2
    data[offset] ^= 0x01
    assert data[offset] != ord("\n")
    setup.log_path.write_bytes(bytes(data))

    after = setup.explain()
    assert any(p["kind"] == "corrupt" for p in after["problems"]), after["problems"]
    earlier = checkpoint_number(after["resume_from"]["checkpoint_id"])
    assert earlier < checkpoint_number(before["resume_from"]["checkpoint_id"]), (before, after)

    done = setup.resume()
    assert done.returncode == 0, describe(done)
    assert_completed(setup, main_reference, sends=expected_sends(MAIN_SCENARIO, crash))


# ----------------------------------------------------------------- 1c. the model still sees its task on resume

TASK_SCENARIO: dict[str, Any] = {
    "task": "TASK-MARKER: write one file and notify.",
    "turns": [
        {
            "text": "Writing.",
            "tool_calls": [_call("write_file", path="one.txt", content="1\n")],
            "expect_in_context": ["TASK-MARKER"],
        },
        {
            "text": "Telling.",
            "tool_calls": [_call("send_notification", to="#dev", message="one")],
            "expect_in_context": ["TASK-MARKER"],
        },
        {"text": "Done.", "expect_in_context": ["TASK-MARKER"]},
    ],
}


@pytest.mark.parametrize("crash", ["before_step@1", "after_model@1", "before_started@1", "after_step@1"])
def test_resume_keeps_the_task_in_the_model_context(tmp_path: Path, crash: str) -> None:
    setup = Setup(tmp_path, TASK_SCENARIO)
    crashed = setup.run(crash)
    assert crashed.returncode == -signal.SIGKILL, describe(crashed)
    done = setup.resume()
    assert done.returncode == 0, f"after {crash} the resumed model lost its task: {describe(done)}"
    assert len(setup.sent()) == 1


# ------------------------------------------------------------------------------------------- 4. bad input


def one_line_error(done: subprocess.CompletedProcess[str]) -> str:
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    assert done.returncode not in (0, 3), describe(done)
    assert "Traceback" not in done.stderr, describe(done)
    assert len(lines) == 1, f"expected a one-line error, got {len(lines)} lines:\n{done.stderr}"
    assert lines[0].startswith("safepoint:"), lines
    return lines[0]


def plain_env(setup: Setup) -> dict[str, str]:
    env = dict(setup.env)
    env.pop("COLUMNS", None)  # as in CI and in pipes: no terminal width is given
    return env


def test_malformed_scenario_json(tmp_path: Path) -> None:
    setup = Setup(tmp_path, {})
    setup.scenario_path.write_text('{"task": "x", "turns": [')
    done = safepoint(
        "run", setup.scenario_path, "--workspace", setup.workspace, "--run-id", RUN_ID, env=plain_env(setup)
    )
    assert "JSON" in one_line_error(done)
    assert not setup.run_dir.exists()


def test_unknown_tool_creates_nothing(tmp_path: Path) -> None:
    scenario = {
        "task": "x",
        "turns": [
            {"tool_calls": [_call("write_file", path="a", content="a")]},
            {"tool_calls": [_call("no_such_tool", x=1)]},
            {"text": "done"},
        ],
    }
    setup = Setup(tmp_path, scenario)
    done = safepoint(
        "run", setup.scenario_path, "--workspace", setup.workspace, "--run-id", RUN_ID, env=plain_env(setup)
    )
    assert "no_such_tool" in one_line_error(done)
    runs = setup.workspace / ".agent-runtime" / "runs"
    assert not runs.exists() or list(runs.iterdir()) == [], "a run was (half) created for a scenario that cannot run"
    assert setup.files() == {}, "the scenario's first call ran although the scenario was refused"
    assert setup.sent() == []


def test_missing_workspace(tmp_path: Path) -> None:
    setup = Setup(tmp_path, MAIN_SCENARIO)
    missing = tmp_path / "no-such-workspace"
    done = safepoint("run", setup.scenario_path, "--workspace", missing, "--run-id", RUN_ID, env=plain_env(setup))
    assert "does not exist" in one_line_error(done)
    assert not missing.exists()


def test_resume_of_unknown_run(tmp_path: Path) -> None:
    setup = Setup(tmp_path, MAIN_SCENARIO)
    done = safepoint("resume", "no-such-run", "--workspace", setup.workspace, env=plain_env(setup))
    assert "not found" in one_line_error(done)


@pytest.mark.parametrize("backend", ["file", "postgres"])
def test_a_killed_agents_command_does_not_outlive_it_into_the_resume(tmp_path, backend, request):
    """Promise 6: the process group a crashed owner started is killed when the run is claimed again, on both
    stores (PostgreSQL runs note their commands in this machine's state folder)."""
    store = [] if backend == "file" else ["--store", request.getfixturevalue("fresh_url")]
    workspace = tmp_path / "ws"
    workspace.mkdir()
    marker = tmp_path / "cmd.log"
    pid_file = tmp_path / "cmd.pid"
    script = tmp_path / "sc.json"
    # Long enough that only a kill ends it before the test does (no race with how fast the resume starts).
    command = f"echo $$ > {pid_file}; echo start >> {marker}; sleep 120; echo end >> {marker}"
    script.write_text(
        json.dumps(
            {
                "task": "t",
                "turns": [{"tool_calls": [{"tool": "run_command", "args": {"command": command}}]}, {"text": "done"}],
            }
        )
    )
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "outbox"))
    child = subprocess.Popen(
        [sys.executable, "-m", "safepoint", "run", str(script), "--workspace", str(workspace), "--run-id", "r", *store],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(6000):
        if marker.exists():
            break
        time.sleep(0.01)
    shell = int(pid_file.read_text())
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    assert _running(shell)  # the agent died; its command did not
    resumed = subprocess.run(
        [sys.executable, "-m", "safepoint", "resume", "r", "--workspace", str(workspace), "--skip", "call_1", *store],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert resumed.returncode == 0, resumed.stderr
    assert not _running(shell)  # claiming the run killed the orphaned command
    assert marker.read_text() == "start\n"  # and it never finished


def _running(pid: int) -> bool:
    """Alive and not a zombie (a killed process another test runner has not reaped yet counts as gone)."""
    try:
        with open(f"/proc/{pid}/stat") as handle:
            return handle.read().rsplit(")", 1)[1].split()[0] != "Z"
    except FileNotFoundError:
        return False


def test_a_killed_agents_escaped_descendants_are_killed_too(tmp_path):
    """A command that put a process out of its group (`setsid`) before the agent died: claiming the run again
    kills that process too (it stays below the command's reaper, a child subreaper)."""
    workspace = tmp_path / "ws"
    workspace.mkdir()
    pid_file = tmp_path / "escaped.pid"
    command = f"(setsid sh -c 'echo $$ > {pid_file}; exec sleep 120' > /dev/null 2>&1 &); sleep 120"
    script = tmp_path / "sc.json"
    script.write_text(
        json.dumps(
            {
                "task": "t",
                "turns": [{"tool_calls": [{"tool": "run_command", "args": {"command": command}}]}, {"text": "done"}],
            }
        )
    )
    env = cli_env(SAFEPOINT_OUTBOX=str(tmp_path / "outbox"))
    child = subprocess.Popen(
        [sys.executable, "-m", "safepoint", "run", str(script), "--workspace", str(workspace), "--run-id", "r"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    for _ in range(6000):
        if pid_file.exists() and pid_file.read_text().strip():
            break
        time.sleep(0.01)
    escaped = int(pid_file.read_text())
    child.send_signal(signal.SIGKILL)
    child.wait(timeout=30)
    try:
        assert _running(escaped)  # the agent died; the escaped process did not
        resumed = subprocess.run(
            [sys.executable, "-m", "safepoint", "resume", "r", "--workspace", str(workspace), "--skip", "call_1"],
            env=env,
            capture_output=True,
            text=True,
            timeout=60,
        )
        assert resumed.returncode == 0, resumed.stderr
        for _ in range(500):  # killed by the resume; init reaps it
            if not _running(escaped):
                break
            time.sleep(0.01)
        assert not _running(escaped), "the escaped descendant outlived the crashed agent's cleanup"
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(escaped, signal.SIGKILL)
