"""Who a call is bound to: the verified token's issuer and subject with its client, or the configured
local user on stdio, or (only when a deployment asks for it) the development principal on loopback.

Each call here goes through the SDK's own `AuthContextMiddleware`, the one a served app runs, with the
token a verifier returned as the authenticated user: the policy reads the token exactly as it does in a
server, whichever verifier the deployment plugged in.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from mcp.server.auth.middleware.auth_context import AuthContextMiddleware
from mcp.server.auth.middleware.bearer_auth import AuthenticatedUser
from mcp.server.auth.provider import AccessToken
from mcp.shared.exceptions import MCPError
from mcp_types import INVALID_REQUEST
from starlette.requests import Request
from starlette.types import Message, Receive, Scope, Send

from mcp_elicit.model import Principal
from mcp_elicit.server import IdentityPolicy

pytestmark = pytest.mark.anyio

ISSUER = "https://id.example"


def token(subject: str | None, *, client_id: str = "client-a", claims: dict[str, Any] | None = None) -> AccessToken:
    return AccessToken(token="t", client_id=client_id, scopes=["mcp"], subject=subject, claims=claims)


async def principal_of(policy: IdentityPolicy, *, verified: AccessToken | None = None, host: str | None) -> Principal:
    """The principal `policy` binds an HTTP request from `host` to, with `verified` as its checked token."""
    seen: list[Principal] = []

    async def app(scope: Scope, receive: Receive, send: Send) -> None:
        seen.append(policy.principal_for(Request(scope)))

    scope: Scope = {"type": "http", "method": "POST", "path": "/mcp", "headers": []}
    scope["client"] = (host, 50123) if host is not None else None
    if verified is not None:
        scope["user"] = AuthenticatedUser(verified)

    async def receive() -> Message:
        return {"type": "http.request", "body": b""}

    async def send(message: Message) -> None:
        return None

    await AuthContextMiddleware(app)(scope, receive, send)
    [principal] = seen
    return principal


async def test_the_principal_is_the_issuer_and_subject_with_the_client() -> None:
    verified = token("alice", claims={"iss": ISSUER})
    assert await principal_of(IdentityPolicy(), verified=verified, host="203.0.113.7") == Principal(
        f"{ISSUER}#alice", "client-a"
    )


@pytest.mark.parametrize("claims", [None, {}, {"iss": ""}], ids=["no-claims", "no-issuer", "empty-issuer"])
async def test_without_an_issuer_the_subject_alone_names_the_principal(claims: dict[str, Any] | None) -> None:
    assert await principal_of(IdentityPolicy(), verified=token("alice", claims=claims), host="::1") == Principal(
        "alice", "client-a"
    )


async def test_a_token_without_a_client_id_is_bound_to_the_unknown_client() -> None:
    verified = token("alice", client_id="", claims={"iss": ISSUER})
    assert await principal_of(IdentityPolicy(), verified=verified, host="203.0.113.7") == Principal(
        f"{ISSUER}#alice", "unknown-client"
    )


@pytest.mark.parametrize("subject", [None, ""], ids=["no-subject", "empty-subject"])
async def test_a_verified_token_without_a_subject_is_refused(subject: str | None) -> None:
    """The bundled JWKS verifier never returns such a token; any other verifier may, and then nothing may be
    bound to it: every subject-less token would share one principal's records."""
    policy = IdentityPolicy(allow_unauthenticated_loopback=True)
    with pytest.raises(MCPError) as raised:
        await principal_of(policy, verified=token(subject, claims={"iss": ISSUER}), host="127.0.0.1")
    assert raised.value.error.code == INVALID_REQUEST
    assert raised.value.error.message == (
        "Unauthenticated: the access token has no subject; cannot bind elicitation state to a user"
    )


async def test_a_verified_token_outranks_the_loopback_development_principal() -> None:
    policy = IdentityPolicy(allow_unauthenticated_loopback=True)
    assert await principal_of(policy, verified=token("alice"), host="127.0.0.1") == Principal("alice", "client-a")


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost", "203.0.113.7", None])
async def test_by_default_unauthenticated_http_is_refused_even_from_loopback(host: str | None) -> None:
    with pytest.raises(MCPError) as raised:
        await principal_of(IdentityPolicy(), host=host)
    assert raised.value.error.code == INVALID_REQUEST
    assert raised.value.error.message == (
        "Unauthenticated: elicitation over HTTP needs MCP authorization (a verified access token)"
    )


@pytest.mark.parametrize("host", ["127.0.0.1", "::1", "localhost"])
async def test_loopback_development_binds_every_call_to_one_development_principal(host: str) -> None:
    policy = IdentityPolicy(allow_unauthenticated_loopback=True)
    assert await principal_of(policy, host=host) == Principal("loopback-dev", "loopback")
    named = IdentityPolicy(allow_unauthenticated_loopback=True, development_principal="dev-ada")
    assert await principal_of(named, host=host) == Principal("dev-ada", "loopback")


@pytest.mark.parametrize("host", ["203.0.113.7", "127.0.0.2", "0.0.0.0", None])
async def test_loopback_development_refuses_any_other_host(host: str | None) -> None:
    with pytest.raises(MCPError, match="needs MCP authorization"):
        await principal_of(IdentityPolicy(allow_unauthenticated_loopback=True), host=host)


def test_a_request_that_carries_no_client_address_is_refused() -> None:
    """A transport's request object need not say who connected; without a token such a call is refused."""
    with pytest.raises(MCPError, match="needs MCP authorization"):
        IdentityPolicy(allow_unauthenticated_loopback=True).principal_for(object())


async def test_each_loopback_host_is_warned_about_once(caplog: pytest.LogCaptureFixture) -> None:
    policy = IdentityPolicy(allow_unauthenticated_loopback=True)
    caplog.set_level(logging.DEBUG, logger="mcp_elicit.server.identity")
    for host in ("127.0.0.1", "127.0.0.1", "::1"):
        await principal_of(policy, host=host)
    assert [(record.levelno, record.getMessage()) for record in caplog.records] == [
        (logging.WARNING, "unauthenticated HTTP call from 127.0.0.1 bound to the development principal 'loopback-dev'"),
        (logging.DEBUG, "unauthenticated HTTP call from 127.0.0.1 bound to the development principal 'loopback-dev'"),
        (logging.WARNING, "unauthenticated HTTP call from ::1 bound to the development principal 'loopback-dev'"),
    ]


def test_stdio_calls_are_the_configured_local_user() -> None:
    assert IdentityPolicy().principal_for(None) == Principal("local-user", "stdio")
    assert IdentityPolicy(local_principal="ada").principal_for(None) == Principal("ada", "stdio")
