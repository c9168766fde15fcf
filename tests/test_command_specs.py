"""The run_command classifier read by its specs: commands that run other code never replay on their own (issue 9
§1), options are vetted one by one (deny by default), everyday read-only lines stay automatic, and the same spec
gives the paths a line writes. Users extend it in the same form."""

from __future__ import annotations

import json
import tomllib

import pytest

from safepoint.core.command_parse import dollar_unquote
from safepoint.core.command_spec import OptionEffect, ProgramSpec, names, parse_words
from safepoint.core.command_targets import write_targets
from safepoint.core.commands import DEFAULT_COMMAND_RULES, CommandRules, classify_command, rules_from_document
from safepoint.errors import ConfigError


def is_auto(command: str, rules: CommandRules = DEFAULT_COMMAND_RULES) -> bool:
    verdict = classify_command(command, rules)
    return verdict.replay_policy == "auto"


# ---- issue 9 §1: every line was idempotent/auto before ----------------------------------------------------------

ISSUE_LINES = [
    "trap 'rm -rf x' EXIT; ls",
    "shopt -s expand_aliases; alias ls='rm -rf x'; ls",
    "sed -n '1e id' f",
    "sed -n 'w out' f",
    "tar -t --checkpoint-action=exec=id -f a.tar",
    "git -c core.fsmonitor=./x status",
    "BASH_ENV=./x bash -c ls",
    "PATH=.:$PATH ls",
    "git diff --output=out",
    "git log --output=out",
    "rg --pre ./x foo",
    "date -s '2020-01-01 00:00'",
    "printf -v 'a[$(id)]' x",
    "test -v 'a[$(id)]'",
    "git grep -Oid foo",
]


@pytest.mark.parametrize("command", ISSUE_LINES)
def test_the_issues_lines_ask(command: str) -> None:
    verdict = classify_command(command)
    assert verdict.replay_policy != "auto", verdict
    assert verdict.idempotency == "non_idempotent" or verdict.replay_policy == "ask", verdict
    assert verdict.reasons


# ---- families of my own: each must ask ------------------------------------------------------------------------------

