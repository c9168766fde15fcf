"""What agents really print, redacted: the credential shapes beyond the provider keys (query and DSN passwords, a
password holding '@', the start of a private key, auth headers, tokens of GitLab, npm, Hugging Face, Stripe,
Google, JWTs, ``.env`` lines and quoted fields, connection strings, webhook URLs, registry auth blobs), the
environment's secret values in the encodings a command prints them in, and no false alarm on what is not a secret
(git SHAs, UUIDs, hashes, lockfile integrity, base64 images, ``env`` output, code)."""

from __future__ import annotations

import base64
import hashlib
import json
import uuid
from urllib.parse import quote

import pytest

from safepoint.core.environment import command_environment, credential_values, is_credential
from safepoint.core.redact import BUILTIN_PATTERNS, FOUND_TRIGGERS, TRIGGERS, Redactor, encoded_forms

PW = "Zq81-planted-credential-value"
KEY_BODY = "MIIEpAIBAAKCAQEA7Zq1" + "x9Y8w7V6" * 5
# name -> text holding a secret (fake, with the real shape); the secret is SECRET_OF[name]
SHAPES = {
    "query_password": f"postgresql://app@db.internal/prod?sslmode=require&password={PW}&connect_timeout=5",
    "query_token": f"GET https://api.example.com/v1/items?page=2&access_token={PW} HTTP/1.1",
    "query_client_secret": f"https://login.example.com/token?client_id=abc&client_secret={PW}",
    "query_sig": f"https://acct.blob.core.windows.net/c/f.txt?sv=2022-11-02&se=2026-01-01&sig={PW}%3D",
    "query_apikey": f"curl 'https://maps.example.com/geo?q=x&apikey={PW}'",
    "dsn": f"host=db.internal port=5432 dbname=prod user=app password={PW} sslmode=require",
    "url_password_with_at": "mysql://root:S3cr@t-Passw0rd-4411@db.internal:3306/app",
    "ado_connection": f"Server=tcp:db.example.com,1433;Database=app;User Id=sa;Password={PW};Encrypt=true",
    "azure_account_key": f"DefaultEndpointsProtocol=https;AccountName=acct;AccountKey={PW}==;EndpointSuffix=core",
    "azure_sas": f"Endpoint=sb://ns.servicebus.windows.net/;SharedAccessKeyName=root;SharedAccessKey={PW}=",
    "private_key_start": f"$ head -n 3 id_rsa\n-----BEGIN RSA PRIVATE KEY-----\n{KEY_BODY}\n{KEY_BODY[::-1]}",
    "private_key_cut": f"-----BEGIN OPENSSH PRIVATE KEY-----\n{KEY_BODY}\n{KEY_BODY[:30]}",
    "private_key_escaped": f'{{"private_key": "-----BEGIN PRIVATE KEY-----\\n{KEY_BODY}\\n{KEY_BODY}"',
    "private_key_encrypted": (
        f"-----BEGIN RSA PRIVATE KEY-----\nProc-Type: 4,ENCRYPTED\nDEK-Info: AES-128-CBC,AB12\n\n{KEY_BODY}"
    ),
    "x_api_key": f'curl -H "x-api-key: {PW}" https://api.example.com',
    "auth_token_scheme": f"Authorization: Token {PW}",
    "auth_basic": f"authorization: Basic {base64.b64encode(b'user:' + PW.encode()).decode()}",
    "auth_bearer_json": f'{{"headers": {{"Authorization": "Bearer {PW}"}}}}',
    "private_token": f"Private-Token: {PW}",
    "gitlab": "glpat-" + "xY9zA8bC7dE6fG5hI4jK",
    "npm": "npm_" + "a1B2c3D4e5F6g7H8i9J0k1L2m3N4o5P6q7R8",
    "huggingface": "hf_" + "aBcDeFgHiJkLmNoPqRsTuVwXyZ01234567",
    "stripe_restricted": "rk_live_" + "51HaBcDeFgHiJkLmNoPqRsT",
    "stripe_webhook": "whsec_" + "MfKQ9r8GKYqrTwjUPD8ILPZIo2LaLSYY",
    "jwt": (
        "eyJhbGciOiJIUzI1NiIsInR5cCI6IkpXVCJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0."
        "SflKxwRJSMeKKF2QT4fwpMeJf36POk6yJV_adQssw5c"
    ),
    "env_password": f"DB_PASSWORD={PW}",
    "env_secret_export": f"export APP_CLIENT_SECRET='{PW}'",
    "env_token": f"GITLAB_TOKEN={PW}",
    "env_key": f"APP_KEY=base64:{PW}",
    "yaml_password": f"services:\n  db:\n    environment:\n      POSTGRES_PASSWORD: {PW}\n",
    "json_password": f'{{"username": "app", "password": "{PW}"}}',
    "json_camel": f'{{"clientId": "x", "clientSecret": "{PW}", "refreshToken": "{PW[::-1]}"}}',
    "toml_token": f'[auth]\napi_token = "{PW}"\n',
    "flag": f"mysql --user=root --password={PW} app",
    "slack_webhook": "https://hooks.slack.com/services/T0000AAAA/B0000BBBB/" + "XxYyZz1122334455aaBBccDD",
    "discord_webhook": "https://discord.com/api/webhooks/123456789012/" + "abcDEF-ghiJKL_mnoPQRstuVWXyz0123456789",
    "docker_auth": json.dumps(
        {"auths": {"registry.example.com": {"auth": base64.b64encode(b"u:" + PW.encode()).decode()}}}
    ),
}  # fmt: skip
SECRET_OF = {name: PW for name in SHAPES} | {
    "url_password_with_at": "Passw0rd-4411",
    "private_key_start": KEY_BODY[:24],
    "private_key_cut": KEY_BODY[:24],
    "private_key_escaped": KEY_BODY[:24],
    "private_key_encrypted": KEY_BODY[:24],
    "auth_basic": base64.b64encode(b"user:" + PW.encode()).decode()[:20],
    "gitlab": SHAPES["gitlab"],
    "npm": SHAPES["npm"],
    "huggingface": SHAPES["huggingface"],
    "stripe_restricted": SHAPES["stripe_restricted"],
    "stripe_webhook": SHAPES["stripe_webhook"],
    "jwt": "eyJzdWIiOiIxMjM0NTY3ODkwIn0",
    "slack_webhook": "XxYyZz1122334455aaBBccDD",
    "discord_webhook": "abcDEF-ghiJKL_mnoPQRstuVWXyz0123456789",
    "docker_auth": base64.b64encode(b"u:" + PW.encode()).decode()[:20],
}
# what stays readable around it
KEPT = {
    "query_password": "postgresql://app@db.internal/prod?sslmode=require&password=",
    "dsn": "host=db.internal port=5432 dbname=prod user=app password=",
    "url_password_with_at": "mysql://root:[REDACTED:password]@db.internal:3306/app",
    "ado_connection": ";Encrypt=true",
    "private_key_start": "$ head -n 3 id_rsa\n",
    "x_api_key": "x-api-key: ",
    "env_password": "DB_PASSWORD=",
    "yaml_password": "POSTGRES_PASSWORD: ",
    "json_password": '"password": "',
    "flag": "mysql --user=root --password=",
}


