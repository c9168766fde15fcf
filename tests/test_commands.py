"""Tests for safepoint.core.commands: classifying `run_command` lines for replay after a crash."""

from __future__ import annotations

import subprocess
import sys

import msgspec
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from safepoint.core.command_targets import _write_targets_cached, write_targets
from safepoint.core.commands import (
    DEFAULT_COMMAND_RULES,
    CommandRules,
    CommandVerdict,
    classify_command,
)
from safepoint.errors import ConfigError

IDEMPOTENCY = ("idempotent", "conditional", "non_idempotent")
POLICY = ("auto", "ask", "never")
RISK = ("low", "medium", "high")

READ = ("idempotent", "auto", "low")
RERUN = ("conditional", "auto", "low")
WRITE = ("conditional", "ask", "medium")
APPEND = ("non_idempotent", "ask", "medium")
DESTROY = ("non_idempotent", "ask", "medium")
DESTROY_HIGH = ("non_idempotent", "ask", "high")
UNKNOWN = ("non_idempotent", "ask", "medium")
UNPARSABLE = ("non_idempotent", "ask", "high")
NEVER = ("non_idempotent", "never", "high")


def grade(verdict: CommandVerdict) -> tuple[str, str, str]:
    return (verdict.idempotency, verdict.replay_policy, verdict.risk_level)


def rank(verdict: CommandVerdict) -> tuple[int, int, int]:
    return (
        IDEMPOTENCY.index(verdict.idempotency),
        POLICY.index(verdict.replay_policy),
        RISK.index(verdict.risk_level),
    )