HOSTILE = [
    # traps, aliases, builtins that change how later words run
    "trap id DEBUG; ls",
    "trap -- 'id' ERR",
    "alias grep='rm -rf x'",
    "enable -f ./x.so x; ls",
    "source ./x",
    ". ./x",
    "eval ls",
    "builtin eval 'ls'",
    "command eval 'ls'",
    "hash -p ./x ls; ls",
    "mapfile -C id -c 1 arr < f",
    "declare -i n; n=1",
    "declare -n ref=x",
    # variables that choose programs, code or configuration
    "export PATH=.:$PATH",
    "GIT_EXTERNAL_DIFF=./x git diff",
    "GIT_PAGER=./x git log",
    "GIT_SSH_COMMAND=./x git fetch",
    "GIT_CONFIG_COUNT=1 GIT_CONFIG_KEY_0=core.pager GIT_CONFIG_VALUE_0=./x git log",
    "PAGER=./x man ls",
    "LESSOPEN='|./x %s' less f",
    "EDITOR=./x git status",
    "LD_PRELOAD=./x.so ls",
    "PROMPT_COMMAND=id bash -c ls",
    "HOME=./evil git status",
    "XDG_CONFIG_HOME=./evil git status",
    "RIPGREP_CONFIG_PATH=./rc rg foo",
    "env -i PATH=. ls",
    "env PYTHONSTARTUP=./x ls",
    "IFS=/ ; ls",
    # array subscripts and other arithmetic on variables
    "[[ -v 'a[$(id)]' ]]",
    "[ -v 'a[$(id)]' ]",
    "declare 'a[$(id)]=1'",
    "read 'a[$(id)]' < /dev/null",
    "unset 'a[$(id)]'",
    "export 'a[$(id)]=1'",
    "getopts ab 'a[$(id)]'",
    "(( a[$(id)] ))",
    "echo $(( a[$(id)] ))",
    "x='a[$(id)]'; echo $((x))",
    "x='a[$(id)]'; [[ $x -eq 1 ]]",
    "let 'a[$(id)]=1'",
    "echo ${a[i]}",
    "echo ${x:n}",
    "echo ${!ref}",
    "echo ${x@P}",
    "a['$(id)']=1",
    # eval-like options and scripts
    "sed 's/a/b/e' f",
    "sed 's/a/b/w out' f",
    "sed -n '$W out' f",
    "sed -n '/x/e id' f",
    "sed -ni 's/a/b/' f",
    "sed -n -e p -e '1e id' f",
    "sed --expression='1e id' f",
    "sed --expression '1e id' f",
    "sed -f script.sed f",
    "/usr/bin/sed -n '1e id' f",
    'awk \'BEGIN{print "x" > "out"}\'',
    "awk '{print | \"sh\"}' f",
    "awk 'BEGIN{\"id\" | getline}'",
    "awk -f prog.awk f",
    "gawk -l ./ext 'BEGIN{}'",
    "awk '@load \"x\"'",
    "find . -exec id \\;",
    "find . -execdir id \\;",
    "find . -ok id \\;",
    "find . -name '*.py' -exec grep -l x {} +",
    "find . -delete",
    "find . -fprint out",
    "find . -fprintf out '%p'",
    "tar -xf a.tar --to-command=id",
    "tar -cf a.tar --use-compress-program=./x .",
    "tar -I ./x -tf a.tar",
    "tar -tf host:archive.tar",
    "tar -t --info-script=./x -f a.tar",
    "git diff --ext-diff",
    "git log -p --textconv",
    "git --config-env=core.pager=X log",
    "git -c alias.st='!id' st",
    "git --exec-path=. status",
    "git -p log",
    "git --paginate log",
    "git grep -O foo",
    "git grep --open-files-in-pager=id foo",
    "git log --output out",
    "git show --output=x HEAD",
    "git diff --no-index a b --output=x",
    "git ls-remote --upload-pack=./x origin",
    "git cat-file --textconv HEAD:f",
    "rg --pre=./x foo",
    "rg --pre ./x -- foo",
    "rg --hostname-bin=./x foo",
    "xargs grep foo < list",
    "xargs -0 cat < list",
    "fd -x id",
    "less '+!id' f",
    "bat --pager=./x f",
    "curl -K cfg https://x",
    "wget -e 'robots=off' https://x",
    # writing a file an option or operand names
    "sort -o out in",
    "sort --output=out in",
    "sort --output out in",
    "sort --out=out in",
    "sort -uo out in",
    "sort -S 1M -o out in",
    "sort --compress-program=./x in",
    "tee out",
    "uniq a b",
    "split f",
    "csplit f 1",
    "tree -o out",
    "info -o out ls",
    "file -C -m magic",
    "yq -i .a=1 f.yaml",
    "ls > out",
    "cat f >> out",
    # system state
    "date 010101012020",
    "date --set='2020-01-01'",
    "hostname evil",
    "hostname -F name.txt",
    "timedatectl set-time 2020-01-01",
    "sysctl -w x=1",
    # quoting, escapes, continuations, nesting
    "\\ls; trap id EXIT",
    "ls $'\\x2d\\x2dcolor'; trap id EXIT",
    "l\\\ns; trap id EXIT",
    'bash -c "bash -c \'sed -n \\"1e id\\" f\'"',
    "bash <<'END'\ntrap id EXIT\nEND\n",
    "bash <<< 'trap id EXIT'",
    "env -S 'sed -n 1eid' f",
    "command -p sed -n '1e id' f",
    "exec sed -n '1e id' f",
    "nice -n 5 sed -n '1e id' f",
    "timeout 5 rg --pre ./x foo",
    "bash -lc ls",
    "bash -i -c ls",
    "s''ed -n '1e id' f",
    '"sed" -n "1e id" f',
    "sed -n $'1e id' f",
    "git -C sub -c core.pager=x log",
    # an option spelled so that it does not look like one
    "rg $'\\x2d\\x2dpre=./x' foo",
    "rg $'--pre=./x' foo",
    'rg $"--pre" ./x foo',
    "rg '--pre'=./x foo",
    'rg "--p"re=./x foo',
    "rg --p\\re=./x foo",
    "rg -\\-pre ./x foo",
    "sed -n $'1\\x65 id' f",
    "sed -n $'1\\145 id' f",
    "$'\\x72m' -rf x",
    # options the rules do not know
    "ls --unknown",
    "grep --unknownopt foo f",
    "jq --unknownopt . f",
    "diff --to-file=x --unknown a",
    "cat -Z f",
    "git status --frobnicate",
    "git diff --outp=x",
]