@pytest.mark.parametrize("name", sorted(SHAPES))
def test_each_shape_agents_print_is_redacted(name):
    out = Redactor().text(f"before\n{SHAPES[name]}\nafter: done")
    assert SECRET_OF[name] not in out, out
    assert "[REDACTED:" in out
    assert KEPT.get(name, "") in out
    if not name.startswith("private_key"):  # a cut key is redacted through its body, to the end of its lines
        assert out.startswith("before\n") and out.endswith("\nafter: done"), out


def test_the_attackers_cases_redacted_whole():
    redactor = Redactor()
    # '@' in a password: masked through the last '@' before the host, as drivers read it
    assert redactor.text("postgresql://app:S3cr@t-Passw0rd-4411@db.internal/prod") == (
        "postgresql://app:[REDACTED:password]@db.internal/prod"
    )
    # `head -n 5 id_rsa`: the BEGIN line and four lines of key material, no END line
    body = "\n".join("MIIEpAIBAAKCAQEA7Zq1" + f"{i:02d}" + "x" * 40 for i in range(4))
    assert redactor.text(f"-----BEGIN RSA PRIVATE KEY-----\n{body}") == "[REDACTED:private_key]"
    # a literal ending in a dash glued before the block does not hide it (the scan's literals do not overlap)
    for glued in ("sk", "glpat", "x" * 3000 + "sk"):
        assert redactor.text(f"{glued}-----BEGIN RSA PRIVATE KEY-----\n{body}").endswith("[REDACTED:private_key]")


# false alarms ----------------------------------------------------------------------------------------------------
def _lockfile() -> str:
    packages = {}
    for n in range(40):
        digest = hashlib.sha512(str(n).encode()).digest()
        packages[f"node_modules/pkg-{n}"] = {
            "version": f"1.{n}.0",
            "resolved": f"https://registry.npmjs.org/pkg-{n}/-/pkg-{n}-1.{n}.0.tgz",
            "integrity": "sha512-" + base64.b64encode(digest).decode(),
            "dev": n % 2 == 0,
            "license": "MIT",
            "dependencies": {"js-tokens": "^4.0.0", "loose-envify": "^1.4.0"},
            "engines": {"node": ">=14"},
        }
    packages["node_modules/js-tokens"] = {"version": "4.0.0", "integrity": "sha1-" + "a" * 27 + "="}
    return json.dumps({"name": "app", "lockfileVersion": 3, "requires": True, "packages": packages}, indent=2)


