"""The built-in tools of a coding agent, each declared for replay (§8.7)."""

from __future__ import annotations

import json
import math
import os
import stat
import sys
import time
from typing import Any

import regex

from safepoint.core.classify import Classification
from safepoint.core.command_reach import DEFAULT_PROTECTED, Protected, classify_with_reach
from safepoint.core.command_reach_walk import find_removals
from safepoint.core.command_targets import write_targets
from safepoint.core.commands import DEFAULT_COMMAND_RULES, CommandRules
from safepoint.core.environment import command_environment
from safepoint.core.hashing import content_hash
from safepoint.core.replay import ProbeResult
from safepoint.core.unified_diff import FileDiff, apply_file_diff, check_applied, parse_unified_diff, touched_paths
from safepoint.engine.archive_reach import hold_unpacked
from safepoint.engine.launcher import LAUNCHER, collect
from safepoint.engine.processes import kill_tree
from safepoint.engine.tools import Tool, ToolContext, ToolRegistry, tool
from safepoint.errors import ToolFailure
from safepoint.workspace.names import quote_path, real_path

SKIP_DIRS = frozenset({".git", ".agent-runtime", "node_modules", "__pycache__", ".venv"})
MAX_READ = 256 * 1024
MAX_LIST = 2000
MAX_OUTPUT = 8 * 1024  # longer command output is kept whole as an artifact, and shown cut
DEFAULT_TIMEOUT = 120.0
MAX_PATTERN = 100_000  # elements a search pattern compiles into (about 40 MB in the `regex` package)
MAX_SEARCH = 64 << 20  # search_files skips (and names) a file over this size instead of reading it whole
SEARCH_SECONDS = 10.0  # a search_files call stops here (a replay after a crash cannot hang either)
REAPER_GRACE = 10.0  # seconds past a command's limit before the agent kills the supervisor's tree itself
MAX_TIMEOUT = 24 * 3600.0  # a command's time limit is at most a day
# The kernel's limits for starting a program: one argument (Linux's MAX_ARG_STRLEN, 32 pages; elsewhere only the
# total applies) and arguments plus environment (ARG_MAX).
_PAGE = os.sysconf("SC_PAGE_SIZE") if hasattr(os, "sysconf") else 4096
_ARG_MAX = os.sysconf("SC_ARG_MAX") if hasattr(os, "sysconf") else 256 * 1024
MAX_ARGUMENTS = _ARG_MAX if _ARG_MAX > 0 else 256 * 1024
MAX_ARGUMENT = min(32 * _PAGE, MAX_ARGUMENTS) if sys.platform.startswith("linux") else MAX_ARGUMENTS


def _walk(ctx: ToolContext, path: str) -> list[str]:
    """Every file under ``path``, sorted folder by folder. Walked with a stack of its own, not ``os.walk``'s
    recursion, which a tree a thousand folders deep (a runaway build, a test fixture) turned into a
    RecursionError for the whole workspace; links to folders are not followed (``os.walk``'s default too)."""
    root = ctx.workspace.resolve(path or ".")
    if not os.path.isdir(root):
        return [quote_path(os.path.relpath(root, ctx.workspace.root))] if os.path.isfile(root) else []
    found = []
    todo = [root]
    while todo:
        folder = todo.pop()
        try:
            with os.scandir(folder) as entries:
                listed = sorted(entries, key=lambda entry: entry.name)
        except OSError:
            continue  # unreadable or gone meanwhile: skipped, as os.walk skips it
        subfolders = []
        for entry in listed:
            try:
                is_folder = entry.is_dir()  # a link to a folder counts as a folder, as in os.walk: not listed
                walk_in = is_folder and not entry.is_symlink() and entry.name not in SKIP_DIRS
            except OSError:
                continue
            if is_folder:
                if walk_in:
                    subfolders.append(entry.path)
            else:
                # In recorded form: a name that is not plain text (bytes that are not UTF-8, a newline) is quoted
                # the way git quotes it, readable, and given back to a tool it names the same file.
                found.append(quote_path(os.path.relpath(entry.path, ctx.workspace.root)))
        todo.extend(reversed(subfolders))  # depth first, in name order: the order os.walk gave
    return found