@pytest.mark.parametrize("command", HOSTILE)
def test_hostile_lines_ask(command: str) -> None:
    verdict = classify_command(command)
    assert verdict.replay_policy != "auto", verdict
    assert verdict.reasons


@pytest.mark.parametrize(
    ("raw", "word"),
    [
        ("$'\\x2d\\x2dpre'", "--pre"),
        ("$'a\\tb'", "a\tb"),
        ("$'\\101'", "A"),
        ("'a'$'b'\"c\"", "abc"),
        ('$"--pre"', "--pre"),
        ("$x", None),
        ("$'open", None),
    ],
)
def test_ansi_c_and_locale_quoting_are_read_as_bash_reads_them(raw: str, word: str | None) -> None:
    assert dollar_unquote(raw) == word


def test_there_are_at_least_sixty_hostile_lines() -> None:
    assert len(set(HOSTILE)) >= 60


@pytest.mark.parametrize(
    ("command", "fragment"),
    [
        ("sed -n '1e id' f", "`e` command"),
        ("sed 's/a/b/w out' f", "`s///w` flag"),
        ("git -c core.fsmonitor=./x status", "`git -c` sets configuration"),
        ("rg --pre ./x foo", "`rg --pre` runs a preprocessor"),
        ("git grep -Oid foo", "`git grep -Oid` opens the files in a pager"),
        ("printf -v 'a[$(id)]' x", "subscript"),
        ("PATH=.:$PATH ls", "setting `PATH`"),
        ("ls --unknown", "`ls --unknown` is an option the rules do not know"),
        ("tar -t --checkpoint-action=exec=id -f a.tar", "`tar --checkpoint-action` runs a program"),
        ("date -s 2020", "`date -s` sets the system clock"),
        ("trap 'x' EXIT", "installs a command that runs later"),
    ],
)
def test_reasons_name_the_option_or_word(command: str, fragment: str) -> None:
    reasons = classify_command(command).reasons
    assert any(fragment in reason for reason in reasons), reasons


# ---- everyday read-only lines stay automatic ------------------------------------------------------------------------

