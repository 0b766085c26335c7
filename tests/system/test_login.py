"""`mcp-elicit login URL`: the browser sign-in against the server's authorization server, the kept token, and
`mcp-elicit call URL` using (and renewing) it.

Real parts: the server with the local authorization server over HTTP on loopback (the SDK's `MCPServer`, and
once FastMCP with `LocalOAuth`), the command as a
subprocess, Debian's Chromium driven by Playwright as the person's browser (started by the command through
`$BROWSER`, or opening the address the command printed), real files under a throwaway `$XDG_DATA_HOME`.
"""

from __future__ import annotations

import json
import os
import secrets
import stat
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

import httpx2
import pytest
from mcp.server.auth.provider import AuthorizationCode, RefreshToken, TokenError
from mcp.shared.auth import OAuthClientInformationFull, OAuthToken

from mcp_elicit.client.tokens import LoginStore, SavedLogin
from mcp_elicit.fastmcp import FastMCPFlows, LocalOAuth
from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy, RequestState
from mcp_elicit.store import Store, open_store
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers, WebPages, mount_web
from tests.helpers.browser import chromium as chromium  # the fixture that skips without Chromium
from tests.helpers.commands import command
from tests.helpers.http_harness import free_port, serving

COMMAND = str(Path(sys.executable).with_name("mcp-elicit"))
BROWSER_SCRIPT = Path(__file__).parents[1] / "helpers" / "login_browser.py"
SHOTS = Path(__file__).resolve().parents[2] / "test-artifacts" / "screenshots"
USERS = "alice:wonderland:Alice Liddell,bob:builder:Bob"


class RenewingAuthorizationServer(LocalAuthorizationServer):
    """The local authorization server plus rotating refresh tokens: an authorization server that issues them."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.refresh_tokens: dict[str, RefreshToken] = {}
        self.resource_of: dict[str, str | None] = {}
        self.renewed = 0

    def _refresh_for(self, client_id: str, username: str, scopes: list[str], resource: str | None) -> str:
        token = secrets.token_urlsafe(24)
        self.refresh_tokens[token] = RefreshToken(token=token, client_id=client_id, scopes=scopes, subject=username)
        self.resource_of[token] = resource
        return token

    async def exchange_authorization_code(
        self, client: OAuthClientInformationFull, authorization_code: AuthorizationCode
    ) -> OAuthToken:
        issued = await super().exchange_authorization_code(client, authorization_code)
        refresh = self._refresh_for(
            client.client_id, str(authorization_code.subject), authorization_code.scopes, authorization_code.resource
        )
        return issued.model_copy(update={"refresh_token": refresh})

    async def load_refresh_token(self, client: OAuthClientInformationFull, refresh_token: str) -> RefreshToken | None:
        found = self.refresh_tokens.get(refresh_token)
        return found if found is not None and found.client_id == client.client_id else None

    async def exchange_refresh_token(
        self, client: OAuthClientInformationFull, refresh_token: RefreshToken, scopes: list[str]
    ) -> OAuthToken:
        if self.refresh_tokens.pop(refresh_token.token, None) is None:
            raise TokenError("invalid_grant", "refresh token already used")
        resource = self.resource_of.pop(refresh_token.token, None)
        username = str(refresh_token.subject)
        issued = self.issue_access_token(username, client.client_id, refresh_token.scopes, resource=resource)
        self.renewed += 1
        refresh = self._refresh_for(client.client_id, username, refresh_token.scopes, resource)
        return issued.model_copy(update={"refresh_token": refresh})


@dataclass
class Served:
    base: str
    store: Store
    auth: LocalAuthorizationServer

    @property
    def mcp_url(self) -> str:
        return f"{self.base}/mcp"


@contextmanager
def served(
    store_url: str, auth_type: type[LocalAuthorizationServer] = LocalAuthorizationServer, access_ttl: int = 3600
) -> Iterator[Served]:
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"l" * 32]), public_base_url=base)
    auth = auth_type(base, LocalUsers.from_text(USERS), store, signing_keys=[b"a" * 32], access_ttl=access_ttl)
    server = elicitation.server("login-test", **auth.mcp_server_kwargs(f"{base}/mcp"))
    mount_web(server, elicitation, WebPages(sign_in=auth, page_key=b"p" * 32))

    @elicitation.tool()
    async def whoami(flow: Flow) -> str:
        return f"you are {flow.principal.principal_id}"

    @elicitation.tool()
    async def confirm(flow: Flow, what: str) -> str:
        ok = await flow.ask(f"Confirm {what}?", bool)
        return f"{flow.principal.principal_id} confirmed {what}" if isinstance(ok, Accepted) and ok.data else "no"

    try:
        with serving(auth.http_app(server), port):
            yield Served(base, store, auth)
    finally:
        store.close()


@contextmanager
def served_fastmcp(store_url: str) -> Iterator[Served]:
    """The same tool on FastMCP: the local authorization server as its `auth=` (configured with a trailing
    slash, as an operator may write it) and `mount_web` for the sign-in pages on its app."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"l" * 32]), public_base_url=base)
    auth = LocalAuthorizationServer(f"{base}/", LocalUsers.from_text(USERS), store, signing_keys=[b"a" * 32])
    flows = FastMCPFlows(elicitation)
    server = flows.server("login-test", auth=LocalOAuth(auth))
    mount_web(server, elicitation, WebPages(sign_in=auth, page_key=b"p" * 32))

    @flows.tool()
    async def whoami(flow: Flow) -> str:
        return f"you are {flow.principal.principal_id}"

    try:
        with serving(server.http_app(), port):
            yield Served(base, store, auth)
    finally:
        store.close()


