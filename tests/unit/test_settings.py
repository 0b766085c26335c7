"""`mcp_elicit.settings`: every `MCP_ELICIT_*` variable read in one place, a secret from a `_FILE` too, and
each problem named by its variable, all at once, never repeating a secret."""

from __future__ import annotations

import base64
import os
import re
from pathlib import Path

import pytest

from mcp_elicit.reference.deployment import http_settings
from mcp_elicit.settings import SECRETS, Settings, SettingsError, variable

ROOT = Path(__file__).resolve().parents[2]
TABLE = ROOT / "docs" / "guides" / "configuration.md"
"""The settings' one table, on the Configuration page."""
DOCUMENTS = [ROOT / "README.md", ROOT / "CONTRIBUTING.md", *sorted((ROOT / "docs").rglob("*.md"))]
KEY_A, KEY_B = b"A" * 32, b"B" * 48


def b64(raw: bytes, *, url_safe: bool = True, padded: bool = True) -> str:
    text = (base64.urlsafe_b64encode if url_safe else base64.b64encode)(raw).decode()
    return text if padded else text.rstrip("=")


def secret_file(tmp_path: Path, text: str, mode: int = 0o600, name: str = "secret") -> Path:
    path = tmp_path / name
    path.write_text(text)
    path.chmod(mode)
    return path


def test_each_setting_reads_its_variable_trimmed_and_a_blank_one_is_not_set() -> None:
    settings = Settings.read(
        {
            "MCP_ELICIT_STORE": " sqlite:///srv/elicit.db ",
            "MCP_ELICIT_USERS": "alice:wonderland",
            "MCP_ELICIT_OPERATORS": " carol , ,dave ",
            "MCP_ELICIT_PROVIDER_URL": "https://idp.example/oauth/",
            "MCP_ELICIT_PROVIDER_CLIENT_ID": "elicit",
            "MCP_ELICIT_WEBHOOK_EVENTS": "decision.ended,",
            "MCP_ELICIT_TOKEN": "  ",
            "MCP_ELICIT_VAULT_KEYS": "",
        }
    )
    assert settings.store == "sqlite:///srv/elicit.db"
    assert settings.users is not None and settings.users.get_secret_value() == "alice:wonderland"
    assert settings.operators == ("carol", "dave")
    assert settings.provider_url == "https://idp.example/oauth"
    assert settings.provider_client_id == "elicit"
    assert settings.webhook_events == ("decision.ended",)
    assert settings.token is None and settings.vault_keys is None and settings.auth_keys is None
    assert settings.origin("users") == "MCP_ELICIT_USERS"


def test_a_key_ring_takes_either_base64_alphabet_with_or_without_padding_newest_first() -> None:
    ring = f"{b64(KEY_A, padded=False)} , {b64(KEY_B, url_safe=False)}"
    settings = Settings.read({"MCP_ELICIT_AUTH_KEYS": ring, "MCP_ELICIT_STATE_KEYS": b64(KEY_B)})
    assert settings.auth_keys == (KEY_A, KEY_B)
    assert settings.state_keys == (KEY_B,)


@pytest.mark.parametrize(
    ("ring", "problem"),
    [
        (f"{b64(KEY_A)},not base64!", "key 2 is not base64; generate one with: python -c"),
        (b64(b"s3cret-short"), "key 1 has 12 bytes; at least 32 are needed; generate one with: python -c"),
        (f"{b64(KEY_A)},{b64(KEY_B)},{b64(KEY_A, padded=False)}", "key 3 repeats key 1; give each key"),
    ],
)
def test_a_bad_key_ring_names_its_variable_and_the_key_never_its_value(ring: str, problem: str) -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.read({"MCP_ELICIT_STATE_KEYS": ring})
    [said] = raised.value.problems
    assert said.startswith(f"MCP_ELICIT_STATE_KEYS: {problem}")
    assert not any(part.strip() in said for part in ring.split(","))