@tool(idempotency="idempotent", replay_policy="auto", risk_level="low", side_effects=())
def read_file(ctx: ToolContext, path: str) -> str:
    """Read a text file of the workspace."""
    head = ctx.workspace.read_head(path, MAX_READ)
    if head is None:
        raise ToolFailure(f"{path} does not exist")
    data, size = head
    if b"\x00" in data[:8192]:
        return f"{path} is a binary file of {size} bytes"
    text = data.decode(errors="replace")
    return text if size <= len(data) else text + f"\n[... cut at {MAX_READ} of {size} bytes]"


@tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def list_files(ctx: ToolContext, path: str = ".") -> str:
    """List the workspace's files (version-control and runtime folders left out)."""
    found = _walk(ctx, path)
    listed = "\n".join(found[:MAX_LIST])
    return listed if len(found) <= MAX_LIST else listed + f"\n[... {len(found) - MAX_LIST} more]"


@tool(idempotency="idempotent", replay_policy="auto", risk_level="low")
def search_files(ctx: ToolContext, pattern: str, path: str = ".") -> str:
    """Search file contents with a regular expression; prints path:line: text. Special files (FIFOs, sockets,
    devices) and links leading out of the workspace are skipped; the search has a time limit."""
    if (size := _expanded_size(pattern)) > MAX_PATTERN:
        raise ToolFailure(
            f"pattern {_one_line(pattern)[:80]!r} repeats to about {size} elements, over the {MAX_PATTERN} a search"
            " takes (a count like a{1000000} is compiled into that many copies); use a smaller count, or + or *"
        )
    try:
        # The `regex` package, not `re`: the same syntax (backreferences and lookarounds, which models write), plus
        # a timeout that stops catastrophic backtracking like `(a+)+$` on a long line. Rejected: google-re2 (linear
        # time, but it refuses backreferences and lookarounds, and was 6x slower per line here; bench/workspace.py).
        compiled = regex.compile(pattern)
    except (regex.error, TypeError) as exc:
        raise ToolFailure(f"pattern {pattern!r} is not a valid regular expression: {exc}") from None
    deadline = time.monotonic() + SEARCH_SECONDS
    hits: list[str] = []
    searched = 0
    too_big: list[str] = []
    for rel in _walk(ctx, path):
        try:
            if time.monotonic() > deadline:
                raise TimeoutError
            data = _searchable(ctx, rel)
            if data is TOO_BIG:
                too_big.append(rel)
                continue
            if data is None or b"\x00" in data[:8192]:
                continue
            searched += 1
            for number, line in enumerate(data.decode(errors="replace").splitlines(), 1):
                if compiled.search(line, timeout=max(deadline - time.monotonic(), 0.001)):
                    hits.append(f"{rel}:{number}: {line[:300]}")
                    if len(hits) >= MAX_LIST:
                        return "\n".join(hits) + "\n[... more matches cut]"
        except TimeoutError:
            raise ToolFailure(
                f"search_files hit its time limit of {SEARCH_SECONDS:g}s in {rel} ({searched} files searched):"
                " simplify the pattern (nested repeats like (a+)+ backtrack without end) or narrow the path"
            ) from None
    found = "\n".join(hits) or "no matches"
    if too_big:
        found += (
            f"\n[{len(too_big)} file(s) over {MAX_SEARCH >> 20} MiB not searched, like {too_big[0]}: search them"
            " with run_command and grep]"
        )
    return found