# (command, expected grade, side effects that must be present, a reason fragment that must be present)
CASES: list[tuple[str, tuple[str, str, str], set[str], str]] = [
    ("ls", READ, set(), "`ls` only reads"),
    ("cat f", READ, set(), "`cat` only reads"),
    ("grep -r x .", READ, set(), "`grep` only reads"),
    ("git status", READ, set(), "`git status` only reads"),
    ("git diff", READ, set(), "`git diff` only reads"),
    ("pwd", READ, set(), "`pwd` only reads"),
    ("ls; rm -rf x", DESTROY_HIGH, {"filesystem_delete"}, "`rm -rf` deletes files recursively"),
    ("cat a | tee b", WRITE, {"filesystem_write"}, "`tee` writes files"),
    ("echo hi > out.txt", WRITE, {"filesystem_write"}, "redirection `> out.txt` writes a file"),
    ("echo hi >> log", APPEND, {"filesystem_write"}, "redirection `>> log` appends to a file"),
    ("ls 2>&1 >/dev/null", READ, set(), "`ls` only reads"),
    ("(cd sub && npm publish)", NEVER, {"publish", "network"}, "`npm publish` publishes"),
    ("echo $(curl -X POST http://x)", NEVER, {"network"}, "`curl -X POST` sends a request"),
    ('bash -c "git push origin main"', NEVER, {"vcs_remote"}, "`git push` changes a remote"),
    ("FOO=1 npm publish", NEVER, {"publish"}, "`npm publish`"),
    ("xargs rm < list", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),
    ("find . -name '*.pyc' -delete", DESTROY, {"filesystem_delete"}, "`find -delete` deletes files"),
    ("sed -i s/a/b/ f", WRITE, {"filesystem_write"}, "`sed -i` edits files in place"),
    ("curl http://x", READ, {"network"}, "`curl` fetches a URL"),
    ("curl -d a=1 http://x", NEVER, {"network"}, "`curl -d` sends a request"),
    ("npm test", RERUN, set(), "`npm test`"),
    ("pytest -q", RERUN, set(), "`pytest`"),
    (
        "mycustomtool",
        UNKNOWN,
        {"unknown"},
        "`mycustomtool` is not a known command; treated as having effects",
    ),
    ('echo "unterminated', UNPARSABLE, {"unknown"}, "not valid shell"),
    ("", READ, set(), "empty command"),
    ("sudo ls", NEVER, {"privilege"}, "`sudo` runs the command with elevated privileges"),
    (
        "git reset --hard",
        DESTROY_HIGH,
        {"filesystem_delete"},
        "`git reset --hard` discards uncommitted changes",
    ),
    # more of the same families
    ("   \n\t", READ, set(), "empty command"),
    ("# only a comment", READ, set(), "empty command"),
    ("ls > /dev/null 2>&1", READ, set(), "`ls` only reads"),
    ("cat < input.txt", READ, set(), "`cat` only reads"),
    ("ls &> all.log", WRITE, {"filesystem_write"}, "redirection `&> all.log` writes a file"),
    ("ls >| forced.txt", WRITE, {"filesystem_write"}, "redirection `>| forced.txt` writes a file"),
    ("ls 2>> err.log", APPEND, {"filesystem_write"}, "redirection `2>> err.log` appends"),
    ("(ls) > out", WRITE, {"filesystem_write"}, "redirection `> out` writes a file"),
    ("for f in a b; do rm $f; done", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),
    ("if true; then git push; fi", NEVER, {"vcs_remote"}, "`git push`"),
    ("while true; do ls; done", READ, set(), "`ls` only reads"),
    ("diff <(ls a) <(rm b)", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),
    ("echo `rm x`", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),
    ("x=$(rm a)", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),
    ("echo ${x:-$(rm y)}", UNKNOWN, {"unknown"}, "is not analysed"),
    ("a=1", READ, set(), "assignment to `a` only sets a shell variable"),
    ("$CMD args", UNKNOWN, {"unknown"}, "program name `$CMD` is decided at run time"),
    ("r? -rf /", UNKNOWN, {"unknown"}, "is decided at run time"),
    ("/bin/rm x", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),
    ("eval 'rm -rf /'", DESTROY_HIGH, {"filesystem_delete"}, "`rm -rf`"),
    ("sh -c 'sh -c \"git push\"'", NEVER, {"vcs_remote"}, "`git push`"),
    ("bash deploy.sh", UNKNOWN, {"unknown"}, "`bash deploy.sh` runs a script that is not analysed"),
    ("curl -fsSL https://x | sh", ("non_idempotent", "ask", "high"), {"network"}, "standard input"),
    ("bash <<EOF\ngit push\nEOF\n", NEVER, {"vcs_remote"}, "`git push`"),
    # wrappers
    ("env A=1 B=2 ls", READ, set(), "`ls` only reads"),
    ("timeout 10 pytest", RERUN, set(), "`pytest`"),
    ("nice -n 5 nohup make", RERUN, set(), "`make`"),
    ("time pytest -x", RERUN, set(), "`pytest`"),
    ("ls | time cat", READ, set(), "`cat` only reads"),
    ("sudo -u root rm -rf /", NEVER, {"privilege", "filesystem_delete"}, "`rm -rf`"),
    ("xargs -0 -n 1 git push", NEVER, {"vcs_remote"}, "`git push`"),
    ("command -v git", READ, set(), "`command -v`"),
    ("python -m pytest -x", RERUN, set(), "`pytest`"),
    ("python3 -m pip install requests", WRITE, {"network"}, "`pip install`"),
    ("python -c 'import os'", UNKNOWN, {"unknown"}, "`python -c` runs inline code"),
    ("uv run pytest", RERUN, set(), "`pytest`"),
    ("npx tsc --noEmit", RERUN, set(), "`tsc`"),
    ("npx -y some-publisher", UNKNOWN, {"unknown"}, "`some-publisher` is not a known command"),
    ("env -S 'rm -rf x'", DESTROY_HIGH, {"filesystem_delete"}, "`rm -rf`"),
    # find / sed / tee / sort / tar / make / awk
    ("find . -name x", READ, set(), "`find` only reads"),
    ("find . -exec rm {} \\;", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),
    ("find . -execdir git push \\;", NEVER, {"vcs_remote"}, "`git push`"),
    ("sed s/a/b/ f", READ, set(), "`sed` only reads"),
    ("sed -e s/i/x/ f", READ, set(), "`sed` only reads"),
    ("sed --in-place=.bak s/a/b/ f", WRITE, {"filesystem_write"}, "`sed --in-place`"),
    ("tee -a log < x", APPEND, {"filesystem_write"}, "`tee -a` appends"),
    ("sort -o out.txt in.txt", WRITE, {"filesystem_write"}, "`sort -o` writes a file"),
    ("tar tzf a.tgz", READ, set(), "`tar -t` only reads"),
    ("tar -xzf a.tgz", WRITE, {"filesystem_write"}, "`tar -x` extracts files"),
    ("make deploy", UNKNOWN, {"unknown"}, "`make deploy`"),
    ("awk '{print $1}' f", READ, set(), "`awk` only reads"),
    ("awk 'BEGIN{system(\"rm x\")}'", UNKNOWN, {"unknown"}, "may write files or run commands"),
    # destructive escalation
    ("rm x", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),
    ("rm -r build", DESTROY_HIGH, {"filesystem_delete"}, "recursively"),
    ("chmod -R 777 .", DESTROY_HIGH, {"filesystem_write"}, "`chmod -R`"),
    ("chmod +x run.sh", DESTROY, {"filesystem_write"}, "`chmod` changes file permissions"),
    ("dd if=/dev/zero of=disk.img", DESTROY_HIGH, {"filesystem_write"}, "`dd`"),
    ("mv a b", DESTROY, {"filesystem_delete", "filesystem_write"}, "`mv` moves or renames files"),
    ("mkdir -p build", WRITE, {"filesystem_write"}, "`mkdir` creates directories"),
    # git
    ("git -C sub --no-pager push origin", NEVER, {"vcs_remote"}, "`git push` changes a remote"),
    ("git log --oneline -5", READ, set(), "`git log` only reads"),
    ("git branch", READ, set(), "`git branch` only reads"),
    ("git branch -a", READ, set(), "`git branch` only reads"),
    ("git branch new-feature", WRITE, {"vcs_local"}, "`git branch` creates a branch"),
    ("git branch -D old", DESTROY_HIGH, {"vcs_local"}, "`git branch -D` deletes a branch"),
    ("git checkout -- src/app.py", DESTROY_HIGH, {"filesystem_delete"}, "discards uncommitted changes"),
    ("git checkout .", DESTROY_HIGH, {"filesystem_delete"}, "discards uncommitted changes"),
    ("git checkout -b feat", WRITE, {"vcs_local"}, "`git checkout -b` creates a branch"),
    ("git checkout main", APPEND, {"vcs_local"}, "`git checkout` switches branches or overwrites files"),
    ("git commit -m 'msg'", APPEND, {"vcs_local"}, "`git commit` records a new commit"),
    ("git add -A", WRITE, {"vcs_local"}, "`git add` stages files"),
    ("git clean -fdx", DESTROY_HIGH, {"filesystem_delete"}, "`git clean` deletes untracked files"),
    ("git clean -n", READ, set(), "`git clean --dry-run` only reads"),
    ("git stash list", READ, set(), "`git stash list` only reads"),
    ("git stash", APPEND, {"vcs_local"}, "`git stash` changes the working tree"),
    ("git stash drop", DESTROY_HIGH, {"filesystem_delete"}, "`git stash drop` discards stashed changes"),
    ("git restore --staged f", WRITE, {"vcs_local"}, "`git restore --staged` unstages files"),
    ("git restore f", DESTROY_HIGH, {"filesystem_delete"}, "discards uncommitted changes"),
    ("git fetch origin", RERUN, {"network"}, "`git fetch`"),
    ("git pull", APPEND, {"network"}, "`git pull`"),
    ("git config user.name", READ, set(), "`git config` only reads settings"),
    ("git config --global user.name me", WRITE, {"vcs_local"}, "`git config` changes settings"),
    ("git tag", READ, set(), "`git tag` only lists tags"),
    ("git tag v1.0", WRITE, {"vcs_local"}, "`git tag` creates a tag"),
    ("git remote -v", READ, set(), "`git remote` only reads remotes"),
    ("git frobnicate", UNKNOWN, {"unknown"}, "`git frobnicate` is not a known command"),
    # package managers and tools
    ("npm install", WRITE, {"network", "filesystem_write"}, "`npm install` installs or removes packages"),
    ("npm run test", RERUN, set(), "`npm run test`"),
    ("npm run deploy", UNKNOWN, {"unknown"}, "`npm run deploy` is not a known command"),
    ("npm ls", READ, set(), "`npm ls` only reads"),
    ("npm audit fix", WRITE, {"network"}, "`npm audit fix`"),
    ("pnpm publish", NEVER, {"publish"}, "`pnpm publish`"),
    ("yarn", WRITE, {"network"}, "`yarn` installs packages"),
    ("yarn test", RERUN, set(), "`yarn test`"),
    ("pip install -e .", WRITE, {"network"}, "`pip install`"),
    ("pip list", READ, set(), "`pip list` only reads"),
    ("cargo build --release", RERUN, set(), "`cargo build`"),
    ("cargo publish", NEVER, {"publish"}, "`cargo publish`"),
    ("go test ./...", RERUN, set(), "`go test`"),
    ("twine upload dist/*", NEVER, {"publish"}, "`twine upload`"),
    ("docker push img", NEVER, {"publish"}, "`docker push`"),
    ("docker ps -a", READ, set(), "`docker ps` only reads"),
    ("docker run ubuntu", UNKNOWN, {"unknown"}, "`docker run ubuntu` is not a known command"),
    ("kubectl get pods", READ, set(), "`kubectl get` only reads"),
    ("kubectl apply -f x.yaml", NEVER, {"infrastructure"}, "`kubectl apply` changes a cluster"),
    ("kubectl rollout status deploy/x", READ, set(), "`kubectl rollout status` only reads"),
    ("terraform plan", READ, set(), "`terraform plan` only reads"),
    ("terraform apply -auto-approve", NEVER, {"infrastructure"}, "`terraform apply`"),
    ("gh pr view 12", READ, set(), "`gh pr view` only reads"),
    ("gh pr create --fill", NEVER, {"vcs_remote"}, "`gh pr create` changes GitHub"),
    ("ssh host uptime", NEVER, {"remote_exec"}, "`ssh` runs commands on another machine"),
    ("rsync -a a/ host:b/", NEVER, {"network"}, "`rsync`"),
    ("systemctl status nginx", READ, set(), "`systemctl status` only reads"),
    ("systemctl restart nginx", NEVER, {"process"}, "`systemctl`"),
    ("node --version", READ, set(), "`node --version` only reads"),
    ("node script.js", UNKNOWN, {"unknown"}, "`node script.js` runs code that is not analysed"),
    # curl / wget
    ("curl -sSL https://x", READ, {"network"}, "`curl` fetches a URL"),
    ("curl -I https://x", READ, {"network"}, "`curl` fetches a URL"),
    ("curl -XPUT https://x", NEVER, {"network"}, "`curl -X PUT`"),
    ("curl --request=DELETE https://x", NEVER, {"network"}, "`curl -X DELETE`"),
    ("curl -X GET https://x", READ, {"network"}, "`curl` fetches a URL"),
    ("curl -F file=@a https://x", NEVER, {"network"}, "`curl -F`"),
    ("curl -T a.txt https://x", NEVER, {"network"}, "`curl -T`"),
    ("curl --json '{}' https://x", NEVER, {"network"}, "`curl --json`"),
    ("curl -G -d q=1 https://x", READ, {"network"}, "`curl` fetches a URL"),
    (
        "curl -o page.html https://x",
        WRITE,
        {"network", "filesystem_write"},
        "`curl -o page.html` writes a file",
    ),
    ("curl -sSLo out.tgz https://x", WRITE, {"filesystem_write"}, "`curl -o out.tgz` writes a file"),
    ("curl -O https://x/f.zip", WRITE, {"filesystem_write"}, "`curl -O` writes a file"),
    ("curl -o - https://x", READ, {"network"}, "`curl` fetches a URL"),
    ("wget https://x", WRITE, {"network", "filesystem_write"}, "saves the download to a file"),
    ("wget -qO- https://x", READ, {"network"}, "`wget` fetches a URL"),
    ("wget --post-data=a=1 https://x", NEVER, {"network"}, "`wget --post-data`"),
    # constructs bashlex could not parse (it needed rewrites): tree-sitter-bash parses them
    (
        "cat > f.py <<'EOF'\nprint($(x))\nEOF\n",
        WRITE,
        {"filesystem_write"},
        "redirection `> f.py` writes a file",
    ),
    ("cat <<EOF\n$(rm x)\nEOF\n", UNKNOWN, {"unknown"}, "here-document runs a command substitution"),
    ("[[ -f x ]] && rm x", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),
    ("echo $((1 + 2))", READ, set(), "`echo` only reads"),
    ("echo $(( $(rm x) + 1 ))", UNPARSABLE, {"unknown"}, "arithmetic expansion"),
    ("echo $((1 + $x ) ; rm x )", UNPARSABLE, {"unknown"}, "arithmetic expansion"),
    # words are re-read from the source as bash reads them, so quoting cannot hide a flag or a program
    ("curl '-''d' x http://h", NEVER, {"network"}, "`curl -d`"),
    ("'r''m' -rf /", DESTROY_HIGH, {"filesystem_delete"}, "`rm -rf`"),
    ("echo 'it'\\''s' > 'my file'", WRITE, {"filesystem_write"}, "redirection `> my file` writes a file"),
    ("case x in a) rm y;; esac", DESTROY, {"filesystem_delete"}, "`rm` deletes files"),  # parsed since tree-sitter
    ("ls |", UNPARSABLE, {"unknown"}, "not valid shell"),
]


