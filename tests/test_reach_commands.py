"""Issue 11 §4, the family of the attacker's findings 7 and 8: a command whose write targets may include the store,
a `.git`, `.safepoint/` or any of their ancestors is held (whatever the spelling: brace, glob, option naming a
folder, a program no spec knows), and so is a write to git's configuration outside the repository. Everyday lines
that reach none of them stay as they were."""

from __future__ import annotations

import pytest

from safepoint.core.command_reach import PROTECTED_EFFECT, Protected, classify_with_reach
from safepoint.core.command_spec import ProgramSpec
from safepoint.core.commands import CommandRules, classify_command

HELD = [
    # literal names, other spellings
    "rm -rf .{git,agent-runtime}",
    "rm -rf .{g,x}it",  # the braces make `.git` out of pieces
    "rm -rf x/{.git,src}",
    "rm -rf .git{,}",
    "find .agent-runtime -delete",
    "find -L .git -name config -exec rm {} ;",
    "find .git -type f -exec chmod 777 {} +",
    "tar -xf hooks.tar -C .git",
    "tar -xf hooks.tar --directory=.git",
    "tar xf hooks.tar -C .GIT",  # a case-insensitive filesystem
    "unzip -o hooks.zip -d .git",
    "unzip -o hooks.zip -d .git/hooks",
    "rsync -a --delete empty/ .agent-runtime/",
    "rsync -a evil/ .git/hooks",
    "patch -p0 -d .git < hook.patch",
    "cp -t .git/hooks pre-commit",
    "cp --target-directory=.git/hooks pre-commit",
    "git init --template=evil-template",
    "git init --template evil-template .",
    "git clone --template=t https://example.com/x.git x",
    "git -c init.templateDir=t init",
    "git config --global init.templateDir t",
    "rename s/runtime/x/ .agent-runtime",
    "sometool --out=.git/hooks/pre-commit",
    "git stash --all",
    "git stash push -a -m wip",
    "git stash save --include-untracked",
    "git stash -u",
    "cd sub && rm -rf ../.git",
    "(cd .git && rm -rf hooks)",
    # globs
    "shopt -s dotglob; rm -rf *",
    "shopt -s extglob; rm -rf *",
    "shopt -s globstar dotglob; chmod -R 777 **",
    "GLOBIGNORE=x; rm -rf *",
    "export GLOBIGNORE=.; rm -rf -- *",
    "rm -rf .[^.]*",
    "rm -rf .[!.]*",
    "rm -rf ./{*,.*}",
    "rm -rf .?it",
    # ancestors
    "find . -mindepth 1 -delete",
    "find -delete",
    "find . -type f -exec sed -i s/a/b/ {} +",
    "find . -name '*.pyc' -o -name '*.lock' -delete",  # -o lets the second test through
    "find . -name '*.sample' -delete",  # .git/hooks holds them
    "find . -name '*.jsonl' -delete",  # the store's logs
    "find . -name config -delete",  # .git/config
    "find . -name '.git*' -delete",  # .git itself, the store's .gitignore
    "chmod -R a+rX .",
    "chown -R nobody .",
    "chmod -R 777 ./",
    "rm -rf ../ws",
    "rm -rf ..",
    "rm -rf ../../a",
    "rm -rf ../*",
    "rm -rf /",
    "cd .. && rm -rf ws",
    "mv ../ws ../elsewhere",
    "rsync -a --delete empty/ .",
    "rsync -a --delete empty/ ./",
    "unzip -o x.zip -d ..",
    # safepoint's configuration
    "echo 'patterns = [\"x\"]' > .safepoint/redact.toml",
    "rm -rf .safepoint",
    "cp evil.toml .safepoint/commands.toml",
    "echo '*' >> .safepointignore",
    "tar -xf cfg.tar -C .safepoint",
    # git's configuration outside the repository
    "printf '[core]\\n\\thooksPath = hooks\\n' >> ~/.gitconfig",
    "echo x > $HOME/.gitconfig",
    'echo x >> "${HOME}/.gitconfig"',
    "cp x ~/.config/git/config",
    "tee -a ~/.config/git/attributes < a",
    "echo x > $XDG_CONFIG_HOME/git/config",
    "echo x | sudo tee /etc/gitconfig",
    "export GIT_CONFIG_GLOBAL=/tmp/x",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.hooksPath GIT_CONFIG_VALUE_0=h git status",
    "env GIT_CONFIG_SYSTEM=x git status",
    "git config --global core.hooksPath hooks",
    # brace expansions past their bound in a writing command
    "rm -rf {a,b}{a,b}{a,b}{a,b}{a,b}{a,b}{a,b}",
]