def _expanded_size(pattern: str) -> int:
    """About how many elements ``pattern`` compiles into, counted without compiling it: the `regex` package expands
    a repeat's minimum count into copies (``a{1000000000}`` asked for gigabytes and the process was killed, on
    every resume of the call too), nested counts multiplying. Overestimates (every character of the pattern is an
    element; alternatives add up), never under: one pass, linear in the pattern."""
    sizes = [0]  # the size of each open group's content so far
    last = 0  # the size of the element a count would apply to
    index, end = 0, len(pattern)
    while index < end:
        char = pattern[index]
        if char == "\\":
            index += 2
            if index <= end and pattern[index - 1] in "pPNxuUgk" and index < end and pattern[index] in "{<":
                close = pattern.find("}" if pattern[index] == "{" else ">", index)
                index = end if close < 0 else close + 1  # \p{Greek}, \x{263a}, \g<name>: one element
            last = 1
            sizes[-1] += 1
            continue
        if char == "[":  # a set is one element, whatever it lists; a "]" first in it (or after "^") is literal
            close = index + 1
            close += close < end and pattern[close] == "^"
            close += close < end and pattern[close] == "]"
            while close < end and pattern[close] != "]":
                close += 2 if pattern[close] == "\\" else 1
            index, last = close + 1, 1
            sizes[-1] += 1
            continue
        if char == "(":
            sizes.append(0)
            index += 1
            continue
        if char == ")" and len(sizes) > 1:
            last = max(sizes.pop(), 1)
            sizes[-1] += last
            index += 1
            continue
        if char == "{":
            digits = index + 1
            while digits < end and pattern[digits].isdigit():
                digits += 1
            if digits > index + 1 and digits < end and pattern[digits] in ",}":
                count = int(pattern[index + 1 : digits])
                sizes[-1] += last * max(count - 1, 0)
                last *= max(count, 1)
                index = digits
                continue
        last = 1
        sizes[-1] += 1
        index += 1
    return sum(sizes)


TOO_BIG = b"\x00too big"  # _searchable's answer for a file over MAX_SEARCH (compared by identity)


def _searchable(ctx: ToolContext, rel: str) -> bytes | None:
    """A file's content for a search, or None for what a search skips: special files (reading a FIFO could block
    for ever), links leading out of the workspace, and anything that vanished or cannot be read; ``TOO_BIG`` for
    a file over ``MAX_SEARCH`` (a log of gigabytes is not read into memory whole)."""
    try:
        info = os.lstat(os.path.join(ctx.workspace.root, real_path(rel)))
        if not (stat.S_ISREG(info.st_mode) or stat.S_ISLNK(info.st_mode)):
            return None
        head = ctx.workspace.read_head(rel, MAX_SEARCH + 1)  # follows a link only inside; refuses a special target
    except (OSError, ToolFailure):
        return None
    if head is None:
        return None
    return TOO_BIG if len(head[0]) > MAX_SEARCH else head[0]


def _write_probe(ctx: ToolContext, args: dict[str, Any]) -> ProbeResult:
    """Done when the file holds exactly the content the call was to write; not done when it still holds what it
    held before the call; anything else (someone changed it since) is for a person to decide."""
    path = str(args.get("path", ""))
    try:
        current = ctx.workspace.hash(path) or ""
    except ToolFailure:
        return "not_done"  # a path the workspace refuses (too long, outside it) was refused before any write
    if current == content_hash(str(args.get("content", "")).encode()):
        return "done"
    before = ctx.before_hashes.get(quote_path(ctx.workspace.relative(path)))  # recorded form, as befores are
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
    states = {_diff_state(ctx, d) for d in diffs}
    if states == {"applies"}:
        return "not_done"
    if states == {"applied"}:
        return "done"
    return "unknown"


def _diff_state(ctx: ToolContext, diff: FileDiff) -> str:
    """``check_applied`` of one file's diff. A rename done leaves nothing at its old path: its result is looked
    for at the new one (rejected: "neither", which made a person decide on every rename a crash interrupted)."""
    state = check_applied(diff, ctx.workspace.read(diff.old_path or diff.new_path or ""))
    renamed = bool(diff.old_path and diff.new_path and diff.old_path != diff.new_path)
    if state != "neither" or not renamed or ctx.workspace.read(diff.old_path or "") is not None:
        return state
    return "applied" if check_applied(diff, ctx.workspace.read(diff.new_path or "")) == "applied" else state


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
        for touched in {diff.old_path, diff.new_path} - {None, ""}:
            ctx.workspace.refuse_configuration(str(touched))  # removed or renamed away, too
        new = apply_file_diff(diff, ctx.workspace.read(source))
        if new is not None:
            # Where it will write, too: a rename onto a folder or a FIFO is refused before the old file goes.
            ctx.workspace.check_writable(diff.new_path or diff.old_path or "")
        results.append((diff, new))
    for diff, new in results:
        if new is None:
            _remove(ctx, diff.old_path or "")
        else:
            ctx.workspace.write(diff.new_path or diff.old_path or "", new)
            if diff.old_path and diff.new_path and diff.old_path != diff.new_path:
                _remove(ctx, diff.old_path)  # after the new file is there: a failed write loses nothing
    return "applied to " + ", ".join(d.new_path or f"{d.old_path} (deleted)" for d in diffs)