@pytest.mark.parametrize(("command", "expected", "effects", "reason"), CASES, ids=[c[0] or "<empty>" for c in CASES])
def test_classification_table(command: str, expected: tuple[str, str, str], effects: set[str], reason: str) -> None:
    verdict = classify_command(command)
    assert grade(verdict) == expected, verdict
    assert effects <= set(verdict.side_effects), verdict
    assert any(reason in r for r in verdict.reasons), verdict.reasons


def test_the_parser_is_imported_on_the_first_parse_not_at_import() -> None:
    # Loading the parser costs tens of milliseconds: a CLI start-up must not pay it.
    probe = (
        "import sys, safepoint.core.commands, safepoint.core.command_targets, safepoint.engine.builtin\n"
        "before = 'tree_sitter' in sys.modules or 'tree_sitter_bash' in sys.modules\n"
        "verdict = safepoint.core.commands.classify_command('rm -rf build')\n"
        "print(before, 'tree_sitter_bash' in sys.modules, verdict.risk_level)"
    )
    done = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, timeout=60, check=False)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["False", "True", "high"]


def test_read_only_commands_have_no_side_effects() -> None:
    for command in ("ls -la", "git status", "cat a b | grep x | wc -l", "jq .x f.json"):
        assert classify_command(command).side_effects == ()