NOT_HELD = [
    "rm -rf build/",
    "rm -rf build dist .pytest_cache",
    "find src -name '*.pyc' -delete",
    "find . -name '*.pyc' -delete",
    "find . -name '__pycache__' -prune -o -print",
    "find . -name '*.py' -exec grep -l TODO {} +",
    "find . -type f -name '*.py'",
    "find . -type d -name __pycache__ -exec rm -rf {} +",
    "find . -name cache -exec rm -rf {} +",
    "find . -name '.env*' -delete",
    "find . -name '*.log' -delete",
    "git -C .. commit -m wip",
    "git -C sub add .",
    "tar -xf x -C vendor",
    "tar -xzf release.tar.gz",
    "tar -cf out.tar -C src .",
    "unzip -o x.zip -d vendor",
    "rsync -a src/ backup/",
    "rsync -a src/ host:/srv/app",
    "cp -r x .",
    "mv a.txt .",
    "chmod +x .",
    "chmod -R u+w src",
    "rm -rf *",
    "rm -rf ./*",
    "rm -rf ../other/x",
    "rm a.{txt,md}",
    "echo {1..100}",
    "ls -d .*",
    "ls -la .git",
    "git status",
    "git stash",
    "git stash push -m wip",
    "git stash pop",
    "git init",
    "git config user.name x",
    "cut -d . -f1 x",
    "grep -r foo .",
    "cat .safepoint/commands.toml",
    "cat ~/.gitconfig",
    "git config --global --get user.name",
    "cd .. && ls",
    "echo GIT_CONFIG_GLOBAL",
]


@pytest.mark.parametrize("command", HELD)
def test_a_command_that_reaches_the_store_git_or_the_configuration_is_held(command: str) -> None:
    verdict = classify_with_reach(command)
    assert PROTECTED_EFFECT in verdict.side_effects, verdict.reasons
    assert verdict.risk_level == "high"


@pytest.mark.parametrize("command", NOT_HELD)
def test_an_everyday_line_that_reaches_none_of_them_is_not_held(command: str) -> None:
    verdict = classify_with_reach(command)
    assert PROTECTED_EFFECT not in verdict.side_effects, verdict.reasons
    plain = classify_command(command)
    assert (verdict.risk_level, verdict.replay_policy) == (plain.risk_level, plain.replay_policy)


def test_the_reason_names_what_is_reached() -> None:
    assert "safepoint's own configuration" in classify_with_reach("rm -rf .safepoint").reasons[-1]
    assert "the workspace itself" in classify_with_reach("chmod -R a+rX .").reasons[-1]
    assert "git's configuration" in classify_with_reach("echo x >> ~/.gitconfig").reasons[-1]
    assert ".git" in classify_with_reach("unzip x.zip -d .git").reasons[-1]


def test_a_store_under_another_name_is_reached_by_the_same_spellings() -> None:
    for line in ("rm -rf .{git,state}", "find .state -delete", "tar -xf x -C .state", "rsync -a --delete e/ .state"):
        assert (
            PROTECTED_EFFECT in classify_with_reach(line, protected=Protected(names=(".git", ".state"))).side_effects
        ), line


def test_a_users_spec_that_learns_a_folder_option_is_covered_at_once() -> None:
    """A program the user declares writing (its verdict writes) with a folder option: `-C .git` reaches .git."""
    rules = CommandRules(specs=(("deploy", ProgramSpec(grade="mutation", takes_value=frozenset({"-C"}))),))
    assert PROTECTED_EFFECT in classify_with_reach("deploy -C .git", rules).side_effects
    assert PROTECTED_EFFECT not in classify_with_reach("deploy -C out", rules).side_effects


def test_globbing_changed_in_the_line_counts_only_after_the_change() -> None:
    assert PROTECTED_EFFECT not in classify_with_reach("rm -rf *; shopt -s dotglob").side_effects
    assert PROTECTED_EFFECT in classify_with_reach("shopt -s dotglob\nrm -rf build/*").side_effects


def test_an_extglob_the_parser_cannot_read_is_never_run_on_its_own() -> None:
    """`!(src)` does not parse (bash itself needs extglob on before it reads the line): high risk, asked."""
    verdict = classify_with_reach("shopt -s extglob\nrm -rf !(src)")
    assert (verdict.risk_level, verdict.replay_policy) == ("high", "ask")