@pytest.fixture
def site(store_url: str) -> Iterator[Served]:
    with served(store_url) as running:
        yield running


def environment(data_home: Path, **extra: str) -> dict[str, str]:
    """No graphical session and no $BROWSER unless given: a browser starts only where a test says so."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("DISPLAY", "WAYLAND_DISPLAY", "BROWSER", "MCP_ELICIT_TOKEN")
    }
    return {**env, "XDG_DATA_HOME": str(data_home), "COLUMNS": "200", **extra}


def browser_command(tmp_path: Path, name: str, user: str = "alice") -> tuple[Path, dict[str, str]]:
    """An executable `$BROWSER`: Chromium driven by Playwright, signing in as `user`."""
    SHOTS.mkdir(parents=True, exist_ok=True)
    script = tmp_path / "open-browser"
    script.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{BROWSER_SCRIPT}" "$1"\n')
    script.chmod(0o700)
    password = {"alice": "wonderland", "bob": "builder"}[user]
    return script, {"LOGIN_USER": user, "LOGIN_PASSWORD": password, "LOGIN_SHOTS": str(SHOTS / f"login-{name}")}


def run(*args: str, env: dict[str, str], timeout: float = 120) -> subprocess.CompletedProcess[str]:
    return command(args, env=env, timeout=timeout)


def login_without_browser(
    url: str, env: dict[str, str], *extra: str, user: str = "alice"
) -> subprocess.CompletedProcess[str]:
    """`login` with no browser to start: read the address it prints, open it in the test's Chromium, wait for it."""
    process = subprocess.Popen(
        [COMMAND, "login", url, *extra],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=env,
    )
    assert process.stdout is not None
    try:
        address = ""
        for line in process.stdout:
            if line.startswith("http"):
                address = line.strip()
                break
        assert address, process.stderr.read() if process.stderr else ""
        redirect = parse_qs(urlsplit(address).query)["redirect_uri"][0]
        stray = httpx2.get(redirect, params={"code": "forged", "state": "not-this-one"}, timeout=10)
        assert stray.status_code == 400 and "Not this sign-in" in stray.text  # and the sign-in goes on
        password = {"alice": "wonderland", "bob": "builder"}[user]
        opened = subprocess.run(
            [sys.executable, str(BROWSER_SCRIPT), address],
            env={**env, "LOGIN_USER": user, "LOGIN_PASSWORD": password, "LOGIN_SHOTS": str(SHOTS / "login-printed")},
            capture_output=True,
            text=True,
            timeout=90,
        )
        assert opened.returncode == 0, opened.stderr
        rest, errors = process.communicate(timeout=60)
    finally:
        if process.poll() is None:
            process.kill()
            process.wait()
    return subprocess.CompletedProcess(process.args, process.returncode, address + "\n" + rest, errors)


def kept_file(data_home: Path) -> Path:
    [path] = (data_home / "mcp-elicit" / "logins").glob("*.json")
    return path