def _remove(ctx: ToolContext, rel: str) -> None:
    """Remove a file a patch deletes or renames, in one line when it cannot be (gone meanwhile, no access)."""
    try:
        os.unlink(ctx.workspace.resolve(rel))
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ToolFailure(f"cannot remove {rel!r}: {why}; the patch was applied only to the files before it") from None


def _classify_command(
    args: dict[str, Any], rules: CommandRules = DEFAULT_COMMAND_RULES, protected: Protected = DEFAULT_PROTECTED
) -> Classification:
    """``rules``: the workspace's own (``.safepoint/commands.toml``); ``protected``: where the run's store really
    is (``core.command_reach.protected_for``); both bound by ``Safepoint.registry``."""
    command = str(args.get("command", ""))
    verdict = classify_with_reach(command, rules, protected)  # the store or a .git: held
    verdict = hold_unpacked(verdict, command, protected)  # an archive or patch whose members land there: held
    return Classification(
        idempotency=verdict.idempotency,
        replay_policy=verdict.replay_policy,
        risk_level=verdict.risk_level,
        side_effects=verdict.side_effects,
        reasons=verdict.reasons,
    )


def _command_targets(args: dict[str, Any], rules: CommandRules = DEFAULT_COMMAND_RULES) -> list[str]:
    """Files the command line names as written or removed (redirections, sed -i, rm, mv..., what a deleting
    `find` selects): kept ahead."""
    command = str(args.get("command", ""))
    return [*write_targets(command, rules), *find_removals(command, rules)]


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
    """Run a shell command in the workspace; classified per command line (`ls` may be re-run, `npm publish` not).
    ``timeout`` (seconds) limits the whole tree of processes the command starts; what it leaves running in the
    background is stopped when it ends."""
    limit = _timeout(timeout)
    # An environment on purpose: the user's less the store URL and every credential, unless passed by name
    # (rejected: the whole os.environ, which let `env` print the provider's key into the ledger).
    env = command_environment(os.environ, pass_env=ctx.pass_env, withhold=ctx.withhold_env)
    env["SAFEPOINT_IDEMPOTENCY_KEY"] = ctx.idempotency_key
    env.pop("SAFEPOINT_FAILPOINT", None)
    if "\x00" in command:  # it would cut the line short of what was classified (and the reaper's request apart)
        raise ToolFailure("the command holds a NUL character, which no command line can; remove it")
    if (too_long := _command_too_long(command, env)) is not None:
        raise ToolFailure(too_long)
    # The command's supervisor (engine/reaper.py) waits for a byte on a pipe before it starts the command, and the
    # byte is sent only once it is noted: an agent killed in between leaves a process that sees end-of-file and
    # exits without running it (otherwise it would run unnoted, beyond the reach of the next owner's cleanup).
    output_read, output_write = os.pipe()
    status_read, status_write = os.pipe()
    gate_read, gate_write = os.pipe()
    try:
        try:
            pid = LAUNCHER.launch(
                limit, ctx.workspace.root, env, ["bash", "-c", command], [output_write, status_write, gate_read]
            )
        finally:
            for fd in (output_write, status_write, gate_read):
                os.close(fd)
        try:
            ctx.processes.started(pid)
            os.write(gate_write, b"x")
        finally:
            os.close(gate_write)
        try:
            # The supervisor keeps the time itself; this is the backstop should it be stopped or stuck.
            output, raw, ended = collect(output_read, status_read, time.monotonic() + limit + REAPER_GRACE)
            if not ended:
                kill_tree(pid)
                more, late, _ = collect(output_read, status_read, time.monotonic() + REAPER_GRACE)
                output, raw = output + more, raw + late
        finally:
            ctx.processes.ended(pid)
    finally:
        for fd in (output_read, status_read):
            os.close(fd)
    report = _report(raw)
    if report.get("timed_out", True):
        raise ToolFailure(
            f"`{_one_line(command)}` hit its time limit of {limit:g}s and was stopped, with every process it"
            f" started\n{_shown(ctx, output)}"
        )
    code = int(report.get("status") or 0)
    leftovers = int(report.get("leftovers", 0))
    text = f"exit code {code}\n{_shown(ctx, output)}"
    if leftovers:
        text += (
            f"\n[safepoint] the command left {leftovers} background process(es) running when it ended; they were"
            " stopped (a command's processes never outlive it)"
        )
    if code != 0:
        raise ToolFailure(text)
    return text