GIT_LOG = "\n".join(
    f"commit {hashlib.sha1(str(n).encode()).hexdigest()}\n"
    f"Merge: {hashlib.sha1(str(n + 1).encode()).hexdigest()[:7]} {hashlib.sha1(str(n + 2).encode()).hexdigest()[:7]}\n"
    "Author: Dev Eloper <dev@example.com>\n"
    "Date:   Tue Dec 1 06:31:09 2026 +0000\n\n"
    f"    Rotate the token cache; pass the key id through (#{n})\n\n"
    "    Signed-off-by: Dev Eloper <dev@example.com>\n"
    f"    Change-Id: I{hashlib.sha1(str(n + 3).encode()).hexdigest()}\n"
    for n in range(30)
)
ENV_OUTPUT = (
    "PWD=/home/dev/project\nOLDPWD=/home/dev\nSSH_AUTH_SOCK=/run/user/1000/keyring/ssh\n"
    "TOKENIZERS_PARALLELISM=false\nGPG_AGENT_INFO=/run/gpg:0:1\nHOME=/home/dev\nLESSKEY=/etc/lesskey\n"
)
CODE = '''
def login(user: str, password: str, token: Optional[str] = None) -> Session:
    """Pass the password through; the key is read from the keyring."""
    if password == "":
        raise ValueError("password: required")
    key = keyring.get_password("app", user)
    session = connect(user=user, password=get_password(user), timeout=30)
    return session.auth(token=os.environ["API_TOKEN"], max_tokens=100)

class Account(Model):
    id = AutoField(primary_key=True)
    password_hash = CharField(max_length=128)
    api_key: str
'''


@pytest.mark.parametrize(
    "text",
    [
        _lockfile(),
        GIT_LOG,
        "\n".join(str(uuid.UUID(int=n * 7919)) for n in range(50)),
        "\n".join(hashlib.sha256(str(n).encode()).hexdigest() + f"  file_{n}.tar.gz" for n in range(50)),
        "data:image/png;base64," + base64.b64encode(hashlib.sha512(b"png").digest() * 200).decode(),
        ENV_OUTPUT,
        CODE,
        "===== 412 passed, 3 skipped, 1 xfailed in 41.2s =====\nPASSED tests/test_auth.py::test_token_refresh",
        "ssh-keygen -t ed25519 -C dev@example.com\nThe key fingerprint is SHA256:" + "A" * 43,
        "https://user@github.com/org/repo.git and git@github.com:org/repo.git at https://example.com:8443/path",
    ],
    ids=["lockfile", "git_log", "uuids", "sha256sums", "base64_image", "env", "code", "pytest", "ssh", "urls"],
)
def test_what_is_not_a_secret_is_kept_as_it_is(text):
    assert Redactor().text(text) == text
    # nor with the environment's values hunted in their encoded forms
    assert Redactor(values=[PW, "hunter2-database-password"]).text(text) == text


# the environment's values, encoded ---------------------------------------------------------------------------
@pytest.mark.parametrize("prefix", ["", "x", "xy", "some longer prefix: "])
def test_a_known_value_is_redacted_in_the_encodings_commands_print(prefix):
    redactor = Redactor(values=[PW])
    data = (prefix + PW + " and more").encode()
    for encoded in (
        base64.b64encode(data).decode(),
        base64.urlsafe_b64encode(data).decode(),
        data.hex(),
        (prefix + PW)[::-1],
        quote(prefix + PW, safe=""),
    ):
        out = redactor.text(f"out: {encoded}\n")
        assert "[REDACTED:credential_value]" in out, encoded
        for form in encoded_forms(PW):
            assert form not in out


def test_encoded_forms_are_few_and_never_short():
    forms = encoded_forms(PW)
    assert PW in forms and PW[::-1] in forms and PW.encode().hex() in forms
    assert len(forms) <= 10 and all(len(form) >= 8 for form in forms)
    assert Redactor(values=["short"]).text("short") == "short"


# the environment -----------------------------------------------------------------------------------------------
@pytest.mark.parametrize(
    "value",
    [
        f"postgresql://app@db/prod?password={PW}",
        f"postgresql://app@db/prod?sslmode=require&password={PW}",
        f"host=db user=app password={PW}",
        f"Server=db;Database=x;User Id=sa;Password={PW};",
        f"DefaultEndpointsProtocol=https;AccountName=a;AccountKey={PW}",
        f"https://api.example.com/hook?token={PW}",
        "postgresql://app:S3cr@t-Passw0rd@db/prod",
    ],
)
def test_a_variable_holding_a_password_parameter_is_a_credential(value):
    assert is_credential("DATABASE_URL", value)
    assert command_environment({"DATABASE_URL": value, "PATH": "/bin"}) == {"PATH": "/bin"}
    hunted = credential_values({"DATABASE_URL": value})
    assert value in hunted
    password = "S3cr@t-Passw0rd" if "S3cr@t" in value else PW
    assert password in hunted  # the password alone, wherever it shows up next


@pytest.mark.parametrize("value", ["/usr/bin:/bin", "postgresql://app@db/prod?sslmode=require", "en_US.UTF-8"])
def test_a_variable_without_one_is_not(value):
    assert not is_credential("DATABASE_URL", value)


def test_every_trigger_list_is_lowercase_safe_and_every_pattern_is_named():
    assert all(t for t in TRIGGERS + FOUND_TRIGGERS)
    assert {"private_key", "url_password", "assigned_secret", "auth_header", "jwt"} <= set(BUILTIN_PATTERNS)