def test_every_problem_is_said_at_once_in_the_order_of_the_settings() -> None:
    with pytest.raises(SettingsError) as raised:
        Settings.read(
            {
                "MCP_ELICIT_TOKEN": "t0ken-in-clear",
                "MCP_ELICIT_TOKEN_FILE": "/run/secrets/token",
                "MCP_ELICIT_PROVIDER_URL": "ftp://idp.example",
                "MCP_ELICIT_AUTH_KEYS": b64(b"tiny"),
            }
        )
    assert [problem.split()[0].rstrip(":") for problem in raised.value.problems] == [
        "MCP_ELICIT_AUTH_KEYS",
        "MCP_ELICIT_PROVIDER_URL",
        "MCP_ELICIT_TOKEN",
    ]
    assert raised.value.problems[1] == "MCP_ELICIT_PROVIDER_URL: must be an http(s) base URL, not 'ftp://idp.example'"
    assert raised.value.problems[2] == "MCP_ELICIT_TOKEN and MCP_ELICIT_TOKEN_FILE are both set; set one of them"
    assert str(raised.value) == "\n".join(raised.value.problems)
    assert "t0ken-in-clear" not in str(raised.value)


def test_a_command_reads_only_the_settings_it_uses() -> None:
    environ = {"MCP_ELICIT_AUTH_KEYS": "not a key ring", "MCP_ELICIT_TOKEN": "t"}
    settings = Settings.read(environ, only=["token"])
    assert settings.token is not None and settings.token.get_secret_value() == "t"
    assert settings.auth_keys is None
    with pytest.raises(SettingsError, match=r"^MCP_ELICIT_AUTH_KEYS: key 1 is not base64"):
        Settings.read(environ)
    with pytest.raises(ValueError, match="no such setting: tokens"):
        Settings.read(environ, only=["tokens"])


