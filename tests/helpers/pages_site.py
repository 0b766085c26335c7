"""A served site of URL-mode pages, with the stand-in provider as its own process, for the page tests.

The site is the reference wiring in small: the local authorization server's sign-in, the decision pages and
the vault on one Starlette app, served on loopback; the provider is `python -m mcp_elicit.reference.provider`.
`mcp_site` serves the same pages beside an MCP server's tools, for the tests that reach them from a call.
"""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from collections.abc import Callable, Iterable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

import httpx2
import pytest
from mcp.server.mcpserver import MCPServer
from starlette.applications import Starlette
from starlette.routing import Route

from mcp_elicit.model import Decision, DecisionOrigin, Principal, new_operation, new_url_decision
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.server import Elicitation, IdentityPolicy, RequestState
from mcp_elicit.store import Store, open_store
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers, Vault, VaultKeyRing
from mcp_elicit.web.flows import ApiKeyEntry, ExternalFlow, OAuthConnect
from mcp_elicit.web.pages import UrlPages
from tests.helpers.http_harness import free_port, serving, stop

PROVIDER_CLIENT = "elicit-pages"
PROVIDER_SECRET = "provider-secret"
VAULT_KEYS = "v1:dmF1bHQta2V5LXZhdWx0LWtleS12YXVsdC1rZXktMDE="
SERVER_NAME = "ticket-desk"


@dataclass
class Site:
    base: str
    store: Store
    elicitation: Elicitation
    vault: Vault
    provider: str


def hidden(html: str, name: str) -> str:
    found = re.search(rf'name="{name}" value="([^"]*)"', html)
    assert found, f"no hidden field {name}"
    return found.group(1).replace("&amp;", "&")


@contextmanager
def provider_process(port: int, redirect_uri: str, *extra: str) -> Iterator[str]:
    """The stand-in third party on `port`, as its own process, with alice (password wonderland) as its user."""
    process = subprocess.Popen(
        [sys.executable, "-m", "mcp_elicit.reference.provider", "--port", str(port), "--client-id", PROVIDER_CLIENT,
         "--redirect-uri", redirect_uri, "--user", "alice:wonderland:Alice Liddell", "--log-level", "warning", *extra],
        env={**os.environ, "MCP_ELICIT_PROVIDER_CLIENT_SECRET": PROVIDER_SECRET},
    )  # fmt: skip
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 20
        while True:
            try:
                httpx2.get(f"{url}/.well-known/oauth-authorization-server", timeout=1)
                break
            except httpx2.HTTPError:
                if process.poll() is not None or time.monotonic() > deadline:
                    raise RuntimeError("the provider did not start") from None
                time.sleep(0.05)
        yield url
    finally:
        stop(process)


def provider_flows(provider: str, *, token_url: str | None = None, profile: bool) -> dict[str, ExternalFlow]:
    """`connect_account`: OAuth at the stand-in `provider`, redeemed at `token_url` (the provider's) and, with
    `profile`, the account's profile read there; `set_api_key`: a key typed on the page."""
    return {
        "connect_account": OAuthConnect(
            vault_name="example-token",
            provider_title="Example",
            authorize_url=f"{provider}/authorize",
            token_url=token_url or f"{provider}/token",
            client_id=PROVIDER_CLIENT,
            client_secret=PROVIDER_SECRET,
            scope="profile",
            profile_url=f"{provider}/api/me" if profile else "",
        ),
        "set_api_key": ApiKeyEntry(vault_name="example-api-key", service_title="Example"),
    }


@contextmanager
def served_site(store_url: str, provider: str, port: int, *, token_url: str | None = None) -> Iterator[Site]:
    """The pages on `port`; the OAuth flow authorizes at `provider` and redeems at `token_url` (the provider's)."""
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    elicitation = Elicitation(store, request_state=RequestState(keys=[b"s" * 32]), public_base_url=base)
    users = LocalUsers.from_text("alice:alice-pw:Alice,bob:bob-pw")
    auth = LocalAuthorizationServer(base, users, store, signing_keys=[b"a" * 32], server_name=SERVER_NAME)
    vault = Vault(store, VaultKeyRing.from_text(VAULT_KEYS))
    pages = UrlPages(
        elicitation=elicitation,
        sign_in=auth,
        vault=vault,
        flows=provider_flows(provider, token_url=token_url, profile=True),
        page_key=b"p" * 32,
        server_title=SERVER_NAME,
        public_base_url=base,
    )
    auth.sign_in_reason = pages.sign_in_reason
    try:
        with serving(Starlette(routes=[*auth.routes(), *pages.routes()]), port):
            yield Site(base, store, elicitation, vault, provider)
    finally:
        store.close()


@dataclass
class McpSite:
    """What `mcp_site` serves: its base URL, store, elicitation runtime and MCP server (for in-process clients)."""

    base: str
    store: Store
    elicitation: Elicitation
    server: MCPServer

    def principal(self, user: str) -> str:
        return f"{self.base}#{user}"


def _no_routes(pages: UrlPages, base: str) -> Iterable[Route]:
    return ()


