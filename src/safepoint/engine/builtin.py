"""The built-in tools of a coding agent, each declared for replay (§8.7)."""

from __future__ import annotations

import os
import re
import signal
import subprocess
from typing import Any

from safepoint.core.classify import Classification
from safepoint.core.command_targets import write_targets
from safepoint.core.commands import DEFAULT_COMMAND_RULES, CommandRules, classify_command
from safepoint.core.hashing import content_hash
from safepoint.core.replay import ProbeResult
from safepoint.core.unified_diff import apply_file_diff, check_applied, parse_unified_diff, touched_paths
from safepoint.engine.tools import Tool, ToolContext, ToolRegistry, tool
from safepoint.errors import ToolFailure

SKIP_DIRS = frozenset({".git", ".agent-runtime", "node_modules", "__pycache__", ".venv"})
MAX_READ = 256 * 1024
MAX_LIST = 2000
MAX_OUTPUT = 8 * 1024  # longer command output is kept whole as an artifact, and shown cut
DEFAULT_TIMEOUT = 120.0


def _walk(ctx: ToolContext, path: str) -> list[str]:
    root = ctx.workspace.resolve(path or ".")
    found = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        for name in sorted(files):
            found.append(os.path.relpath(os.path.join(folder, name), ctx.workspace.root))
    return found


@tool(idempotency="idempotent", replay_policy="auto", risk_level="low", side_effects=())
def read_file(ctx: ToolContext, path: str) -> str:
    """Read a text file of the workspace."""
    data = ctx.workspace.read(path)
    if data is None:
        raise ToolFailure(f"{path} does not exist")
    if b"\x00" in data[:8192]:
        return f"{path} is a binary file of {len(data)} bytes"
    text = data[:MAX_READ].decode(errors="replace")
    return text if len(data) <= MAX_READ else text + f"\n[... cut at {MAX_READ} of {len(data)} bytes]"


@tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def list_files(ctx: ToolContext, path: str = ".") -> str:
    """List the workspace's files (version-control and runtime folders left out)."""
    found = _walk(ctx, path)
    shown = "\n".join(found[:MAX_LIST])
    return shown if len(found) <= MAX_LIST else shown + f"\n[... {len(found) - MAX_LIST} more]"


@tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def search_files(ctx: ToolContext, pattern: str, path: str = ".") -> str:
    """Search file contents with a regular expression; prints path:line: text."""
    try:
        regex = re.compile(pattern)
    except re.error as exc:
        raise ToolFailure(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
    hits: list[str] = []
    for rel in _walk(ctx, path):
        data = ctx.workspace.read(rel) or b""
        if b"\x00" in data[:8192]:
            continue
        for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
            if regex.search(line):
                hits.append(f"{rel}:{number}: {line[:300]}")
                if len(hits) >= MAX_LIST:
                    return "\n".join(hits) + "\n[... more matches cut]"
    return "\n".join(hits) or "no matches"


def _write_probe(ctx: ToolContext, args: dict[str, Any]) -> ProbeResult:
    """Done when the file holds exactly the content the call was to write; not done when it still holds what it
    held before the call; anything else (someone changed it since) is for a person to decide."""
    path = str(args.get("path", ""))
    current = ctx.workspace.hash(path) or ""
    if current == content_hash(str(args.get("content", "")).encode()):
        return "done"
    before = ctx.before_hashes.get(ctx.workspace.relative(path))
    return "not_done" if before is not None and current == before else "unknown"


@tool(
    idempotency="conditional",
    replay_policy="auto",
    risk_level="low",
    side_effects=("filesystem_write",),
    probe=_write_probe,
    writes=lambda args: [str(args.get("path", ""))],
    content_arg="content",
)
def write_file(ctx: ToolContext, path: str, content: str) -> str:
    """Write a file of the workspace (parent folders are created)."""
    data = content.encode()
    ctx.workspace.write(path, data)
    return f"wrote {len(data)} bytes to {path}"


def _patch_probe(ctx: ToolContext, args: dict[str, Any]) -> ProbeResult:
    """Like `git apply --check` both ways: not done if it still applies, done if its result is already there."""
    try:
        diffs = parse_unified_diff(str(args.get("patch", "")))
    except ToolFailure:
        return "unknown"
    states = {check_applied(d, ctx.workspace.read(d.old_path or d.new_path or "")) for d in diffs}
    if states == {"applies"}:
        return "not_done"
    if states == {"applied"}:
        return "done"
    return "unknown"


@tool(
    idempotency="conditional",
    replay_policy="auto",
    risk_level="low",
    side_effects=("filesystem_write",),
    probe=_patch_probe,
    writes=lambda args: touched_paths(str(args.get("patch", ""))),
)
def apply_patch(ctx: ToolContext, patch: str) -> str:
    """Apply a unified diff; every hunk must match the current content exactly (conditional on the base)."""
    diffs = parse_unified_diff(patch)
    if not diffs:
        raise ToolFailure("the patch holds no file diff; give a unified diff with ---/+++ headers")
    results = []
    for diff in diffs:  # check everything first, so a patch that does not apply changes nothing
        source = diff.old_path or diff.new_path or ""
        results.append((diff, apply_file_diff(diff, ctx.workspace.read(source))))
    for diff, new in results:
        if new is None:
            os.unlink(ctx.workspace.resolve(diff.old_path or ""))
        else:
            if diff.old_path and diff.new_path and diff.old_path != diff.new_path:
                os.unlink(ctx.workspace.resolve(diff.old_path))
            ctx.workspace.write(diff.new_path or diff.old_path or "", new)
    return "applied to " + ", ".join(d.new_path or f"{d.old_path} (deleted)" for d in diffs)


def _classify_command(args: dict[str, Any], rules: CommandRules = DEFAULT_COMMAND_RULES) -> Classification:
    """``rules``: the workspace's own (``.safepoint/commands.toml``), bound by ``Safepoint.registry``."""
    verdict = classify_command(str(args.get("command", "")), rules)
    return Classification(
        idempotency=verdict.idempotency,
        replay_policy=verdict.replay_policy,
        risk_level=verdict.risk_level,
        side_effects=verdict.side_effects,
        reasons=verdict.reasons,
    )


def _command_targets(args: dict[str, Any], rules: CommandRules = DEFAULT_COMMAND_RULES) -> list[str]:
    """Files the command line names as written or removed (redirections, sed -i, rm, mv...): kept ahead."""
    return list(write_targets(str(args.get("command", "")), rules))


@tool(
    idempotency="non_idempotent",
    replay_policy="ask",
    risk_level="medium",
    side_effects=("process",),
    classifier=_classify_command,
    captures_workspace=True,
    capture_hints=_command_targets,
)
def run_command(ctx: ToolContext, command: str, timeout: float = DEFAULT_TIMEOUT) -> str:
    """Run a shell command in the workspace; classified per command line (`ls` may be re-run, `npm publish` not)."""
    env = {**os.environ, "SAFEPOINT_IDEMPOTENCY_KEY": ctx.idempotency_key}
    env.pop("SAFEPOINT_FAILPOINT", None)
    # The command waits for a byte on a pipe before it starts, and the byte is sent only once its process group
    # is noted: an agent killed in between leaves a process that sees end-of-file and exits without running it
    # (otherwise it would run unnoted, beyond the reach of the next owner's cleanup).
    gate_read, gate_write = os.pipe()
    try:
        process = subprocess.Popen(
            [
                "bash",
                "-c",
                f'read -r -n 1 _ <&{gate_read} || exit 125; exec {gate_read}<&-; exec bash -c "$0"',
                command,
            ],
            cwd=ctx.workspace.root,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            pass_fds=(gate_read,),
            start_new_session=True,  # so a timeout kills the whole process group, not just bash
        )
    finally:
        os.close(gate_read)
    with process:
        try:
            ctx.processes.started(process.pid)
            os.write(gate_write, b"x")
        finally:
            os.close(gate_write)
        try:
            output, _ = process.communicate(timeout=timeout)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            output, _ = process.communicate()
            raise ToolFailure(f"`{command}` timed out after {timeout:g}s\n{_shown(ctx, output)}") from None
        finally:
            ctx.processes.ended(process.pid)
    text = f"exit code {process.returncode}\n{_shown(ctx, output)}"
    if process.returncode != 0:
        raise ToolFailure(text)
    return text


def _shown(ctx: ToolContext, output: bytes) -> str:
    if len(output) <= MAX_OUTPUT:
        return output.decode(errors="replace")
    ref = ctx.save_artifact(f"{ctx.call_id}.stdout.txt", output)
    head = output[: MAX_OUTPUT // 2].decode(errors="replace")
    tail = output[-MAX_OUTPUT // 2 :].decode(errors="replace")
    return f"{head}\n[... {len(output)} bytes in all; full output kept as {ref}]\n{tail}"


BUILTIN_TOOLS: tuple[Tool, ...] = (read_file, list_files, search_files, write_file, apply_patch, run_command)


def builtin_registry(*extra: Tool) -> ToolRegistry:
    return ToolRegistry((*BUILTIN_TOOLS, *extra))
