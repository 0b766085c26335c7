"""The demo's own URL-mode deployment: the reference server over HTTP and the stand-in provider, on loopback.

URL mode needs the whole setting at once (an authorization server to sign the person in, the decision
pages, the vault, a third party to connect), and a newcomer should not configure any of it. So the demo
starts the very processes an operator runs, `mcp-elicit serve --transport http` and
`python -m mcp_elicit.reference.provider`, on free loopback ports, with keys generated for this run and a
throwaway user whose random password is printed for the person's browser. Keys already set in the
environment (`MCP_ELICIT_AUTH_KEYS`, `_STATE_KEYS`, `_VAULT_KEYS`, or their `_FILE` variants) are used
instead, so that a persistent store's vault entries stay readable with the operator's own keys.

The demo signs in its own throwaway user: `sign_in` registers an OAuth client, runs authorization code
with PKCE and posts the sign-in form over HTTP, exactly what an MCP client and a person at a browser do,
and returns the MCP access token. Nothing behind the HTTP surface is called.

Every process started is stopped when the context ends, Ctrl-C included; their output goes to log files
in the run's directory, and every failure names them. The pieces (`start_logged`, `wait_listening`,
`stop_all`, `sign_in_as`) serve any deployment of these processes, the test suite's balanced one too.
"""

from __future__ import annotations

import base64
import hashlib
import os
import secrets
import socket
import ssl
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Final
from urllib.parse import parse_qs, urljoin, urlsplit

import anyio
import httpx2

from mcp_elicit.reference.page_forms import read_page
from mcp_elicit.settings import Settings, SettingsError, variable

SIGN_IN_TRIES: Final = 5
"""How often a scripted sign-in that is held back (HTTP 429) tries again."""
SIGN_IN_WAIT_CAP: Final = 5.0
"""The longest wait, in seconds, a scripted sign-in accepts before trying again."""

LOOPBACK: Final = "127.0.0.1"
START_TIMEOUT: Final = 30.0
STOP_TIMEOUT: Final = 5.0
PROVIDER_CLIENT_ID: Final = "mcp-elicit-demo"
KEY_SETTINGS: Final = ("auth_keys", "state_keys", "vault_keys")
DEMO_CLIENT_REDIRECT: Final = "http://127.0.0.1/mcp-elicit-demo/callback"
"""Registered for the demo's own OAuth client and never served: the code is read from the redirect itself."""


class StackError(RuntimeError):
    """The deployment could not start or sign in; the message names the log to read."""


@dataclass(frozen=True, slots=True)
class Credentials:
    username: str
    password: str
    display_name: str


@dataclass(frozen=True, slots=True)
class DemoStack:
    server_url: str
    provider_url: str
    store_url: str
    workspace: Path
    user: Credentials
    """Signs in to the reference server: the MCP principal, and the person at the browser."""
    provider_user: Credentials
    """Signs in at the stand-in provider when the account is connected."""
    server_log: Path
    provider_log: Path

    @property
    def mcp_url(self) -> str:
        return f"{self.server_url}/mcp"

    @property
    def principal_id(self) -> str:
        """How the reference server names the demo user in every record (issuer `#` username)."""
        return f"{self.server_url}#{self.user.username}"

    @property
    def logs(self) -> tuple[Path, Path]:
        return (self.server_log, self.provider_log)


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind((LOOPBACK, 0))
        port: int = probe.getsockname()[1]
        return port


def fresh_keys(environ: Mapping[str, str]) -> dict[str, str]:
    """The key rings the environment does not set (itself or through a `_FILE`): 32 random bytes each, for this
    run only. The ones it sets reach the server as they are."""
    try:
        configured = Settings.read(environ, only=KEY_SETTINGS)
    except SettingsError as error:
        raise StackError(
            f"the demo serves with the key rings this environment sets, and they cannot be used: {error}"
        ) from None
    generated = {
        "auth_keys": _b64(secrets.token_bytes(32)),
        "state_keys": _b64(secrets.token_bytes(32)),
        "vault_keys": "demo:" + _b64(secrets.token_bytes(32)),
    }
    return {variable(name): value for name, value in generated.items() if getattr(configured, name) is None}