def test_settings_read_from_a_given_environment_ignore_this_process_environment(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """`serve` hands its environment to `read`; a variable of this process must neither fail nor fill it."""
    monkeypatch.setenv("MCP_ELICIT_AUTH_KEYS", "not a key ring")
    monkeypatch.setenv("MCP_ELICIT_TOKEN", "from-the-process")
    settings = Settings.read({"MCP_ELICIT_USERS": "alice:wonderland"})
    assert settings.users is not None and settings.auth_keys is None and settings.token is None
    assert Settings.read({}, only=["users"]).users is None
    monkeypatch.setenv("MCP_ELICIT_AUTH_KEYS", b64(KEY_A))
    with pytest.raises(SettingsError, match=r"^MCP_ELICIT_AUTH_KEYS: key 1 is not base64"):
        Settings.read({"MCP_ELICIT_AUTH_KEYS": "not a key ring"})


def test_a_secret_comes_from_the_file_its_file_variable_names(tmp_path: Path) -> None:
    keys = secret_file(tmp_path, f"{b64(KEY_A)},{b64(KEY_B)}\n", name="auth")
    users = secret_file(tmp_path, "  alice:wonderland:Alice Liddell\n\n", mode=0o640, name="users")
    settings = Settings.read({"MCP_ELICIT_AUTH_KEYS_FILE": str(keys), "MCP_ELICIT_USERS_FILE": f" {users} "})
    assert settings.auth_keys == (KEY_A, KEY_B)
    assert settings.users is not None and settings.users.get_secret_value() == "alice:wonderland:Alice Liddell"
    assert settings.origin("users") == f"MCP_ELICIT_USERS_FILE ({users})"
    short = secret_file(tmp_path, b64(b"short"), name="short")
    with pytest.raises(SettingsError) as raised:
        Settings.read({"MCP_ELICIT_STATE_KEYS_FILE": str(short)})
    assert raised.value.problems == (
        f"MCP_ELICIT_STATE_KEYS_FILE ({short}): key 1 has 5 bytes; at least 32 are needed; generate one with: "
        'python -c "import base64, secrets; print(base64.urlsafe_b64encode(secrets.token_bytes(32)).decode())"',
    )


@pytest.mark.parametrize("mode", [0o644, 0o604, 0o602, 0o601])
def test_a_secret_file_other_users_may_open_is_refused_with_the_chmod_that_fixes_it(tmp_path: Path, mode: int) -> None:
    token = secret_file(tmp_path, "t0ken", mode=mode)
    with pytest.raises(SettingsError) as raised:
        Settings.read({"MCP_ELICIT_TOKEN_FILE": str(token)})
    assert raised.value.problems == (
        f"MCP_ELICIT_TOKEN_FILE ({token}): other users may open it (mode {mode:04o}); "
        f"give it to the service's user alone: chmod 600 {token} (or 640 for its group)",
    )


def test_a_secret_file_its_group_may_change_or_that_is_no_regular_file_is_refused(tmp_path: Path) -> None:
    token = secret_file(tmp_path, "t0ken", mode=0o660)
    with pytest.raises(SettingsError, match=r"its group may change it \(mode 0660\); .*chmod 600"):
        Settings.read({"MCP_ELICIT_TOKEN_FILE": str(token)})
    pipe = tmp_path / "pipe"
    os.mkfifo(pipe, 0o600)  # nobody writes it: reading it would wait for ever
    with pytest.raises(SettingsError, match=r"\(.*pipe\): is not a regular file$"):
        Settings.read({"MCP_ELICIT_TOKEN_FILE": str(pipe)})
    with pytest.raises(SettingsError, match="cannot be read: Is a directory"):
        Settings.read({"MCP_ELICIT_TOKEN_FILE": str(tmp_path)})


def test_a_missing_empty_oversized_or_binary_secret_file_is_refused(tmp_path: Path) -> None:
    files = {
        "users": tmp_path / "absent",
        "auth_keys": tmp_path,
        "state_keys": secret_file(tmp_path, " \n", name="blank"),
        "vault_keys": secret_file(tmp_path, "v1:" + "A" * 70_000, name="huge"),
        "token": tmp_path / "binary",
    }
    (tmp_path / "binary").write_bytes(b"\xff\xfe t0ken")
    (tmp_path / "binary").chmod(0o600)
    with pytest.raises(SettingsError) as raised:
        Settings.read({f"{variable(name)}_FILE": str(path) for name, path in files.items()})
    assert raised.value.problems == (
        f"MCP_ELICIT_USERS_FILE ({files['users']}): cannot be read: No such file or directory",
        f"MCP_ELICIT_AUTH_KEYS_FILE ({tmp_path}): cannot be read: Is a directory",
        f"MCP_ELICIT_STATE_KEYS_FILE ({files['state_keys']}): is empty",
        f"MCP_ELICIT_VAULT_KEYS_FILE ({files['vault_keys']}): is larger than 64 KiB, too large for a setting",
        f"MCP_ELICIT_TOKEN_FILE ({files['token']}): is not UTF-8 text",
    )


def test_only_a_secret_comes_from_a_file(tmp_path: Path) -> None:
    assert {
        "users",
        "idp_client_secret",
        "auth_keys",
        "state_keys",
        "vault_keys",
        "audit_keys",
        "provider_client_secret",
        "provider_webhook_secret",
        "webhook_url",
        "webhook_secret",
        "smtp_password",
        "token",
    } == SECRETS
    names = secret_file(tmp_path, "carol")
    settings = Settings.read({"MCP_ELICIT_OPERATORS_FILE": str(names), "MCP_ELICIT_STORE_FILE": str(names)})
    assert settings.operators == () and settings.store is None


def test_no_secret_shows_in_the_settings_repr() -> None:
    settings = Settings.read(
        {
            "MCP_ELICIT_USERS": "alice:s3cret-password",
            "MCP_ELICIT_AUTH_KEYS": b64(KEY_A),
            "MCP_ELICIT_PROVIDER_CLIENT_SECRET": "s3cret-client",
            "MCP_ELICIT_WEBHOOK_URL": "https://hooks.example/s3cret-path",
            "MCP_ELICIT_TOKEN": "s3cret-token",
            "MCP_ELICIT_OPERATORS": "alice",
        }
    )
    shown = repr(settings) + str(settings)
    assert "operators=('alice',)" in shown
    assert "s3cret" not in shown and b64(KEY_A) not in shown and "AAAA" not in shown


def test_settings_built_plainly_read_this_process_environment(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setenv("MCP_ELICIT_OPERATORS", "carol")
    monkeypatch.delenv("MCP_ELICIT_TOKEN", raising=False)
    assert Settings().operators == ("carol",)
    assert Settings.read().operators == ("carol",)
    monkeypatch.setenv("MCP_ELICIT_TOKEN_FILE", str(secret_file(tmp_path, "t0ken", mode=0o644)))
    with pytest.raises(SettingsError, match=r"^MCP_ELICIT_TOKEN_FILE \(.*\): other users may open it"):
        Settings()


def test_the_deployment_reads_its_secrets_from_files_and_names_each_problem(tmp_path: Path) -> None:
    environ = {
        "MCP_ELICIT_USERS_FILE": str(secret_file(tmp_path, "alice:wonderland\n", name="users")),
        "MCP_ELICIT_AUTH_KEYS_FILE": str(secret_file(tmp_path, b64(KEY_A), name="auth")),
        "MCP_ELICIT_STATE_KEYS": b64(KEY_B),
        "MCP_ELICIT_VAULT_KEYS_FILE": str(secret_file(tmp_path, f"v1:{b64(KEY_A)}", name="vault")),
        "MCP_ELICIT_PROVIDER_URL": "https://idp.example",
        "MCP_ELICIT_PROVIDER_CLIENT_ID": "elicit",
        "MCP_ELICIT_PROVIDER_CLIENT_SECRET_FILE": str(secret_file(tmp_path, "s3cret\n", name="client")),
    }
    settings = http_settings(environ, "https://elicit.example")
    assert settings.users is not None and settings.users.usernames == ["alice"] and settings.auth_keys == [KEY_A]
    assert settings.vault_keys.key_ids == ("v1",)
    assert settings.provider is not None and settings.provider.client_secret == "s3cret"
    secret_file(tmp_path, "alice", name="users")
    secret_file(tmp_path, "v1:c2hvcnQ=", mode=0o644, name="vault")
    with pytest.raises(SettingsError) as raised:
        http_settings(environ, "https://elicit.example")
    users, vault = environ["MCP_ELICIT_USERS_FILE"], environ["MCP_ELICIT_VAULT_KEYS_FILE"]
    assert raised.value.problems == (
        f"MCP_ELICIT_USERS_FILE ({users}): entry 1 is not username:password[:display name]",
        f"MCP_ELICIT_VAULT_KEYS_FILE ({vault}): other users may open it (mode 0644); "
        f"give it to the service's user alone: chmod 600 {vault} (or 640 for its group)",
    )


def test_the_configuration_page_documents_every_setting_in_one_table() -> None:
    """The table has a row per variable, in the settings' order, a secret's saying `_FILE`; no page names a
    variable the table does not have."""
    rows = [
        line.split("|")[1:3]
        for line in TABLE.read_text(encoding="utf-8").splitlines()
        if line.startswith("| `MCP_ELICIT_")
    ]
    documented = [(name.strip().strip("`"), file_too.strip()) for name, file_too in rows]
    expected = [(variable(name), "`_FILE`" if name in SECRETS else "") for name in Settings.model_fields]
    assert documented == [*expected, ("MCP_ELICIT_LOG_FORMAT", "")]
    named = {name for name, _ in documented} | {f"{name}_FILE" for name, _ in documented}
    for document in DOCUMENTS:
        everywhere = set(re.findall(r"\bMCP_ELICIT_[A-Z_]*[A-Z]\b(?!_\*)", document.read_text(encoding="utf-8")))
        assert everywhere - named <= {"MCP_ELICIT_TEST_PG"}, document


@pytest.mark.parametrize("claim", ["email", "preferred_username", "name", "phone_number", "upn", "unique_name"])
def test_a_subject_claim_its_person_or_an_administrator_can_change_is_refused(claim: str) -> None:
    """OpenID Connect Core 5.7: only `sub` (or a provider's immutable id, `oid`) identifies a person; a principal
    taken from an address or a user name passes to whoever is given it next, or sets it on their own account."""
    with pytest.raises(SettingsError, match=rf"^MCP_ELICIT_IDP_SUBJECT_CLAIM: {claim} is .*not a stable identifier"):
        Settings.read({"MCP_ELICIT_IDP_SUBJECT_CLAIM": claim}, only=["idp_subject_claim"])
    for kept in ("sub", "oid", "uid"):
        assert Settings.read({"MCP_ELICIT_IDP_SUBJECT_CLAIM": kept}).idp_subject_claim == kept
