"""The library's side of issue 11 §1, §2, §7: ``pass_env=`` on ``Safepoint.start``/``resume``, the workspace's
redaction patterns, and the masks for free text that may quote a store URL."""

from __future__ import annotations

import pytest

import safepoint
from safepoint.engine.log_writer import redacted_arguments, run_redactor
from safepoint.engine.session import load_view
from safepoint.errors import ConfigError
from safepoint.store.names import mask_passwords, url_secrets

TOKEN = "tok-" + "Api1Bb2Cc3Dd4Ee5"


def _env_names(run, call_id: str) -> dict[str, str]:
    result = run.call_result("run_command", {"command": "env"}, call_id=call_id)
    return dict(line.split("=", 1) for line in result.observation.splitlines() if "=" in line)


def test_pass_env_on_start_and_resume_hands_over_only_what_it_names(workspace, monkeypatch):
    monkeypatch.setenv("SERVICE_TOKEN", TOKEN)
    monkeypatch.setenv("OPENAI_API_KEY", "sk-" + "x" * 40)
    sp = safepoint.open(workspace=str(workspace))
    with sp.start("t", run_id="a", pass_env=["SERVICE_TOKEN"]) as run:
        seen = _env_names(run, "c1")
    assert "SERVICE_TOKEN" in seen and "OPENAI_API_KEY" not in seen
    # What the command printed was the real token; what was kept of it is redacted (a credential variable's value).
    assert TOKEN not in str(load_view(sp.store, "a").history)
    with sp.start("t", run_id="b") as run:  # not passed: withheld
        assert "SERVICE_TOKEN" not in _env_names(run, "c1")
    with sp.resume("b", pass_env=["SERVICE_TOKEN"]) as run:
        assert "SERVICE_TOKEN" in _env_names(run, "c2")


def test_the_provider_key_variable_of_a_run_is_withheld_whatever_its_name(workspace, monkeypatch):
    monkeypatch.setenv("MY_LLM", "k" * 30)  # a name the rules would not recognise
    sp = safepoint.open(workspace=str(workspace))
    provider = {"kind": "openai", "model": "m", "base_url": "http://127.0.0.1:9/v1", "api_key_env": "MY_LLM"}
    with sp.start("t", run_id="p", provider=provider) as run:
        assert "MY_LLM" not in _env_names(run, "c1")


def test_user_patterns_come_from_the_workspace_and_a_bad_file_is_one_line(tmp_path):
    (tmp_path / ".safepoint").mkdir()
    (tmp_path / ".safepoint" / "redact.toml").write_text('patterns = ["INTERNAL-[0-9]{4}"]\n')
    assert run_redactor(str(tmp_path), {}).text("see INTERNAL-1234") == "see [REDACTED:user_0]"
    (tmp_path / ".safepoint" / "redact.toml").write_text('patterns = "INTERNAL"\n')
    with pytest.raises(ConfigError, match="list of regular expressions"):
        run_redactor(str(tmp_path), {})
    (tmp_path / ".safepoint" / "redact.toml").write_text('patterns = ["(unclosed"]\n')
    with pytest.raises(ConfigError, match="not a valid regular expression"):
        run_redactor(str(tmp_path), {})


def test_redacted_arguments_are_found_at_any_depth():
    assert redacted_arguments({"a": [{"b": "x [REDACTED:openai_key]"}]})
    assert redacted_arguments({"[REDACTED:user_0]": 1})
    assert not redacted_arguments({"a": ["REDACTED", 1, None, {"b": "plain"}]})


@pytest.mark.parametrize(
    ("text", "url", "secret"),
    [
        ('invalid percent-encoded token: "pw%zz"', "postgresql://u:pw%zz@h/d", "pw%zz"),
        ("failed for postgresql://u:s3cr3t-9@h/d", None, "s3cr3t-9"),
        ('missing "=" after "host=h password=\'a b c\' user=u"', None, "a b c"),
        ("dsn: dbname=d password=hunter22 port=5", None, "hunter22"),
        ("url ?sslmode=require&password=p%40ss", "postgresql://h/d?password=p%40ss", "p@ss"),
    ],
)
def test_mask_passwords_in_free_text(text, url, secret):
    masked = mask_passwords(text, url)
    assert secret not in masked and "***" in masked
    if url:
        assert secret in url_secrets(url)


def test_masked_json_stays_json():
    import json

    data = {"a": 'password=abc\\"x', "b": "postgresql://u:p\\w@h/d", "c": "host=h password='q\\'z' end"}
    masked = json.loads(mask_passwords(json.dumps(data)))
    assert masked.keys() == data.keys()
    assert "abc" not in masked["a"] and "p\\w" not in masked["b"]


def test_mask_passwords_leaves_text_without_one_alone():
    for text in ("the password is required", "http://host/path?q=1", "postgresql://u@h/d", "user:***@host"):
        assert mask_passwords(text) == text
