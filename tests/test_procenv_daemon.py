"""The daemon's workers get the store URL and the credentials through a pipe: not in their environment block (what
/proc/PID/environ shows) nor their command line (what `ps` shows), where a command of the run could read them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

from safepoint.supervisor import handoff
from tests.conftest import cli_env

OPENAI = "sk-proj-" + "H4nd0ffK3y9J0k1L2m3" * 3
# The worker (the agent above the command's supervisor and server): its environment's names and its command line.
WORKER = (
    "w=$(awk '{print $4}' /proc/$(awk '{print $4}' /proc/$PPID/stat)/stat); "
    "tr '\\0' '\\n' < /proc/$w/environ | cut -d= -f1 > worker_env.out; "
    "tr '\\0' ' ' < /proc/$w/cmdline > worker_cmdline.out"
)


def test_a_workers_store_url_and_keys_are_not_in_its_environment_block(tmp_path, workspace: Path):
    scenario = {
        "task": "env",
        "turns": [
            {"tool_calls": [{"tool": "write_file", "args": {"path": "a.txt", "content": "one\n"}}]},
            {"tool_calls": [{"tool": "run_command", "args": {"command": WORKER}}]},
            {"text": "done"},
        ],
    }
    path = tmp_path / "scenario.json"
    path.write_text(json.dumps(scenario))
    store = f"file:{workspace}/.agent-runtime"
    env = cli_env(SAFEPOINT_STORE=store, OPENAI_API_KEY=OPENAI, DEPLOY_TOKEN="dep-tok-1234567890")
    run = [sys.executable, "-m", "safepoint", "run", str(path), "--run-id", "r", "--workspace", str(workspace)]
    crashed = subprocess.run(
        run, env={**env, "SAFEPOINT_FAILPOINT": "after_outcome:write_file"}, capture_output=True, timeout=120
    )
    assert crashed.returncode == -9, crashed.stderr
    daemon = subprocess.run(
        [sys.executable, "-m", "safepoint", "daemon", "--once", "--json", "--workspace", str(workspace)],
        env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert daemon.returncode == 0, daemon.stderr
    events = [json.loads(line) for line in daemon.stdout.splitlines() if line.strip()]
    assert any(e["event"] == "worker_exited" and e.get("status") == "completed" for e in events), events
    names = set((workspace / "worker_env.out").read_text().split())
    assert "PATH" in names  # it is the worker's environment that was read
    assert not names & {"SAFEPOINT_STORE", "OPENAI_API_KEY", "DEPLOY_TOKEN"}, names  # (the pipe's number is there)
    cmdline = (workspace / "worker_cmdline.out").read_text()
    assert "resume r" in cmdline and ".agent-runtime" not in cmdline, cmdline


def test_the_handoff_moves_every_credential_and_the_store_url_to_the_pipe():
    plain, secret = handoff.split_environment(
        {"PATH": "/bin", "OPENAI_API_KEY": "k", "LLM": "custom", "DATABASE_URL": "postgresql://u:pw@db/x", "X": "1"},
        "postgresql://u:pw@db/store",
        also=("LLM",),
    )
    assert plain == {"PATH": "/bin", "X": "1"}
    assert secret == {
        "OPENAI_API_KEY": "k", "LLM": "custom", "DATABASE_URL": "postgresql://u:pw@db/x",
        "SAFEPOINT_STORE": "postgresql://u:pw@db/store",
    }  # fmt: skip
    read, write = os.pipe()
    code = (
        "import json, os\nfrom safepoint.supervisor.handoff import receive\n"
        "names = receive()\n"
        "print(json.dumps([sorted(names), os.environ['OPENAI_API_KEY'], os.environ.get('SAFEPOINT_HANDOFF_FD'),"
        " open('/proc/self/environ', 'rb').read().count(b'OPENAI_API_KEY')]))\n"
    )
    child = subprocess.Popen(
        [sys.executable, "-c", code], env={**plain, **cli_env(), handoff.HANDOFF_FD: str(read)},
        pass_fds=(read,), stdout=subprocess.PIPE, text=True,
    )  # fmt: skip
    os.close(read)
    handoff.send(write, secret)
    out, _ = child.communicate(timeout=60)
    names, key, fd, in_block = json.loads(out.strip().splitlines()[-1])
    assert names == sorted(secret) and key == "k" and fd is None
    assert in_block == (1 if "OPENAI_API_KEY" in os.environ else 0)  # only what cli_env itself brought