EVERYDAY = [
    "ls", "ls -la", "ls -lah src", "ls -1", "ls -R", "ls --color=auto", "ls -lt | head", "ls -d */",
    "cat README.md", "cat -n f.py", "cat a b | wc -l", "head -n 20 f", "head -20 f", "tail -n 50 log.txt",
    "tail -f /dev/null", "wc -l *.py", "wc -c f", "pwd", "echo hello", "echo -n x", "printf '%s\\n' a b",
    "grep -rn TODO src", "grep -i error log.txt", "grep -E 'a|b' f", "grep -v '^#' f", "grep -c x f",
    "grep -l foo -r .", "grep -A3 -B2 x f", "grep --include='*.py' -rn import .", "grep -e a -e b f",
    "grep -3 x f", "grep -- -x f", "egrep x f", "rg foo", "rg -n foo src", "rg -i --hidden foo",
    "rg -t py import", "rg --files", "rg -l foo", "rg -g '*.py' foo", "rg -C 2 foo", "rg --json foo",
    "find . -name '*.py'", "find . -type f -name '*.md' | head", "find src -maxdepth 2 -type d",
    "find . -newer f -print", "find . -name x -o -name y", "find . -path ./node_modules -prune -o -print",
    "find . -type f -size +1M", "find . -mtime -1 -ls", "find . -printf '%p\\n'",
    "wc -l $(find . -name '*.py')", "sort f", "sort -u f", "sort -n -k2 f", "sort -t: -k3,3n /etc/passwd",
    "sort f | uniq -c | sort -rn", "uniq f", "uniq -c f", "cut -d: -f1 /etc/passwd", "tr a-z A-Z < f",
    "diff a b", "diff -u a b", "diff -ru a b", "cmp a b", "comm -12 a b", "stat f", "stat -c %s f", "file f",
    "file -b --mime-type f", "du -sh .", "du -h --max-depth=1", "df -h", "which python", "type ls",
    "command -v git", "tree", "tree -L 2", "tree -a -I node_modules", "jq . package.json",
    "jq -r '.version' package.json", "jq -c '.[]' f.json", "python --version", "python3 -V",
    "node --version", "git status", "git status -s", "git status --porcelain", "git status -sb",
    "git diff", "git diff --stat", "git diff --cached", "git diff HEAD~1 -- src", "git diff --name-only",
    "git diff -U0", "git diff --no-ext-diff", "git log", "git log --oneline -10", "git log -5",
    "git log --graph --oneline --all", "git log -p -1", "git log --format='%h %s' -n 3",
    "git log --since=yesterday", "git log -S foo", "git log --author=me", "git show", "git show HEAD",
    "git show --stat HEAD~2", "git show HEAD:README.md", "git branch", "git branch -a", "git branch -vv",
    "git branch --show-current", "git rev-parse HEAD", "git rev-parse --show-toplevel",
    "git rev-parse --abbrev-ref HEAD", "git ls-files", "git ls-files -m", "git blame f.py",
    "git blame -L 1,10 f.py", "git grep foo", "git grep -n foo", "git tag", "git remote -v",
    "git config --get user.name", "git stash list", "git -C sub status", "git --no-pager log -3",
    "git shortlog -sn", "git describe --tags", "git reflog", "git cat-file -p HEAD", "md5sum f",
    "sha256sum f", "base64 -d f", "basename /a/b", "dirname /a/b", "realpath .", "readlink -f x",
    "date", "date +%Y-%m-%d", "date -u", "hostname", "uname -a", "whoami", "id", "env", "printenv PATH",
    "sed -n '1,20p' f", "sed 's/a/b/g' f", "sed -n '/start/,/end/p' f", "sed -e 's/x/y/' -e '/^$/d' f",
    "sed -E 's/([0-9]+)/<\\1>/g' f", "sed 's|a|b|' f", "sed '1d;$d' f", "sed -n '$p' f",
    "sed 'y/abc/xyz/' f", "sed -n '/x/{p;q}' f", "sed '0~2d' f", "sed 's/[/]/x/' f",
    "awk '{print $1}' f", "awk -F: '{print $1}' /etc/passwd", "awk 'NR>1' f",
    "awk '{s+=$1} END {print s}' f", "tar -tf a.tar", "tar -tzvf a.tgz", "tar tf a.tar", "test -f x",
    "[ -d src ]", "[[ -f x ]] && cat x", "true", "sleep 1", "seq 1 10", "cd src && ls", "cd .. && pwd",
    "ls 2>/dev/null", "cat f 2>&1 | head", "ls && git status", "a=1; echo $a", "LC_ALL=C sort f",
    "GIT_PAGER=cat git log -1", "NO_COLOR=1 ls", "TZ=UTC date", "env LANG=C ls", "nl f", "od -c f",
    "xxd f", "column -t f", "fold -w 80 f", "rev f", "tac f", "paste a b", "join a b", "expand f",
    "less f", "more f", "cat <<'END'\nhello $(id)\nEND\n", "for f in *.py; do wc -l \"$f\"; done",
    "if [ -f x ]; then cat x; fi", "echo $((1 + 2))", "ps aux", "pgrep python", "free -h", "uptime",
    "export LANG=C", "set -e; ls", "local_var=x; echo ${local_var:-default}", "echo ${arr[@]}",
    "ls | tee /dev/null", "case \"$1\" in a|b) echo a;; *.py) ls;; *) echo other;; esac", "time ls",
    "git --version", "while read -r l; do echo \"$l\"; done < f", "[[ \"$x\" == y* ]] && echo match",
]  # fmt: skip