@contextmanager
def running_stack(
    run_dir: Path, *, store_url: str, workspace: Path, environ: Mapping[str, str] | None = None
) -> Iterator[DemoStack]:
    """Start the provider and the reference server, wait until both listen, stop both on the way out."""
    environ = dict(os.environ if environ is None else environ)
    run_dir.mkdir(parents=True, exist_ok=True)
    workspace.mkdir(parents=True, exist_ok=True)
    server_port, provider_port = free_port(), free_port()
    server_url, provider_url = f"http://{LOOPBACK}:{server_port}", f"http://{LOOPBACK}:{provider_port}"
    user = Credentials(f"demo-{secrets.token_hex(3)}", secrets.token_urlsafe(12), "Demo User")
    provider_user = Credentials("ada", secrets.token_urlsafe(12), "Ada Lovelace")
    provider_secret = secrets.token_urlsafe(24)
    webhook_secret = secrets.token_urlsafe(24)
    clashing = {f"{variable(name)}_FILE" for name in ("users", "provider_client_secret", "provider_webhook_secret")}
    env = {
        **{name: value for name, value in environ.items() if name not in clashing},
        **fresh_keys(environ),
        "MCP_ELICIT_STORE": store_url,
        "MCP_ELICIT_USERS": f"{user.username}:{user.password}:{user.display_name}",
        "MCP_ELICIT_PROVIDER_URL": provider_url,
        "MCP_ELICIT_PROVIDER_CLIENT_ID": PROVIDER_CLIENT_ID,
        "MCP_ELICIT_PROVIDER_CLIENT_SECRET": provider_secret,
        "MCP_ELICIT_PROVIDER_WEBHOOK_SECRET": webhook_secret,
        "PYTHONUNBUFFERED": "1",
    }
    stack = DemoStack(
        server_url=server_url,
        provider_url=provider_url,
        store_url=store_url,
        workspace=workspace,
        user=user,
        provider_user=provider_user,
        server_log=run_dir / "server.log",
        provider_log=run_dir / "provider.log",
    )
    provider_command = [
        sys.executable, "-m", "mcp_elicit.reference.provider", "--host", LOOPBACK, "--port", str(provider_port),
        "--client-id", PROVIDER_CLIENT_ID, "--client-name", "mcp-elicit reference server",
        "--redirect-uri", f"{server_url}/elicit/callback",
        "--user", f"{provider_user.username}:{provider_user.password}:{provider_user.display_name}",
        "--webhook-url", f"{server_url}/elicit/hooks/pay_invoice", "--duplicates", "2", "--jitter", "0.3",
        "--log-level", "warning",
    ]  # fmt: skip
    server_command = [
        sys.executable, "-m", "mcp_elicit", "serve", "--transport", "http", "--host", LOOPBACK,
        "--port", str(server_port), "--public-url", server_url, "--workspace", str(workspace),
    ]  # fmt: skip
    with ExitStack() as cleanup:
        started: list[subprocess.Popen[bytes]] = []
        cleanup.callback(stop_all, started)
        for command, log, port in (
            (provider_command, stack.provider_log, provider_port),
            (server_command, stack.server_log, server_port),
        ):
            process = start_logged(cleanup, command, env, log)
            started.append(process)
            wait_listening(port, process, log)
        yield stack


def start_logged(
    cleanup: ExitStack, command: Sequence[str], env: Mapping[str, str], log: Path
) -> subprocess.Popen[bytes]:
    """Start `command` with no input and both its output streams to `log`, a file `cleanup` closes."""
    sink = cleanup.enter_context(log.open("wb"))
    return subprocess.Popen(command, env=env, stdin=subprocess.DEVNULL, stdout=sink, stderr=sink)  # noqa: S603


async def sign_in(stack: DemoStack) -> str:
    """The MCP access token of the demo user, obtained the way an MCP client and a person obtain one."""
    return await sign_in_as(stack.user, stack.server_url, stack.mcp_url, log=stack.server_log)


