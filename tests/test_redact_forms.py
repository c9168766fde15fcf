"""Issue 11 §1/§2, second attack: a credential's value in the encodings tools print it in (uppercase hex, wrapped
base64 and hex, every byte percent-encoded, JSON-escaped), the variable names credentials go by (``*_PASS``,
``*_JWT``, ``*_CREDS``, ``*WRITEKEY``, ``*_HEADERS``), a secret beside its name in common files and command lines,
and the store's own key however it was given."""

from __future__ import annotations

import base64
import json
import textwrap

import pytest

import safepoint
from safepoint.core.environment import command_environment, credential_values, is_credential
from safepoint.core.redact import Redactor

TOKEN = "5f0e3c9a7b2d4e6f8a1c3e5b7d9f0a2c4e6b8d0f1a3c5e7b9d2f4a6c8e0b1d3f"
VALUE = "Zk81-planted/credential+value?"


@pytest.mark.parametrize("value", [TOKEN, VALUE])
@pytest.mark.parametrize(
    "encode",
    [
        lambda v: v.encode().hex().upper(),
        lambda v: "".join(f"%{b:02x}" for b in v.encode()),
        lambda v: "".join(f"%{b:02X}" for b in v.encode()),
        lambda v: base64.encodebytes(v.encode()).decode(),  # the base64 program: 76 columns
        lambda v: base64.encodebytes(b"prefix text " + v.encode()).decode(),  # after other text: any alignment
        lambda v: base64.encodebytes(v.encode()).decode().replace("\n", "\r\n"),
        lambda v: "\n".join(textwrap.wrap(v.encode().hex(), 60)),  # xxd -p
        lambda v: "\n".join(textwrap.wrap("ab" + v.encode().hex().upper(), 60)),  # xxd -p -u, after a byte
        lambda v: "\n".join(textwrap.wrap(v.encode().hex(), 32)),
    ],
)
def test_a_value_in_an_encoding_tools_print_is_redacted(value, encode):
    printed = encode(value)
    out = Redactor(values=[value]).text(f"output:\n{printed}\ndone\n")
    assert "[REDACTED:credential_value]" in out
    lines = [line for line in printed.split() if len(line) >= 16]
    # no line-sized piece of the encoded value of 16 characters or more is left whole (a short tail may be)
    assert not any(line in out for line in lines[:-1]), out
    assert out.startswith("output:\n") and out.endswith("done\n")


@pytest.mark.parametrize("password", ['Tr0ub4dor"&3\\horse', "p\u00e4ssw\u00f6rd-2024-x", "tab\there-and-/slash"])
def test_a_value_printed_json_escaped_is_redacted(password):
    redactor = Redactor(values=[password])
    for printed in (json.dumps({"value": password}), json.dumps({"value": password}, ensure_ascii=False)):
        out = redactor.text(printed)
        assert json.dumps(password)[1:-1] not in out and password not in out
        assert "[REDACTED:credential_value]" in out


def test_text_with_lines_and_no_secret_is_left_as_it_is():
    redactor = Redactor(values=[TOKEN])
    text = base64.encodebytes(b"some ordinary bytes " * 20).decode() + "\n".join(textwrap.wrap("ab" * 200, 60))
    assert redactor.text(text) == text


@pytest.mark.parametrize(
    "name",
    ["SMTP_PASS", "REDIS_PASS", "CI_JOB_JWT", "MAIL_CREDS", "GCP_CREDS", "HONEYCOMB_WRITEKEY", "SEGMENT_WRITEKEY",
     "OTEL_EXPORTER_OTLP_HEADERS", "OTEL_EXPORTER_OTLP_TRACES_HEADERS", "JWT_SIGNING", "MY_APIKEY",
     "CI_JOB_JWT_V2", "GCPCREDS", "SEGMENTWRITEKEY"],
)  # fmt: skip
def test_common_credential_names_are_withheld_and_hunted(name):
    environ = {"PATH": "/usr/bin", name: "Hx7-mail-relay-password-q9"}
    assert is_credential(name)
    assert name not in command_environment(environ)
    assert "Hx7-mail-relay-password-q9" in credential_values(environ)