def _one_line(command: str) -> str:
    """A command line as one line of a message (its newlines would cut the line that names the failure)."""
    flat = " ".join(command.split())
    return flat if len(flat) <= 200 else flat[:200] + "..."


def _timeout(value: Any) -> float:
    """A command's time limit in seconds: a number above 0 and at most a day (a bool, a string, NaN or inf is
    refused; so is 1e308, which overflowed the clock's arithmetic into a raw OverflowError)."""
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value <= 0:
        raise ToolFailure(f"timeout {value!r} is not a time limit; give a number of seconds above 0, like 60")
    if value > MAX_TIMEOUT:
        raise ToolFailure(
            f"timeout {value:g} is over the most a command may run, {MAX_TIMEOUT:g}s (a day); give a smaller one,"
            " or start a long job in the background and check on it"
        )
    return float(value)


def _command_too_long(command: str, env: dict[str, str]) -> str | None:
    """Why the kernel would refuse to start ``bash -c COMMAND`` (E2BIG), or None. Checked before anything starts,
    so the model is told what is wrong: rejected, the reaper's 'could not start; try again', which sent models
    into retrying the same here-doc for ever."""
    size = len(os.fsencode(command)) + 1
    if size > MAX_ARGUMENT:
        return (
            f"the command line is {size} bytes, over the system's limit of {MAX_ARGUMENT} for one argument; it is"
            " too long to run: write the content with write_file and run a script, or split the command"
        )
    total = size + sum(len(os.fsencode(f"{k}={v}")) + 1 + 8 for k, v in env.items()) + 64
    if total > MAX_ARGUMENTS:
        return (
            f"the command line and its environment are {total} bytes, over the system's limit of {MAX_ARGUMENTS};"
            " it is too long to run: write the content with write_file and run a script, or split the command"
        )
    return None


def _report(raw: bytes) -> dict[str, Any]:
    """The reaper's one-line report; an empty or broken one (the reaper was killed) counts as a time-out."""
    try:
        report = json.loads(raw.decode() or "null")
    except ValueError:
        report = None
    return report if isinstance(report, dict) else {"timed_out": True}


def _shown(ctx: ToolContext, output: bytes) -> str:
    if len(output) <= MAX_OUTPUT:
        return output.decode(errors="replace")
    output = ctx.redact(output)
    ref = ctx.save_artifact(f"{ctx.call_id}.stdout.txt", output)
    head = output[: MAX_OUTPUT // 2].decode(errors="replace")
    tail = output[-MAX_OUTPUT // 2 :].decode(errors="replace")
    return f"{head}\n[... {len(output)} bytes in all; full output kept as {ref}]\n{tail}"


BUILTIN_TOOLS: tuple[Tool, ...] = (read_file, list_files, search_files, write_file, apply_patch, run_command)


def builtin_registry(*extra: Tool) -> ToolRegistry:
    return ToolRegistry((*BUILTIN_TOOLS, *extra))
