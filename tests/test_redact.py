"""core.redact and core.environment: credentials are recognised by shape, by variable name and by value; what is
left after redaction holds none of them; commands get the environment without them."""

from __future__ import annotations

import re

import pytest
from hypothesis import given
from hypothesis import strategies as st

from safepoint.core.environment import command_environment, credential_values, is_credential
from safepoint.core.redact import BUILTIN_PATTERNS, COMMAND_PASSWORD, SHORT, Redactor, command_password_mark
from safepoint.errors import ConfigError
from tests.test_redact_shapes import SHAPES

# Fake credentials with the real shapes (none of them is live).
SECRETS = {
    "openai_key": "sk-proj-" + "A1b2C3d4E5f6G7h8I9j0" * 3,
    "anthropic_key": "sk-ant-api03-" + "Zz9Yy8Xx7Ww6Vv5Uu4" * 3,
    "github_token": "ghp_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "aws_access_key_id": "AKIAIOSFODNN7EXAMPLE",
    "slack_token": "xoxb-123456789012-1234567890123-AbCdEfGhIjKlMnOpQrStUvWx",
    "google_api_key": "AIza" + "SyA1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q",
    "stripe_key": "sk_live_" + "4eC39HqLyjWDarjtT1zdp7dc",
}


@pytest.mark.parametrize("kind", sorted(SECRETS))
def test_each_credential_shape_is_redacted_where_it_stands(kind):
    secret = SECRETS[kind]
    text = f"config: {secret}\nthen more text"
    out = Redactor().text(text)
    assert secret not in out
    assert "[REDACTED:" in out
    assert out.endswith("then more text")


def test_headers_private_keys_and_url_passwords_are_redacted():
    redactor = Redactor()
    bearer = "Authorization: Bearer eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0In0.abcdefghijklmnop"
    assert "eyJ" not in redactor.text(bearer)
    key = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXktdjEAAAAA\nAAAABG5vbmU=\n-----END OPENSSH PRIVATE KEY-----"
    )
    out = redactor.text(f"before\n{key}\nafter")
    assert "b3BlbnNz" not in out and out.startswith("before\n") and out.endswith("\nafter")
    url = "postgresql://app:s3cr3t-pw@db.internal:5432/prod?sslmode=require"
    out = redactor.text(f"connecting to {url}")
    assert "s3cr3t-pw" not in out
    assert "postgresql://app:[REDACTED:password]@db.internal:5432/prod" in out
    aws = "aws_secret_access_key = wJalrXUtnFEMI/K7MDENG/bPxRfiCYEXAMPLEKEY"
    assert "wJalrXUtnFEMI" not in redactor.text(aws)


def test_environment_values_and_user_patterns_are_redacted():
    redactor = Redactor(values=["hunter2-but-longer", "short"], patterns={"ticket": r"TICKET-\d{6}"})
    out = redactor.text("pw=hunter2-but-longer short TICKET-123456")
    assert "hunter2-but-longer" not in out and "TICKET-123456" not in out
    assert "short" in out  # too short a value to hunt for everywhere
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        Redactor(patterns=["(unclosed"])


def test_json_values_are_redacted_everywhere_keys_included_without_recursion():
    secret = SECRETS["github_token"]
    value: object = {"args": [secret, {"nested": f"token {secret}"}], secret: 1, "n": 5, "ok": True}
    for _ in range(5000):  # deeper than any recursion limit
        value = [value]
    out = Redactor().value(value)
    inner = out
    for _ in range(5000):
        inner = inner[0]
    assert secret not in repr(inner)
    assert inner["n"] == 5 and inner["ok"] is True
    assert inner["args"][0] == "[REDACTED:github_token]" and "[REDACTED:github_token]" in inner


plain = st.text(alphabet=st.characters(codec="utf-8", exclude_categories=("Cs",)), max_size=40)


@given(st.lists(plain, max_size=5), st.lists(st.sampled_from(sorted(SECRETS.values())), min_size=1, max_size=4))
def test_no_planted_secret_survives_redaction(pieces, secrets):
    text = ""
    for index, secret in enumerate(secrets):
        text += (pieces[index] if index < len(pieces) else "") + " " + secret + " "
    out = Redactor().text(text)
    for secret in secrets:
        assert secret not in out


def test_redaction_is_linear_on_hostile_input():
    # Long runs that almost match the patterns: a backtracking pattern would take ages here; this must not.
    hostile = "sk-" + "a" * 19 + " " + ("Bearer " + "x" * 15 + " ") * 2000 + "-----BEGIN PRIVATE KEY-----" * 200
    # Each BEGIN line without its END is the start of a key (redacted through its body); nothing else matches.
    out = Redactor().text(hostile * 5)
    assert out.count("[REDACTED") == out.count("[REDACTED:private_key]") == 200 * 5