async def sign_in_as(
    user: Credentials,
    base: str,
    resource: str,
    *,
    log: Path,
    verify: ssl.SSLContext | bool = True,
    client_name: str = "mcp-elicit demo",
) -> str:
    """The MCP access token of `user` at the server `base` for `resource` (its MCP endpoint): the client
    registered as `client_name`, authorization code with PKCE, the sign-in form, the token request, over
    HTTP (TLS checked with `verify`). A step that fails raises `StackError` naming `log`."""
    async with httpx2.AsyncClient(timeout=30, follow_redirects=False, verify=verify) as browser:
        try:
            metadata = (await browser.get(f"{base}/.well-known/oauth-authorization-server")).json()
            registered = await browser.post(
                metadata["registration_endpoint"],
                json={"redirect_uris": [DEMO_CLIENT_REDIRECT], "client_name": client_name},
            )
            _expect(registered, 201, "client registration", log)
            client = registered.json()
            verifier = secrets.token_urlsafe(48)
            challenge = _b64(hashlib.sha256(verifier.encode()).digest()).rstrip("=")
            state = secrets.token_urlsafe(16)
            authorize = await browser.get(
                metadata["authorization_endpoint"],
                params={
                    "response_type": "code",
                    "client_id": client["client_id"],
                    "redirect_uri": DEMO_CLIENT_REDIRECT,
                    "code_challenge": challenge,
                    "code_challenge_method": "S256",
                    "state": state,
                    "scope": "mcp",
                    "resource": resource,
                },
            )
            _expect(authorize, 302, "authorization", log)
            page_url = urljoin(base, authorize.headers["location"])
            page = await browser.get(page_url)
            form = read_page(page.text).form("/signin")
            if form is None:
                raise StackError(f"the sign-in page has no sign-in form (status {page.status_code}); {_see(log)}")
            signed = await browser.post(
                urljoin(page_url, form.action),
                data={**form.hidden, "username": user.username, "password": user.password},
            )
            for _ in range(SIGN_IN_TRIES):
                if signed.status_code != 429 or (form := read_page(signed.text).form("/signin")) is None:
                    break
                # Held back while other sign-ins of this account were under way: try again when told, as a person would.
                await anyio.sleep(min(float(signed.headers.get("retry-after", "1")), SIGN_IN_WAIT_CAP))
                signed = await browser.post(
                    urljoin(page_url, form.action),
                    data={**form.hidden, "username": user.username, "password": user.password},
                )
            _expect(signed, 302, "sign-in", log)
            answer = {k: v[0] for k, v in parse_qs(urlsplit(signed.headers["location"]).query).items()}
            if answer.get("state") != state or "code" not in answer:
                raise StackError(f"the sign-in did not return a code for this request; {_see(log)}")
            token = await browser.post(
                metadata["token_endpoint"],
                data={
                    "grant_type": "authorization_code",
                    "code": answer["code"],
                    "redirect_uri": DEMO_CLIENT_REDIRECT,
                    "client_id": client["client_id"],
                    "client_secret": client["client_secret"],
                    "code_verifier": verifier,
                    "resource": resource,
                },
            )
            _expect(token, 200, "token request", log)
            access_token: str = token.json()["access_token"]
        except (httpx2.HTTPError, KeyError, ValueError) as error:
            raise StackError(
                f"signing in {user.username} failed ({type(error).__name__}: {error}); {_see(log)}"
            ) from None
    return access_token


def wait_listening(port: int, process: subprocess.Popen[bytes], log: Path, *, timeout: float = START_TIMEOUT) -> None:
    """Until `port` on loopback takes connections; `StackError` naming `log` if `process` exits first or
    `timeout` seconds pass."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as probe:
            if probe.connect_ex((LOOPBACK, port)) == 0:
                return
        code = process.poll()
        if code is not None:
            raise StackError(
                f"{_name(process)} exited with status {code} before listening: {last_line(log)}; log {log}"
            )
        if time.monotonic() > deadline:
            raise StackError(f"{_name(process)} did not listen on port {port} within {timeout:.0f} s; log {log}")
        time.sleep(0.05)


def stop_all(started: Sequence[subprocess.Popen[bytes]]) -> None:
    """Ask every process to stop, then kill what is still running; never leave one behind."""
    for process in reversed(started):
        if process.poll() is None:
            process.terminate()
    deadline = time.monotonic() + STOP_TIMEOUT
    for process in reversed(started):
        try:
            process.wait(timeout=max(0.0, deadline - time.monotonic()))
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


def last_line(log: Path) -> str:
    """The last non-empty line a process wrote, which is usually its reason for stopping."""
    try:
        lines = [line.strip() for line in log.read_text(errors="replace").splitlines() if line.strip()]
    except OSError:
        return "(no log)"
    return lines[-1] if lines else "(nothing logged)"


def _expect(response: httpx2.Response, status: int, step: str, log: Path) -> None:
    if response.status_code != status:
        raise StackError(f"{step} answered {response.status_code} instead of {status}; {_see(log)}")


def _see(log: Path) -> str:
    return f"see {log}"


def _name(process: subprocess.Popen[bytes]) -> str:
    args = [str(arg) for arg in process.args] if isinstance(process.args, list) else [str(process.args)]
    if "mcp_elicit.reference.provider" in args:
        return "the provider"
    return "the reference server" if "mcp_elicit" in args else Path(args[0]).name


def _b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()