def test_reasons_follow_the_line_order_and_are_deduplicated() -> None:
    verdict = classify_command("ls; echo hi > out.txt; ls; git push")
    assert verdict.reasons == (
        "`ls` only reads",
        "`echo` only reads",
        "redirection `> out.txt` writes a file",
        "`git push` changes a remote",
    )


def test_side_effects_are_sorted_and_unique() -> None:
    verdict = classify_command("rm a; rm b; mv c d; curl -d x http://h; echo > f")
    assert verdict.side_effects == tuple(sorted(set(verdict.side_effects)))
    assert verdict.side_effects == ("filesystem_delete", "filesystem_write", "network")


def test_worst_part_wins_across_dimensions() -> None:
    # one part raises replay policy (never), another raises risk; neither alone is the whole verdict
    verdict = classify_command("curl -d x http://h && rm -rf build")
    assert grade(verdict) == NEVER
    assert {"network", "filesystem_delete"} <= set(verdict.side_effects)


def test_nested_shell_strings_are_depth_limited() -> None:
    command = "ls"
    for _ in range(8):
        command = "bash -c " + "'" + command.replace("'", "'\\''") + "'"
    verdict = classify_command(command)
    assert grade(verdict) == UNPARSABLE
    assert any("nested deeper" in r for r in verdict.reasons)