@pytest.mark.usefixtures("chromium")
def test_login_in_chromium_keeps_a_0600_token_that_call_uses(site: Served, tmp_path: Path) -> None:
    data_home = tmp_path / "data"
    script, browser_env = browser_command(tmp_path, "browser")
    env = environment(data_home, BROWSER=str(script), **browser_env)
    signed = run("login", site.mcp_url, env=env)
    assert signed.returncode == 0, signed.stderr
    assert "Opened the sign-in page in your browser" in signed.stderr
    path = kept_file(data_home)
    assert f"Signed in to {site.mcp_url} (authorization server {site.base})." in signed.stdout
    assert f"The token is kept in {path} (mode 0600)" in signed.stdout
    assert stat.S_IMODE(path.stat().st_mode) == 0o600
    assert stat.S_IMODE(path.parent.stat().st_mode) == 0o700
    kept = json.loads(path.read_text())
    assert kept["server"] == site.mcp_url and kept["issuer"] == site.base
    assert kept["token_endpoint"] == f"{site.base}/token" and kept["refresh_token"] is None
    assert kept["resource"] == site.mcp_url
    assert 3500 < kept["expires_at"] - time.time() <= 3600

    called = run("call", site.mcp_url, "whoami", env=environment(data_home))
    assert called.returncode == 0, called.stderr
    assert f"you are {site.base}#alice" in called.stdout

    # Another user's data directory has no sign-in: the call is refused with the way to get one.
    elsewhere = run("call", site.mcp_url, "whoami", env=environment(tmp_path / "other"))
    assert elsewhere.returncode == 2
    assert f"sign in with mcp-elicit login {site.mcp_url}, or pass --token" in elsewhere.stderr


@pytest.mark.usefixtures("chromium")
def test_login_in_chromium_to_a_fastmcp_server_keeps_a_token_that_call_uses(store_url: str, tmp_path: Path) -> None:
    data_home = tmp_path / "data"
    with served_fastmcp(store_url) as site:
        script, browser_env = browser_command(tmp_path, "fastmcp")
        signed = run("login", site.mcp_url, env=environment(data_home, BROWSER=str(script), **browser_env))
        assert signed.returncode == 0, signed.stderr
        assert f"Signed in to {site.mcp_url} (authorization server {site.base})." in signed.stdout
        kept = json.loads(kept_file(data_home).read_text())
        assert kept["issuer"] == site.base and kept["resource"] == site.mcp_url
        called = run("call", site.mcp_url, "whoami", env=environment(data_home))
    assert called.returncode == 0, called.stderr
    assert f"you are {site.base}#alice" in called.stdout


@pytest.mark.usefixtures("chromium")
def test_without_a_browser_the_address_is_printed_and_opened_by_the_person(site: Served, tmp_path: Path) -> None:
    data_home = tmp_path / "data"
    signed = login_without_browser(site.mcp_url, environment(data_home), user="bob")
    assert signed.returncode == 0, signed.stderr
    assert "Open this address in a browser on this machine to sign in:" in signed.stderr
    address = signed.stdout.splitlines()[0]
    assert address.startswith(f"{site.base}/authorize?") and "code_challenge_method=S256" in address
    assert "redirect_uri=http%3A%2F%2F127.0.0.1%3A" in address
    called = run("call", site.mcp_url, "confirm", "--arg", "what=the rota", "--script", str(_accept(tmp_path)),
                 env=environment(data_home))  # fmt: skip
    assert called.returncode == 0, called.stderr
    assert f"{site.base}#bob confirmed the rota" in called.stdout


def _accept(tmp_path: Path) -> Path:
    script = tmp_path / "answers.json"
    script.write_text(json.dumps([{"match": "Confirm", "reply": "accept", "content": {"value": True}}]))
    return script


@pytest.mark.usefixtures("chromium")
def test_a_due_token_is_renewed_with_the_refresh_token_and_kept(store_url: str, tmp_path: Path) -> None:
    data_home = tmp_path / "data"
    with served(store_url, RenewingAuthorizationServer, access_ttl=30) as site:
        auth = site.auth
        assert isinstance(auth, RenewingAuthorizationServer)
        script, browser_env = browser_command(tmp_path, "renew")
        env = environment(data_home, BROWSER=str(script), **browser_env)
        signed = login_without_browser(site.mcp_url, env, "--no-browser")  # --no-browser wins over $BROWSER
        assert signed.returncode == 0, signed.stderr
        assert "renewed on its own when it is due" in signed.stdout
        first = json.loads(kept_file(data_home).read_text())
        assert first["refresh_token"] and first["expires_at"] - time.time() < 60  # due at once: 30 s left

        called = run("call", site.mcp_url, "whoami", env=environment(data_home))
        assert called.returncode == 0, called.stderr
        assert f"you are {site.base}#alice" in called.stdout
        renewed = json.loads(kept_file(data_home).read_text())
        assert auth.renewed == 1
        assert renewed["access_token"] != first["access_token"]
        assert renewed["refresh_token"] != first["refresh_token"]  # rotated, and the new one kept
        assert stat.S_IMODE(kept_file(data_home).stat().st_mode) == 0o600

        auth.refresh_tokens.clear()  # the server forgets it: the next renewal is refused
        refused = run("call", site.mcp_url, "whoami", env=environment(data_home))
        assert refused.returncode == 2
        assert (
            f"the sign-in to {site.mcp_url} has expired and could not be renewed (invalid_grant); "
            f"sign in again: mcp-elicit login {site.mcp_url}"
        ) in " ".join(refused.stderr.split())