@pytest.mark.parametrize(
    "name",
    [
        "OPENAI_API_KEY",
        "ANTHROPIC_API_KEY",
        "GITHUB_TOKEN",
        "NPM_TOKEN",
        "AWS_SECRET_ACCESS_KEY",
        "AWS_SESSION_TOKEN",
        "PGPASSWORD",
        "DB_PASSWORD",
        "MYSQL_PWD",
        "SLACK_BOT_TOKEN",
        "STRIPE_SECRET_KEY",
        "GH_PAT",
        "SAFEPOINT_STORE",
        "CLIENT_SECRET",
        "GOOGLE_APPLICATION_CREDENTIALS",
    ],
)
def test_credential_names_are_recognised(name):
    assert is_credential(name)


@pytest.mark.parametrize(
    "name", ["PATH", "HOME", "PWD", "OLDPWD", "LANG", "TOKENIZERS_PARALLELISM", "SSH_AUTH_SOCK", "TERM", "USER", "CI"]
)
def test_ordinary_names_are_not(name):
    assert not is_credential(name, "/usr/bin")


def test_commands_get_the_environment_less_credentials_unless_passed_by_name():
    environ = {
        "PATH": "/usr/bin",
        "HOME": "/home/u",
        "OPENAI_API_KEY": "sk-proj-" + "x" * 40,
        "GITHUB_TOKEN": "ghp_" + "y" * 36,
        "DATABASE_URL": "postgresql://app:pw1234567@db/x",
        "SAFEPOINT_STORE": "postgresql://sp:storepw99@db/sp",
        "MY_PROVIDER_VAR": "custom-provider-key-123",
    }
    env = command_environment(environ, pass_env=["GITHUB_TOKEN", "SAFEPOINT_STORE"], withhold=["MY_PROVIDER_VAR"])
    assert env == {"PATH": "/usr/bin", "HOME": "/home/u", "GITHUB_TOKEN": environ["GITHUB_TOKEN"]}
    values = credential_values(environ, withhold=["MY_PROVIDER_VAR"])
    for name in ("OPENAI_API_KEY", "GITHUB_TOKEN", "DATABASE_URL", "SAFEPOINT_STORE", "MY_PROVIDER_VAR"):
        assert environ[name] in values
    assert "storepw99" in values and "pw1234567" in values  # a URL's password alone is hunted for too
    out = Redactor(values=values).text(" ".join(f"{k}={v}" for k, v in environ.items()))
    assert not re.search(r"storepw99|pw1234567|custom-provider-key-123|x{40}|y{36}", out)


_WHOLE = re.compile("|".join(f"(?P<{n}>{p})" for n, p in BUILTIN_PATTERNS.items()))
_COMMAND = re.compile(COMMAND_PASSWORD)


@given(
    st.lists(
        st.one_of(
            st.sampled_from(
                [*SECRETS.values(), *SHAPES.values(), "postgresql://u:pw@h/d",
                 "Authorization: Bearer abcdefghijklmnop1234",
                 "AUTHORIZATION: basic QWxhZGRpbjpvcGVu", "AWS_SECRET_ACCESS_KEY=" + "A" * 40, "task-", "://", "x",
                 "-----BEGIN RSA PRIVATE KEY-----", "password", "DB_", "=", ": ", "?", "&", "@", "\n", '"', "key",
                 "token", "x-api-key", "eyJ", "sig", "auth", "PWD", "pass", "sk", "glpat", "asia", "MY_AWS_",
                 "<password>", "</", "--password ", "password ", " login ", "secret_key_base", "sshpass -p",
                 "redis-cli", " -a ", "docker login", " -p", "curl", " -u ", "bob:", "mysql", "-pS3cret", " "]
            ),
            st.text(max_size=30),
        ),
        max_size=12,
    )
)  # fmt: skip
def test_the_trigger_scan_finds_what_the_whole_expression_finds(pieces):
    # The redactor tries its built-in patterns only around their literals (speed); it must redact exactly what the
    # combined expression run over the whole text redacts: a pattern whose literal is missing from TRIGGERS fails.
    # Joined with spaces and without (a name glued to what stands before it: the walk back to its start).
    # Short texts are scanned in one pass, long ones (past SHORT) literal by literal: both are checked.
    redactor = Redactor()
    for text in (" ".join(pieces), "".join(pieces), "x " * SHORT + "".join(pieces)):
        # then the pass of the known programs' command-line passwords, run over the whole text too
        assert redactor.text(text) == _COMMAND.sub(command_password_mark, _WHOLE.sub(redactor._replace, text))