def test_quoted_heredoc_body_is_not_treated_as_substitution() -> None:
    quoted = classify_command("cat <<'EOF'\n$(rm -rf /)\nEOF\n")
    unquoted = classify_command("cat <<EOF\n$(rm -rf /)\nEOF\n")
    assert grade(quoted) == READ
    assert grade(unquoted) == UNKNOWN


def test_very_long_line_is_not_analysed() -> None:
    verdict = classify_command("echo " + "a" * 200_000)
    assert grade(verdict) == UNPARSABLE
    assert any("longer than" in r for r in verdict.reasons)


def test_verdict_is_cached_and_encodable() -> None:
    first = classify_command("git status && pytest")
    assert classify_command("git status && pytest") is first
    decoded = msgspec.json.decode(msgspec.json.encode(first), type=CommandVerdict)
    assert decoded == first


# ---- rules ----------------------------------------------------------------------------------------


def test_rules_are_hashable_and_default_equals_a_fresh_instance() -> None:
    assert CommandRules() == DEFAULT_COMMAND_RULES
    assert hash(CommandRules()) == hash(DEFAULT_COMMAND_RULES)
    assert "git push" in DEFAULT_COMMAND_RULES.high_risk
    assert "status" in dict(DEFAULT_COMMAND_RULES.read_only_subcommands)["git"]


def test_extend_read_only_makes_a_custom_tool_safe() -> None:
    assert grade(classify_command("mytool --report")) == UNKNOWN
    rules = DEFAULT_COMMAND_RULES.extend(read_only=["mytool"])
    verdict = classify_command("mytool --report", rules)
    assert grade(verdict) == READ
    assert verdict.reasons == ("`mytool` only reads",)
    # the original is untouched
    assert "mytool" not in DEFAULT_COMMAND_RULES.read_only
    assert grade(classify_command("mytool --report")) == UNKNOWN


def test_extend_accepts_a_single_name_and_multi_word_entries() -> None:
    rules = DEFAULT_COMMAND_RULES.extend(high_risk="deploy prod", rerunnable=["just test"])
    assert grade(classify_command("deploy prod --now", rules)) == NEVER
    assert grade(classify_command("deploy staging", rules)) == UNKNOWN
    assert grade(classify_command("just test", rules)) == RERUN


def test_extend_merges_read_only_subcommands() -> None:
    rules = DEFAULT_COMMAND_RULES.extend(read_only_subcommands={"git": ["lfs"], "mycli": {"status"}})
    subs = dict(rules.read_only_subcommands)
    assert {"lfs", "status", "diff"} <= subs["git"]
    assert grade(classify_command("mycli status", rules)) == READ
    assert grade(classify_command("mycli deploy", rules)) == UNKNOWN
    assert grade(classify_command("git lfs ls-files", rules)) == READ


def test_extend_unknown_field_raises_config_error_naming_it() -> None:
    with pytest.raises(ConfigError, match="readonly") as info:
        DEFAULT_COMMAND_RULES.extend(readonly=["x"])
    assert "\n" not in str(info.value)


@pytest.mark.parametrize(
    "bad",
    [{"read_only": [3]}, {"read_only": [""]}, {"read_only": 5}, {"read_only_subcommands": ["git"]}],
)
def test_extend_rejects_malformed_values(bad: dict[str, object]) -> None:
    with pytest.raises(ConfigError):
        DEFAULT_COMMAND_RULES.extend(**bad)  # type: ignore[arg-type]


def test_constructor_accepts_plain_sets_and_a_dict() -> None:
    rules = CommandRules(read_only={"a"}, read_only_subcommands={"tool": ["show"]})  # type: ignore[arg-type]
    assert rules.read_only == frozenset({"a"})
    assert rules.read_only_subcommands == (("tool", frozenset({"show"})),)
    hash(rules)
    assert grade(classify_command("tool show", rules)) == READ
    assert grade(classify_command("ls", rules)) == UNKNOWN  # the defaults were replaced, not extended


def test_an_entry_in_two_tables_counts_as_the_more_dangerous() -> None:
    rules = DEFAULT_COMMAND_RULES.extend(read_only=["git push"])
    assert grade(classify_command("git push", rules)) == NEVER


def test_tables_cannot_make_an_argument_checked_program_laxer() -> None:
    rules = DEFAULT_COMMAND_RULES.extend(read_only=["curl", "rm"])
    assert grade(classify_command("curl -d x http://h", rules)) == NEVER
    assert grade(classify_command("rm -rf x", rules)) == DESTROY_HIGH


def test_tables_can_make_an_argument_checked_program_stricter() -> None:
    rules = DEFAULT_COMMAND_RULES.extend(high_risk=["git commit"])
    assert grade(classify_command("git commit -m x", rules)) == NEVER