def test_everyday_read_only_lines_stay_automatic() -> None:
    assert len(EVERYDAY) >= 100
    asking = {command: classify_command(command).reasons for command in EVERYDAY if not is_auto(command)}
    assert asking == {}


@pytest.mark.parametrize("command", ["ls -la", "git status", "grep -rn x .", "git log --oneline -5"])
def test_everyday_lines_are_idempotent_with_no_effects(command: str) -> None:
    verdict = classify_command(command)
    assert (verdict.idempotency, verdict.replay_policy, verdict.risk_level) == ("idempotent", "auto", "low")
    assert verdict.side_effects == ()


# ---- the option parser ---------------------------------------------------------------------------------------------

SORTISH = ProgramSpec(takes_value=names("-o --output -k"), harmless=names("-n -r"))


@pytest.mark.parametrize(
    ("words", "options", "operands"),
    [
        (["-o", "out", "in"], [("-o", "out")], ["in"]),
        (["-oout", "in"], [("-o", "out")], ["in"]),
        (["--output=out", "in"], [("--output", "out")], ["in"]),
        (["--output", "out", "in"], [("--output", "out")], ["in"]),
        (["-nro", "out", "in"], [("-n", None), ("-r", None), ("-o", "out")], ["in"]),
        (["-nrout", "in"], [("-n", None), ("-r", None), ("-o", "ut")], ["in"]),
        (["in", "-o", "out"], [("-o", "out")], ["in"]),  # GNU: options after operands
        (["--", "-o", "out"], [], ["-o", "out"]),  # `--` ends the options
        (["-", "-n"], [("-n", None)], ["-"]),
    ],
)
def test_one_parser_reads_every_form(
    words: list[str], options: list[tuple[str, str | None]], operands: list[str]
) -> None:
    parsed = parse_words(SORTISH, words)
    assert [(name, value) for name, value, _ in parsed.options] == options
    assert parsed.operands == operands


@pytest.mark.parametrize(
    "command", ["sort -o out in", "sort -oout in", "sort --output=out in", "sort --output out in", "sort -nro out in"]
)
def test_every_spelling_of_an_option_gets_the_same_verdict_and_target(command: str) -> None:
    verdict = classify_command(command)
    assert verdict.replay_policy == "ask"
    assert "filesystem_write" in verdict.side_effects
    assert write_targets(command) in {("out",), ("ut",)} if command.endswith("-nrout in") else ("out",)


def test_a_word_after_double_dash_is_an_operand_not_an_option() -> None:
    assert is_auto("grep -- --pre f")
    assert is_auto("rg -- --pre")
    assert not is_auto("rg --pre -- x")


# ---- write_targets from the same specs ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("command", "expected"),
    [
        ("sort -o out in", ("out",)),
        ("sort --output=sorted.txt a b", ("sorted.txt",)),
        ("tee a b", ("a", "b")),
        ("cp x y", ("y",)),
        ("cp -t dir a b", ("dir",)),
        ("mv a b", ("a", "b")),
        ("sed -i s/a/b/ f", ("f",)),
        ("sed -ni.bak p f", ("f", "f.bak")),
        ("echo x > out; cat a >> log", ("out", "log")),
        ("uniq in out", ("out",)),
        ("git diff --output=patch.txt", ("patch.txt",)),
        ("git log --output patch.txt", ("patch.txt",)),
        ("find . -fprint found.txt", ("found.txt",)),
        ("tree -o listing.txt", ("listing.txt",)),
        ("info -o page.txt ls", ("page.txt",)),
        ("yq -i .a=1 f.yaml", ("f.yaml",)),
        ("rm -rf build", ("build",)),
        ("touch a b", ("a", "b")),
        ("chmod -x s.sh", ("s.sh",)),
        ("ls -la", ()),
        ("git status", ()),
        ("sort in", ()),
    ],
)
def test_write_targets_come_from_the_spec(command: str, expected: tuple[str, ...]) -> None:
    assert write_targets(command) == expected


