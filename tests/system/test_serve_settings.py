"""`mcp-elicit serve --transport http` as installed: its settings, all checked at once, and the OAuth metadata
it serves, which lists only what its authorization server does."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx2
import pytest

from tests.helpers.commands import command, spawn
from tests.helpers.http_harness import free_port, stop, wait_for_port
from tests.helpers.oauth_client import code_for, pkce, redeem, registered

COMMAND = str(Path(sys.executable).with_name("mcp-elicit"))

REQUIRED = ("MCP_ELICIT_USERS", "MCP_ELICIT_AUTH_KEYS", "MCP_ELICIT_STATE_KEYS", "MCP_ELICIT_VAULT_KEYS")
OPTIONAL = ("MCP_ELICIT_PROVIDER_URL", "MCP_ELICIT_PROVIDER_CLIENT_ID", "MCP_ELICIT_PROVIDER_CLIENT_SECRET")


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


def serve(tmp_path: Path, environ: dict[str, str]) -> subprocess.CompletedProcess[str]:
    return command(
        ["serve", "--transport", "http", "--port", str(free_port()),
         "--store", f"sqlite://{tmp_path / 'data' / 'elicit.db'}", "--workspace", str(tmp_path / "workspace")],
        env=environ, timeout=60,
    )  # fmt: skip


def problems(stderr: str) -> tuple[str, list[str]]:
    """The one error line, and the settings listed under it."""
    first, *rest = stderr.strip().splitlines()
    assert all(line.startswith("  - ") for line in rest), stderr
    return first, [line[4:] for line in rest]


def test_an_empty_environment_names_every_missing_setting_at_once(tmp_path: Path) -> None:
    done = serve(tmp_path, {})
    assert done.returncode == 2, done.stderr
    first, listed = problems(done.stderr)
    assert first == "error: mcp-elicit serve --transport http cannot start; fix 4 settings in its environment:"
    assert [line.split()[0] for line in listed] == list(REQUIRED)
    assert all(" is not set" in line for line in listed)
    assert not any(name in done.stderr for name in OPTIONAL)  # without a provider, connect_account is not served
    assert "Traceback" not in done.stderr and done.stdout == ""
    assert not (tmp_path / "data").exists() and not (tmp_path / "workspace").exists()


def test_invalid_settings_are_named_together_with_what_is_wrong(tmp_path: Path) -> None:
    done = serve(
        tmp_path,
        {
            "MCP_ELICIT_USERS": "alice",
            "MCP_ELICIT_AUTH_KEYS": b64(b"short"),
            "MCP_ELICIT_STATE_KEYS": b64(b"S" * 32),
            "MCP_ELICIT_VAULT_KEYS": "broken",
            "MCP_ELICIT_PROVIDER_URL": "http://127.0.0.1:9",
        },
    )
    assert done.returncode == 2, done.stderr
    first, listed = problems(done.stderr)
    assert "fix 5 settings" in first
    assert [line.split()[0].rstrip(":") for line in listed] == [
        "MCP_ELICIT_USERS",
        "MCP_ELICIT_AUTH_KEYS",
        "MCP_ELICIT_VAULT_KEYS",
        "MCP_ELICIT_PROVIDER_CLIENT_ID",
        "MCP_ELICIT_PROVIDER_CLIENT_SECRET",
    ]
    assert "key 1 has 5 bytes" in listed[1] and "needs it" in listed[3]
    assert "MCP_ELICIT_STATE_KEYS" not in done.stderr


@pytest.fixture
def served(tmp_path: Path) -> Iterator[str]:
    port = free_port()
    environ = {
        **os.environ,
        "MCP_ELICIT_USERS": "alice:wonderland:Alice Liddell,bob:builder",
        "MCP_ELICIT_AUTH_KEYS": b64(b"A" * 32),
        "MCP_ELICIT_STATE_KEYS": b64(b"S" * 32),
        "MCP_ELICIT_VAULT_KEYS": "v1:" + b64(b"V" * 32),
    }
    process = spawn(
        ["serve", "--transport", "http", "--port", str(port), "--store", f"sqlite://{tmp_path / 'e.db'}",
         "--workspace", str(tmp_path / "workspace")],
        env=environ, output=tmp_path / "serve.log",
    )  # fmt: skip
    try:
        wait_for_port(port, process)
        yield f"http://127.0.0.1:{port}"
    finally:
        stop(process)


@pytest.mark.anyio
async def test_the_metadata_lists_only_the_grants_the_server_serves(served: str) -> None:
    async with httpx2.AsyncClient(timeout=30) as browser:
        metadata = (await browser.get(f"{served}/.well-known/oauth-authorization-server")).json()
        assert metadata["grant_types_supported"] == ["authorization_code"]
        assert metadata["token_endpoint"] == f"{served}/token"
        client = await registered(served)
        verifier, challenge = pkce()
        granted = await redeem(served, client, await code_for(browser, served, client, challenge), verifier)
        assert granted.status_code == 200 and "refresh_token" not in granted.json()
        refresh = await browser.post(
            metadata["token_endpoint"],
            data={"grant_type": "refresh_token", "refresh_token": "r", "client_id": client.client_id,
                  "client_secret": client.client_secret},
        )  # fmt: skip
        assert refresh.status_code == 400