# ---- properties ----------------------------------------------------------------------------------------


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_never_raises_on_any_text(command: str) -> None:
    verdict = classify_command(command)
    assert isinstance(verdict, CommandVerdict)
    assert verdict.reasons
    assert not any(r.startswith("internal error") for r in verdict.reasons)
    # what tool registration forbids must never come out of the classifier
    assert not (verdict.idempotency == "non_idempotent" and verdict.replay_policy == "auto")
    assert not (verdict.risk_level == "high" and verdict.replay_policy == "auto")


SHELL_PIECES = [
    *"abcrm -$()`'\"\\;&|<>{}[]*?!#=\n\t0/.~",
    "rm ",
    "git push",
    "bash -c ",
    "sudo ",
    "$((",
    "<<EOF\n",
    "EOF",
    "case ",
    " in ",
    "esac",
    "time ",
    "[[ ",
    " ]]",
    "for x in y; do ",
    "done",
    "if ",
    "then ",
    "fi",
    "curl -d ",
    "find . -exec ",
    "xargs ",
    "eval ",
]


@settings(max_examples=150, deadline=None)
@given(st.lists(st.sampled_from(SHELL_PIECES), max_size=25).map("".join))
def test_never_raises_on_shell_like_text(command: str) -> None:
    verdict = classify_command(command)
    assert verdict.reasons
    assert not any(r.startswith("internal error") for r in verdict.reasons)


READ_ONLY_PROGRAMS = ["ls", "cat", "grep", "wc", "head", "pwd", "echo", "git status", "git log", "diff", "jq"]
SAFE_WORDS = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789._-/", min_size=1, max_size=8).filter(
    lambda w: not w.startswith("-")
)


@settings(max_examples=80, deadline=None)
@given(st.sampled_from(READ_ONLY_PROGRAMS), st.lists(SAFE_WORDS, max_size=4))
def test_appending_rm_rf_never_makes_a_verdict_safer(program: str, args: list[str]) -> None:
    command = " ".join([program, *args])
    before = classify_command(command)
    after = classify_command(command + "; rm -rf /")
    assert all(a >= b for a, b in zip(rank(after), rank(before), strict=True))
    assert after.idempotency == "non_idempotent"
    assert after.risk_level == "high"
    assert set(before.side_effects) <= set(after.side_effects)
    assert before.reasons == after.reasons[: len(before.reasons)]


POOL = [c for c, expected, _, _ in CASES if expected != UNPARSABLE and c.strip() and "\n" not in c and "#" not in c]


@settings(max_examples=100, deadline=None)
@given(st.sampled_from(POOL), st.sampled_from(POOL))
def test_a_list_gets_the_per_field_maximum_of_its_parts(first: str, second: str) -> None:
    a, b = classify_command(first), classify_command(second)
    both = classify_command(f"{first}; {second}")
    assert rank(both) == tuple(max(x, y) for x, y in zip(rank(a), rank(b), strict=True))
    assert set(both.side_effects) == set(a.side_effects) | set(b.side_effects)


# ---- write_targets: the paths a command may change --------------------------------------------------------