def test_a_kept_sign_in_is_refused_when_others_can_read_it_or_it_expired(tmp_path: Path) -> None:
    logins = LoginStore(tmp_path / "logins")
    url = "http://127.0.0.1:9/mcp"
    saved = SavedLogin(
        server=url, issuer="http://127.0.0.1:9", token_endpoint="http://127.0.0.1:9/token", client_id="c",
        access_token="t", expires_at=time.time() - 5,
    )  # fmt: skip
    path = logins.save(saved)
    assert logins.load("HTTP://127.0.0.1:9/mcp/") == saved  # the same server, written otherwise
    expired = run("call", url, "whoami", env=environment(tmp_path, XDG_DATA_HOME=str(tmp_path.parent / "x")))
    assert expired.returncode == 2  # no sign-in kept there
    env = environment(tmp_path)
    (tmp_path / "mcp-elicit").mkdir()
    (tmp_path / "mcp-elicit" / "logins").symlink_to(logins.directory)
    due = run("call", url, "whoami", env=env)
    assert due.returncode == 2
    assert f"the sign-in to {url} has expired and its server issued no refresh token; sign in again" in " ".join(
        due.stderr.split()
    )
    path.chmod(0o644)
    leaked = run("call", url, "whoami", env=env)
    assert leaked.returncode == 2
    assert "can be read or written by others (mode 644)" in " ".join(leaked.stderr.split())


def test_login_says_when_a_server_asks_for_no_sign_in(store_url: str, tmp_path: Path) -> None:
    port = free_port()
    store = open_store(store_url)
    elicitation = Elicitation(
        store,
        request_state=RequestState(keys=[b"l" * 32]),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
    )
    server = elicitation.server("open")
    try:
        with serving(server.streamable_http_app(), port):
            url = f"http://127.0.0.1:{port}/mcp"
            done = run("login", url, "--no-browser", env=environment(tmp_path))
    finally:
        store.close()
    assert done.returncode == 2
    assert f"{url} did not ask for authorization (it answered HTTP 200 without a token)" in " ".join(
        done.stderr.split()
    )
    assert not (tmp_path / "mcp-elicit" / "logins").exists()
    bad = run("login", "ftp://example.org/mcp", env=environment(tmp_path))
    assert bad.returncode == 2 and "is not an http(s) URL" in bad.stderr


@pytest.mark.usefixtures("chromium")
def test_a_client_registered_beforehand_is_used_instead_of_registering(site: Served, tmp_path: Path) -> None:
    port = free_port()
    registered = httpx2.post(
        f"{site.base}/register",
        json={
            "redirect_uris": [f"http://127.0.0.1:{port}/callback"],
            "client_name": "registered by an operator",
            "token_endpoint_auth_method": "none",
            "grant_types": ["authorization_code", "refresh_token"],
        },
        timeout=30,
    )
    assert registered.status_code == 201, registered.text
    client_id = registered.json()["client_id"]
    data_home = tmp_path / "data"
    signed = login_without_browser(
        site.mcp_url, environment(data_home), "--client-id", client_id, "--callback-port", str(port)
    )
    assert signed.returncode == 0, signed.stderr
    assert f"client_id={client_id}" in signed.stdout.splitlines()[0]
    kept = json.loads(kept_file(data_home).read_text())
    assert kept["client_id"] == client_id and kept["client_secret"] is None
    called = run("call", site.mcp_url, "whoami", env=environment(data_home))
    assert called.returncode == 0 and f"you are {site.base}#alice" in called.stdout, called.stderr


def test_a_sign_in_nobody_finishes_ends_after_the_wait(site: Served, tmp_path: Path) -> None:
    done = run("login", site.mcp_url, "--no-browser", "--wait", "1", env=environment(tmp_path))
    assert done.returncode == 1
    assert "nobody finished signing in within 1 s; run the command again" in " ".join(done.stderr.split())
    assert done.stdout.startswith(f"{site.base}/authorize?")
    assert not (tmp_path / "mcp-elicit" / "logins").exists()