def test_a_users_spec_adds_written_operands_and_options() -> None:
    rules = DEFAULT_COMMAND_RULES.extend(
        specs={
            "render": ProgramSpec(
                grade="read_only",
                harmless=names("-v"),
                takes_value=names("--out"),
                writes_value=names("--out"),
                options=(("--out", OptionEffect(grade="local_write", phrase="writes a file")),),
            )
        }
    )
    assert is_auto("render -v page.md", rules)
    assert not is_auto("render --out=x.html page.md", rules)
    assert write_targets("render --out x.html page.md", rules) == ("x.html",)
    assert not is_auto("render --other page.md", rules)  # deny by default holds for a user's program too


# ---- users extend it in the same form ----------------------------------------------------------------------------

USER_TOML = """
read_only = ["mytool"]
high_risk = ["make release"]

[read_only_subcommands]
mycli = ["status"]

[programs.report]
grade = "read_only"
harmless = ["-v", "--json"]
takes_value = ["--format"]

[programs.report.options."--apply"]
grade = "mutation"
phrase = "applies the plan"

[programs.rg]
harmless = ["--my-new-flag"]
grade = "read_only"

[programs.git.subcommands.status.options."--short"]
grade = "unknown"
phrase = "is forbidden in this project"

[programs.git.subcommands.lfs]
grade = "read_only"
harmless = ["--all"]
"""


def test_a_users_toml_document_extends_the_built_in_specs() -> None:
    rules = rules_from_document(tomllib.loads(USER_TOML), ".safepoint/commands.toml")
    assert is_auto("mytool --anything", rules)  # a coarse entry: any options
    assert classify_command("make release", rules).replay_policy == "never"
    assert is_auto("mycli status", rules)
    assert is_auto("report -v --format=csv data", rules)
    assert not is_auto("report --format csv --unknown", rules)
    verdict = classify_command("report --apply", rules)
    assert verdict.idempotency == "non_idempotent"
    assert any("`report --apply` applies the plan" in r for r in verdict.reasons)
    assert is_auto("rg --my-new-flag foo", rules)  # a user may vouch for a new option ...
    assert not is_auto("rg --pre ./x foo", rules)  # ... but never lose a built-in option's effect
    assert not is_auto("git status --short", rules)  # stricter
    assert is_auto("git status -s", rules)
    assert is_auto("git lfs --all", rules)
    assert is_auto("ls -la", rules)  # the built-ins stay


def test_a_json_document_works_the_same() -> None:
    document = json.loads('{"programs": {"mytool": {"grade": "read_only", "harmless": ["-q"]}}}')
    rules = rules_from_document(document, "rules.json")
    assert is_auto("mytool -q x", rules)
    assert not is_auto("mytool -x", rules)


def test_a_user_cannot_make_a_built_in_spec_laxer_by_grade() -> None:
    document = {"programs": {"rm": {"grade": "read_only", "any_option": True}}}
    rules = rules_from_document(document, "rules.json")
    assert not is_auto("rm -rf x", rules)


@pytest.mark.parametrize(
    ("document", "fragment"),
    [
        ({"readonly": ["x"]}, "unknown key 'readonly'"),
        ({"programs": {"x": {"grade": "safe"}}}, "grade 'safe'"),
        ({"programs": {"x": {"harmless": ["v"]}}}, "is not an option"),
        ({"programs": {"x": {"colour": 1}}}, "programs.x"),
        ({"programs": {"two words": {}}}, "one word"),
        ({"programs": {"x": {"options": {"--a": {"grade": "nope", "phrase": "p"}}}}}, "grade 'nope'"),
        ({"read_only": 5}, "rules.toml"),
    ],
)
def test_a_bad_document_is_one_config_error_naming_the_place(document: dict[str, object], fragment: str) -> None:
    with pytest.raises(ConfigError) as info:
        rules_from_document(document, "rules.toml")
    assert fragment in str(info.value)
    assert "\n" not in str(info.value)


def test_built_in_rerunnable_steps_accept_their_options() -> None:
    verdict = classify_command("pytest -x -q -k 'not slow' tests/")
    assert (verdict.idempotency, verdict.replay_policy) == ("conditional", "auto")