WRITE_TARGET_CASES: list[tuple[str, tuple[str, ...]]] = [
    # redirections
    ("echo hi > out.txt", ("out.txt",)),
    ("echo hi >> log 2> err.txt 1> one &> both &>> both2 >| clob", ("log", "err.txt", "one", "both", "both2", "clob")),
    ("echo x >& all.log", ("all.log",)),
    ("cat <> rw", ("rw",)),
    ("cat a > b < c", ("b",)),
    ("> first rm second", ("first", "second")),
    ("exec > log 2>&1", ("log",)),
    ("cat <<'EOF' > f\n$HOME\nEOF", ("f",)),
    ("echo x >'quoted name'", ("quoted name",)),
    ("ls > >(tee plog)", ("plog",)),
    ("{ cd sub; rm a; } > log", ("sub/a", "log")),  # the group's redirection is opened before its `cd`
    ("if true; then rm a; fi > o", ("a", "o")),
    # coreutils
    ("cat a | tee -a b c - /dev/null", ("b", "c")),
    ("rm -rf build/ dist *.pyc", ("build/", "dist", "*.pyc")),
    ("rm [ab].txt", ("[ab].txt",)),
    ("rm -- -weird", ("-weird",)),
    ("rm a a b a", ("a", "b")),
    ('rm "my file" a\\ b', ("my file", "a b")),
    ("rmdir empty; unlink lnk", ("empty", "lnk")),
    ("mv a b dest/", ("a", "b", "dest/")),
    ("mv -t dir a b", ("dir", "a", "b")),
    ("cp -r src dst", ("dst",)),
    ("cp a b c dir/", ("dir/",)),
    ("cp -t dir a b", ("dir",)),
    ("cp --target-directory=dir a", ("dir",)),
    ("install -m 755 tool /usr/local/bin/tool", ("/usr/local/bin/tool",)),
    ("install -d d1 d2", ("d1", "d2")),
    ("ln -s ../target link", ("link",)),
    ("ln -sf ../lib/target", ("target",)),
    ("touch -d yesterday a b", ("a", "b")),
    ("truncate -s 0 log.txt", ("log.txt",)),
    ("chmod 755 a b", ("a", "b")),
    ("chmod -x script.sh", ("script.sh",)),  # `-x` is a mode here, not an option
    ("chmod -R u+w dir", ("dir",)),
    ("chmod --reference=ref a", ("a",)),
    ("chown -R user:group dir", ("dir",)),
    ("chown --from=a:b c:d f", ("f",)),
    ("sort -o sorted.txt in", ("sorted.txt",)),
    ("dd if=/dev/zero of=disk.img bs=1M", ("disk.img",)),
    # in-place editors
    ("sed -i s/a/b/ f g", ("f", "g")),
    ("sed -i -e s/a/b/ -e s/c/d/ f", ("f",)),
    ("sed -i -f script.sed f", ("f",)),
    ("sed -i.bak s/a/b/ f", ("f", "f.bak")),  # the backup copy is written too
    ("sed -ie s/a/b/ f", ("f", "fe")),  # GNU reads `-ie` as backup suffix "e"
    ("sed --in-place=.orig -n p f", ("f", "f.orig")),
    ("sed -i '' 's/a/b/' f", ("f",)),  # BSD spelling of "no backup"
    ("sed -n p f", ()),
    ("perl -i -pe 's/a/b/' f g", ("f", "g")),
    ("perl -pi.orig -e 's/a/b/' f", ("f", "f.orig")),
    ("perl -i script.pl f", ("f",)),
    ("perl -pe 's/a/b/' f", ()),
    # git
    ("git checkout -- a b", ("a", "b")),
    ("git checkout HEAD~1 -- src/x.py", ("src/x.py",)),
    ("git checkout -b feature", ()),
    ("git restore a b", ("a", "b")),
    ("git restore --staged a", ()),
    ("git rm -r old", ("old",)),
    ("git rm --cached a", ()),
    ("git mv a b", ("a", "b")),
    ("git -C sub rm a", ("sub/a",)),
    ('git -C "$D" rm a', ()),
    ("git status > st.txt", ("st.txt",)),
    # patch, archives, downloads
    ("patch f.c fix.diff", ("f.c",)),
    ("patch -i fix.diff f.c", ("f.c",)),
    ("patch -p1 < fix.diff", ()),
    ("patch -d sub -p1 -i x f", ("sub/f",)),
    ("tar -xzf a.tgz", ()),
    ("tar czf a.tgz src", ("a.tgz",)),
    ("tar -cf out.tar src", ("out.tar",)),
    ("unzip a.zip", ()),
    ("gzip -k f; gzip g", ("g",)),
    ("curl -o page.html http://x", ("page.html",)),
    ("curl --output-dir out -o f.html http://x", ("out/f.html",)),
    ("wget -O - http://x", ()),
    # skipped: unknown set of files
    ("find . -name x -delete", ()),
    ("find . -exec rm {} \\;", ()),
    ('python -c \'open("x", "w")\'', ()),
    ("python script.py", ()),
    ("xargs rm < list", ()),
    ("xargs -I{} cp {} dest/", ("dest/",)),
    # nesting and wrappers
    ("bash -c 'echo x > f'", ("f",)),
    ("sudo sh -c 'cat > /etc/x'", ("/etc/x",)),
    ("bash <<EOF\nrm heredoc_file\nEOF", ("heredoc_file",)),
    ("eval 'rm evald'", ("evald",)),
    ("sudo rm f", ("f",)),
    ("sudo -u bob rm f", ("f",)),
    ("env X=1 sed -i s/a/b/ f", ("f",)),
    ("timeout 5 rm x", ("x",)),
    ("nohup rm x &", ("x",)),
    ("time rm t", ("t",)),
    ("echo x | sudo tee /etc/hosts >/dev/null", ("/etc/hosts",)),
    ("echo $(rm inner) > outer", ("inner", "outer")),
    ("echo `rm bt` > o", ("bt", "o")),
    ("[[ -f x ]] && rm x", ("x",)),
    # working directory
    ("(cd sub && rm a)", ("sub/a",)),
    ("(cd sub && rm a); rm b", ("sub/a", "b")),
    ("cd sub && rm a; rm b", ("sub/a", "sub/b")),
    ("cd sub && (cd deeper && rm a) && rm b", ("sub/deeper/a", "sub/b")),
    ("cd sub/ && cd .. && rm a", ("a",)),
    ("cd /tmp && rm a", ("/tmp/a",)),
    ('cd "$D" && rm a /abs', ("/abs",)),  # relative paths cannot be placed after an unknown `cd`
    ("cd sub | rm a", ("a",)),  # a pipeline member's `cd` stays in its subshell
    ("bash -c 'cd sub' && rm a", ("a",)),
    ("cd a; eval 'cd b'; rm c", ("a/b/c",)),
    ("cd sub > log; rm a", ("log", "sub/a")),  # the redirection is opened before the `cd`
    ("cd sub && git -C inner checkout -- p", ("sub/inner/p",)),
    # not literal
    ("ls > /dev/null", ()),
    ('echo $X > "$OUT"', ()),
    ("cat a 2>&1", ()),
    ("echo x >&2", ()),
    ('rm "$f"', ()),
    ('rm -rf "$DIR"/build', ()),
    ("rm ~/a ~ x$(y) `z`", ()),
    ("rm {a,b}.txt c.{md,txt}", ("a.txt", "b.txt", "c.md", "c.txt")),  # expanded as bash does
    ("rm 'lit $X'", ("lit $X",)),  # single quotes: a literal dollar sign
    ("echo $((1+2)) > out$((n)).txt", ()),
    ("echo > f0.txt; echo $((1))", ("f0.txt",)),
    ('for f in a b; do rm "$f"; done', ()),
    ("sed -i$S s/a/b/ f", ("f",)),
    ("dd if=x of=/dev/sda", ()),
    ("echo 1 > /proc/sys/x", ()),
    ("$CMD a > b", ("b",)),
    # unparsable or empty
    ('echo "unterminated', ()),
    ("rm a (", ()),
    ("", ()),
    ("   # just a comment", ()),
]


