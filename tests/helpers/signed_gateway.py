"""The gateway signing its clients in, served on loopback: its people, a client of theirs with a bearer token, and
their browser signed in on its pages."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator, Sequence
from contextlib import asynccontextmanager, contextmanager
from dataclasses import dataclass

import httpx2
from mcp import Client
from mcp.client.session import ElicitationFnT
from mcp.client.streamable_http import streamable_http_client

from mcp_elicit.gateway import Upstream
from mcp_elicit.gateway.deployment import GatewayDeployment, build_gateway_deployment
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.store import Store, open_store
from mcp_elicit.web import VaultKeyRing
from mcp_elicit.web.deployment import sign_in_settings
from tests.helpers.deployment import b64
from tests.helpers.http_harness import free_port, serving
from tests.helpers.oauth_client import code_for, pkce, redeem, registered
from tests.helpers.pages_site import VAULT_KEYS, hidden

PASSWORDS = {"alice": "wonderland", "bob": "builder", "carol": "operator"}
ENVIRON = {
    "MCP_ELICIT_USERS": ",".join(f"{name}:{password}" for name, password in PASSWORDS.items()),
    "MCP_ELICIT_AUTH_KEYS": b64(b"A" * 32),
    "MCP_ELICIT_STATE_KEYS": b64(b"S" * 32),
    "MCP_ELICIT_OPERATORS": "carol",
}


@dataclass
class Signed:
    base: str
    deployment: GatewayDeployment
    store: Store

    @property
    def mcp(self) -> str:
        return f"{self.base}/mcp"

    def principal(self, username: str) -> str:
        return f"{self.base}#{username}"

    async def token(self, username: str) -> str:
        """An access token of `username`, through registration, the authorization page and sign-in."""
        async with httpx2.AsyncClient(base_url=self.base, follow_redirects=False, timeout=30) as browser:
            client = await registered(self.base)
            verifier, challenge = pkce()
            code = await code_for(browser, self.base, client, challenge, username=username)
            redeemed = await redeem(self.base, client, code, verifier)
        assert redeemed.status_code == 200, redeemed.text
        token: str = redeemed.json()["access_token"]
        return token


@contextmanager
def signed_in_gateway(
    store_url: str,
    upstream: Upstream | Sequence[Upstream],
    gates: Sequence[GateTable] = (),
    *,
    port: int | None = None,
    environ: dict[str, str] | None = None,
) -> Iterator[Signed]:
    """The signed-in gateway of `upstream` on loopback (at `port`), with the vault's keys, and `environ` as the
    environment it reads an OAuth client's secret from."""
    port = port or free_port()
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    try:
        settings = sign_in_settings(ENVIRON, base)
        deployment = build_gateway_deployment(
            upstream,
            store=store,
            settings=settings,
            gates=gates,
            vault_keys=VaultKeyRing.from_text(VAULT_KEYS),
            environ=environ or {},
        )
        with serving(deployment.http_app("127.0.0.1"), port):
            yield Signed(base, deployment, store)
    finally:
        store.close()


@asynccontextmanager
async def bearer(url: str, token: str, era: str, person: ElicitationFnT | None = None) -> AsyncIterator[Client]:
    """A client of `era` with `token`, answering what it is asked with `person` (none: it declares no
    elicitation)."""
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=era, elicitation_callback=person) as client:
            yield client


@asynccontextmanager
async def signed_in_browser(signed: Signed, username: str) -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(base_url=signed.base, follow_redirects=False, timeout=30) as browser:
        form = await browser.get("/signin", params={"next": "/"})
        credentials = {"username": username, "password": PASSWORDS[username]}
        done = await browser.post("/signin", data={**credentials, "next": "/", "csrf": hidden(form.text, "csrf")})
        assert done.status_code == 303, done.text
        yield browser