@pytest.mark.parametrize("name", ["PASSENGER_COUNT", "COMPASS_HOME", "BYPASS_CACHE", "PASSTHROUGH", "PATH", "PWD"])
def test_names_that_only_hold_such_a_word_are_not_credentials(name):
    assert not is_credential(name, "/usr/bin")


def test_each_header_of_a_header_variable_is_hunted_alone():
    environ = {"OTEL_EXPORTER_OTLP_HEADERS": "x-honeycomb-team=hc-team-key-0123,x-other=second-value-99"}
    values = credential_values(environ)
    assert "hc-team-key-0123" in values and "second-value-99" in values
    out = Redactor(values=values).text("sending with key hc-team-key-0123 and second-value-99")
    assert "hc-team-key-0123" not in out and "second-value-99" not in out


SECRET = "Qv7-not-a-known-shape-81"


@pytest.mark.parametrize(
    "text",
    [
        "machine github.com\n  login bob\n  password {s}\n",
        "machine github.com login bob password {s}\n",
        "machine a login bob password {s} machine b login eve password x\n",
        "<settings><servers><server><password>{s}</password></server></servers></settings>",
        "<add key='x'/><dbPassword>{s}</dbPassword>",
        "<api_key>{s}</api_key>",
        "production:\n  secret_key_base: {s}\n",
        "SECRET_KEY_BASE={s}\n",
        "mysql --password {s} -h db prod < dump.sql",
        "gh auth login --with-token --token {s}",
        "psql --passwd {s}",
        "sshpass -p {s} ssh deploy@host",
        "sshpass -p{s} ssh deploy@host",
        "redis-cli -h cache -p 6380 -a {s} ping",
        "docker login -u bob -p {s} registry.example.com",
        "curl -s -u bob:{s} https://api.example.com",
        "curl -s --user bob:{s} https://api.example.com",
        'curl -H "Authorization: Bearer abcdefghijklmnop1234" -u bob:{s} https://x',
        "mysql -h db -u root -p{s} prod",
        "mysqldump -uroot -p{s} prod > dump.sql",
    ],
)
def test_a_secret_beside_its_name_is_redacted(text):
    out = Redactor().text(text.format(s=SECRET))
    assert SECRET not in out, out
    assert "abcdefghijklmnop1234" not in out
    assert "[REDACTED:" in out


@pytest.mark.parametrize(
    "text",
    [
        "the password is wrong, try again",
        "Forgot password? Reset it here",
        "mysql -h db -p prod",  # -p then a space: mysql asks; prod is the database
        "mysql --password $DB_PASSWORD -h db",
        "docker login -p $REGISTRY_TOKEN reg.io",
        "curl -u bob https://x",
        "<password></password>",
    ],
)
def test_text_that_names_a_password_without_giving_one_is_kept(text):
    assert Redactor().text(text) == text


def test_the_stores_key_given_as_base64_in_a_key_file_is_hunted(tmp_path, workspace):
    pytest.importorskip("cryptography")
    from tests.conftest import cli_env, safepoint_in_process

    raw = bytes(range(32))
    key = base64.b64encode(raw).decode()
    key_file = tmp_path / "sp.key"
    key_file.write_text(key + "\n")
    key_file.chmod(0o600)
    tm = safepoint.open(workspace=str(workspace), key_file=str(key_file))
    with tm.start("t", run_id="r") as run:
        run.call_result("run_command", {"command": f"cat {key_file}; xxd -p {key_file}"}, call_id="c1")
    done = safepoint_in_process(
        "history", "r", "--json", "-w", workspace, env=cli_env(SAFEPOINT_KEY_FILE=str(key_file))
    )
    assert done.returncode == 0, done.stderr
    assert '"name": "run_command"' in done.stdout
    assert key not in done.stdout and raw.hex() not in done.stdout