@pytest.mark.parametrize(("command", "expected"), WRITE_TARGET_CASES)
def test_write_targets(command: str, expected: tuple[str, ...]) -> None:
    assert write_targets(command) == expected


def test_write_targets_does_not_change_the_verdict() -> None:
    before = classify_command("cd sub && sed -i.bak s/a/b/ f > log")
    write_targets("cd sub && sed -i.bak s/a/b/ f > log")
    assert classify_command("cd sub && sed -i.bak s/a/b/ f > log") == before


WRITE_SHELL_PIECES = [
    *SHELL_PIECES,
    *"(){};,",
    "cd ",
    "sed -i",
    "perl -pi",
    "tar ",
    "cp ",
    "mv -t ",
    "ln ",
    "git -C ",
    "checkout -- ",
    "xargs -I{} ",
    "of=",
    "patch -d ",
    "chmod ",
    "tee ",
    "2>",
    "&>",
    ">&",
    "env -S ",
    "curl --output-dir ",
    "gzip ",
    " -- ",
    "pushd ",
    "popd",
    "f() ",
]


@settings(max_examples=150, deadline=None)
@given(st.text())
def test_write_targets_never_raises_on_any_text(command: str) -> None:
    found = write_targets(command)
    assert isinstance(found, tuple)
    assert all(isinstance(path, str) and path for path in found)
    assert len(set(found)) == len(found)
    _write_targets_cached(command)  # the safety net in write_targets must not be what keeps it from raising


@settings(max_examples=200, deadline=None)
@given(st.lists(st.sampled_from(WRITE_SHELL_PIECES), max_size=25).map("".join))
def test_write_targets_walk_never_raises_on_shell_like_text(command: str) -> None:
    found = _write_targets_cached(command)
    assert len(set(found)) == len(found)
    if not any(quote in command for quote in "'\"\\"):  # quoting can make `$` and `~` literal
        assert not any("$" in path or path.startswith("~") for path in found)


PLAIN_NAMES = st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789_.", min_size=1, max_size=8)


@settings(max_examples=60, deadline=None)
@given(st.lists(PLAIN_NAMES, min_size=1, max_size=4), st.sampled_from(["rm -f", "touch", "chmod 644", "tee"]))
def test_a_literal_cd_prefixes_the_paths_that_follow(names: list[str], program: str) -> None:
    command = " ".join([program, *names])
    assert write_targets(command) == tuple(dict.fromkeys(names))
    assert write_targets(f"(cd sub && {command})") == tuple(dict.fromkeys(f"sub/{n}" for n in names))
    assert write_targets(f'(cd "$D" && {command})') == ()
    # the subshell's `cd` ends with it
    assert write_targets(f"(cd sub && {command}); {command}") == (
        *dict.fromkeys(f"sub/{n}" for n in names),
        *dict.fromkeys(names),
    )


def test_a_line_beyond_ascii_never_crashes_the_parser() -> None:
    # tree-sitter-bash 0.25 crashed the process (SIGSEGV, at random) on lines like this one, found by the
    # property test above: the classifier runs in the agent's process, so a crash would end every resume.
    line = (
        b"^{\xf3\xa8\xb5\xa4\xf2\x8d\x9a\x92\xc3\xbb\xc2\xa9\xf2\xa2\x9d\xa9}q\xc2\xba\x1a\xf3\x83\x80\x95\xc3\x85L"
    ).decode()
    probe = (
        "import sys\n"
        "from safepoint.core.commands import classify_command\n"
        "line = sys.stdin.read()\n"
        "for i in range(4000):\n"
        "    classify_command(line + ' ' * (i % 7) + '{é}' * (i % 3) + f' #{i}')\n"
        "print('done')"
    )
    done = subprocess.run(
        [sys.executable, "-c", probe], input=line, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == 0, done.stderr[-500:]
    assert done.stdout.strip() == "done"
    verdict = classify_command(line)
    assert verdict.replay_policy == "ask"
    assert classify_command("echo 'héllo ✓' > é.txt").reasons[-1] == "redirection `> é.txt` writes a file"