@contextmanager
def mcp_site(
    store_url: str,
    name: str,
    build: Callable[[Elicitation], None],
    *,
    users: str,
    flows: dict[str, ApiKeyEntry] | None = None,
    more_routes: Callable[[UrlPages, str], Iterable[Route]] = _no_routes,
) -> Iterator[McpSite]:
    """The MCP server `name` with `build`'s tools, local sign-in of `users` and the URL pages (with `flows`, and
    `more_routes` of the pages and the base URL) on one app served on loopback, stateless; the principal of
    an in-process client is alice."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    elicitation = Elicitation(
        store,
        request_state=RequestState(keys=[b"w" * 32]),
        public_base_url=base,
        identity=IdentityPolicy(local_principal=f"{base}#alice"),
    )
    auth = LocalAuthorizationServer(base, LocalUsers.from_text(users), store, signing_keys=[b"a" * 32])
    server = elicitation.server(name, **auth.mcp_server_kwargs(f"{base}/mcp"))
    auth.add_routes(server)
    pages = UrlPages(
        elicitation=elicitation,
        sign_in=auth,
        vault=Vault(store, VaultKeyRing.from_text(VAULT_KEYS)),
        flows=flows or {},
        page_key=b"p" * 32,
        server_title="Test server",
        public_base_url=base,
    )
    for route in [*pages.routes(), *more_routes(pages, base)]:
        server.custom_route(route.path, methods=sorted(route.methods or ()), name=route.name)(route.endpoint)
    build(elicitation)
    try:
        with serving(server.streamable_http_app(stateless_http=True), port):
            yield McpSite(base, store, elicitation, server)
    finally:
        store.close()


def ask(site: Site, user: str, key: str, *, tool: str = "connect_account") -> Decision:
    """A URL decision of `user`'s, asked by `tool`, as the runtime records one."""
    principal = Principal(f"{site.base}#{user}", "client-x")
    now = datetime.now(UTC)
    operation = site.store.create_operation(
        new_operation(principal, method="tools/call", target=tool, request_digest="sha256:" + new_elicitation_id(),
                      now=now, ttl=timedelta(hours=1))
    )  # fmt: skip
    elicitation_id = new_elicitation_id()
    return site.store.create_decision(
        new_url_decision(
            DecisionOrigin(operation_id=operation.operation_id, key=key, principal=principal,
                           origin_method="tools/call", origin_request_digest=operation.request_digest),
            message="Connect your Example account so I can file the ticket",
            url=site.elicitation.decision_url(elicitation_id), now=now, ttl=timedelta(minutes=10),
            elicitation_id=elicitation_id,
        )
    )  # fmt: skip


def sign_in(browser: httpx2.Client, site: Site, user: str, password: str, next_path: str) -> httpx2.Response:
    """Sign in on the site's own /signin page, as a browser sent there by `next_path`; the form page shown."""
    form = browser.get(f"{site.base}/signin", params={"next": next_path})
    assert form.status_code == 200, form.text
    signed = browser.post(
        f"{site.base}/signin",
        data={"username": user, "password": password, "next": next_path, "csrf": hidden(form.text, "csrf")},
    )
    assert signed.status_code == 303 and signed.headers["location"] == next_path, signed.text
    return form


def start(browser: httpx2.Client, site: Site, decision: Decision) -> tuple[httpx2.Response, httpx2.Response]:
    """Open the decision page and press Continue: the page, and the answer to Continue."""
    assert decision.url is not None
    page = browser.get(decision.url)
    assert page.status_code == 200, page.text
    pressed = browser.post(
        f"{site.base}/elicit/{decision.elicitation_id}/continue", data={"csrf": hidden(page.text, "csrf")}
    )
    return page, pressed


def consent_at_provider(browser: httpx2.Client, authorize_url: str, allow: bool) -> str:
    """Alice signs in at the stand-in provider and allows or denies; where the provider sends her back."""
    form = browser.get(authorize_url)
    assert form.status_code == 200
    signed = browser.post(
        authorize_url.split("?")[0],
        data={"username": "alice", "password": "wonderland", "request": hidden(form.text, "request")},
    )
    decided = browser.post(
        authorize_url.split("?")[0] + "/consent",
        data={"request": hidden(signed.text, "request"), "csrf_token": hidden(signed.text, "csrf_token"),
              "action": "allow" if allow else "deny"},
    )  # fmt: skip
    assert decided.status_code == 302
    return decided.headers["location"]


@pytest.fixture(scope="module")
def ports() -> tuple[int, int]:
    """The site's port is known before the provider starts: the provider registers its exact callback."""
    return free_port(), free_port()


@pytest.fixture(scope="module")
def provider(ports: tuple[int, int]) -> Iterator[str]:
    site_port, provider_port = ports
    with provider_process(provider_port, f"http://127.0.0.1:{site_port}/elicit/callback") as url:
        yield url


@pytest.fixture
def site(store_url: str, provider: str, ports: tuple[int, int]) -> Iterator[Site]:
    with served_site(store_url, provider, ports[0]) as served:
        yield served
