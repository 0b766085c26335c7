"""The gateway signing its clients in with an external identity provider (`MCP_ELICIT_IDP_ISSUER`): `/mcp` verifies
the provider's JWT access tokens (`JwksTokenVerifier`), the pages sign people in with it (`OidcSignIn`), and a
decision is bound to `issuer#sub` on both sides; the local authorization server is not served.

Real parts: the stand-in provider (tests/helpers/identity_provider) served over loopback HTTP with its discovery
document, JWK set, sign-in form and token endpoint; the gateway's app served by uvicorn in front of the SDK peer
over loopback HTTP; the SDK's `Client` with a bearer token; httpx2 as the browser; a real store.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass

import httpx2
import pytest
from starlette.applications import Starlette
from starlette.responses import JSONResponse

from mcp_elicit.gateway.deployment import GatewayDeployment, build_gateway_deployment
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.settings import SettingsError
from mcp_elicit.store import Store, open_store
from mcp_elicit.web.deployment import sign_in_settings
from tests.helpers.deployment import b64
from tests.helpers.gateway import over_http, sdk_over_http, text
from tests.helpers.http_harness import free_port, serving
from tests.helpers.identity_provider import REALM, WEB_CLIENT, WEB_SECRET, OidcProvider, Provider, sign_in_at_provider
from tests.helpers.signed_gateway import bearer
from tests.helpers.web_answers import page_url, submit

pytestmark = pytest.mark.anyio

KEYS = {"MCP_ELICIT_AUTH_KEYS": b64(b"A" * 32), "MCP_ELICIT_STATE_KEYS": b64(b"S" * 32)}


@dataclass
class Federated:
    base: str
    provider: Provider
    deployment: GatewayDeployment
    store: Store
    oidc: OidcProvider

    @property
    def mcp(self) -> str:
        return f"{self.base}/mcp"


def environ(issuer: str) -> dict[str, str]:
    return {
        **KEYS,
        "MCP_ELICIT_IDP_ISSUER": issuer,
        "MCP_ELICIT_IDP_CLIENT_ID": WEB_CLIENT,
        "MCP_ELICIT_IDP_CLIENT_SECRET": WEB_SECRET,
    }


@contextmanager
def federation(store_url: str, **settings: str) -> Iterator[Federated]:
    """The gateway of the SDK peer, its `pid` tool gated and approved on the web, signing people in with the
    provider (with the further `settings`); the provider's access tokens name the gateway's `/mcp` as their
    audience (the default)."""
    idp_port, port = free_port(), free_port()
    base = f"http://127.0.0.1:{port}"
    provider = Provider(f"http://127.0.0.1:{idp_port}{REALM}", audience=f"{base}/mcp")
    provider.add_rsa("k1")
    oidc = OidcProvider(provider)
    store = open_store(store_url)
    try:
        with serving(Starlette(routes=oidc.routes()), idp_port), sdk_over_http() as upstream:
            found = sign_in_settings({**environ(provider.issuer), **settings}, base, identity_provider=True)
            gate = GateTable(tool="pid", fallback="web")
            deployment = build_gateway_deployment(over_http(upstream), store=store, settings=found, gates=[gate])
            with serving(deployment.http_app("127.0.0.1"), port):
                yield Federated(base, provider, deployment, store, oidc)
    finally:
        store.close()


@pytest.fixture
def federated(store_url: str) -> Iterator[Federated]:
    with federation(store_url) as served:
        yield served


async def test_a_gated_call_with_the_providers_token_is_approved_after_sign_in_there_and_completes(
    federated: Federated,
) -> None:
    provider = federated.provider
    async with bearer(federated.mcp, provider.token(sub="alice"), "legacy") as alice:  # declares no elicitation
        url = page_url(await alice.call_tool("pid", {}))
        async with httpx2.AsyncClient(timeout=30) as bob:
            await sign_in_at_provider(bob, f"{federated.base}/signin?next=/", "bob")
            assert (await bob.get(url)).status_code == 403  # the decision is alice's
        async with httpx2.AsyncClient(timeout=30) as browser:
            page = await sign_in_at_provider(browser, url, "alice")
            assert page.status_code == 200 and "Tool: pid" in page.text, page.text
            answered = await submit(browser, url, page.text, "accept")
            assert answered.status_code in (200, 303), answered.text
        ran = await alice.call_tool("pid", {})
    assert text(ran).isdigit()
    [approval] = federated.store.list_decisions(Operator())
    assert approval.status is DecisionStatus.ACCEPTED
    assert (approval.principal_id, approval.client_id) == (f"{provider.issuer}#alice", "desktop-app")


ENTRA_IDS = {"alice": "0b7c-alice-oid", "bob": "51d2-bob-oid"}
"""Entra ID's `oid` of each person: alike in every token, where `sub` is pairwise, one per application."""


async def pairwise_approval(federated: Federated) -> tuple[int, int, str]:
    """alice calls with an access token whose `sub` is the API's pairwise one; bob, then alice sign in on the
    pages, whose ID tokens carry the pages' pairwise `sub`. What bob and alice see of her decision, and what
    her call made again answers ("waits": a tool error naming the page while the decision waits)."""
    provider, oidc = federated.provider, federated.oidc
    oidc.user_claims = {user: {"sub": f"web-{user}", "oid": oid} for user, oid in ENTRA_IDS.items()}
    access_token = provider.token(sub="api-alice", oid=ENTRA_IDS["alice"])
    async with bearer(federated.mcp, access_token, "legacy") as alice:
        url = page_url(await alice.call_tool("pid", {}))
        async with httpx2.AsyncClient(timeout=30) as bob:
            await sign_in_at_provider(bob, f"{federated.base}/signin?next=/", "bob")
            seen_by_bob = (await bob.get(url)).status_code
        async with httpx2.AsyncClient(timeout=30) as browser:
            page = await sign_in_at_provider(browser, url, "alice")
            if page.status_code == 200:
                answered = await submit(browser, url, page.text, "accept")
                assert answered.status_code in (200, 303), answered.text
        again = await alice.call_tool("pid", {})
    return seen_by_bob, page.status_code, "waits" if again.is_error else text(again)


async def test_with_the_subject_claim_oid_a_person_answers_their_decision_despite_pairwise_subs(
    store_url: str,
) -> None:
    with federation(store_url, MCP_ELICIT_IDP_SUBJECT_CLAIM="oid") as federated:
        seen_by_bob, seen_by_alice, ran = await pairwise_approval(federated)
        [approval] = federated.store.list_decisions(Operator())
    assert (seen_by_bob, seen_by_alice) == (403, 200)
    assert ran.isdigit(), ran
    assert approval.status is DecisionStatus.ACCEPTED
    assert approval.principal_id == f"{federated.provider.issuer}#{ENTRA_IDS['alice']}"


async def test_without_the_subject_claim_pairwise_subs_are_two_principals(federated: Federated) -> None:
    seen_by_bob, seen_by_alice, ran = await pairwise_approval(federated)
    [approval] = federated.store.list_decisions(Operator())
    assert (seen_by_bob, seen_by_alice) == (403, 403)  # the pages' alice is web-alice, the decision api-alice's
    assert ran == "waits"
    assert approval.status is DecisionStatus.REQUESTED
    assert approval.principal_id == f"{federated.provider.issuer}#api-alice"


async def test_with_the_subject_claim_a_token_without_it_is_refused_with_a_reason_logged(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, logger="mcp_elicit.web.jwks")
    with federation(store_url, MCP_ELICIT_IDP_SUBJECT_CLAIM="oid") as federated:
        async with httpx2.AsyncClient(base_url=federated.base, timeout=30) as http:
            answer = await http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={
                    "Authorization": f"Bearer {federated.provider.token(sub='api-alice')}",
                    "Accept": "application/json, text/event-stream",
                },
            )
        async with httpx2.AsyncClient(timeout=30) as browser:
            failed = await sign_in_at_provider(browser, f"{federated.base}/signin?next=/", "alice")
    assert answer.status_code == 401
    assert failed.status_code == 400 and "could not be verified" in failed.text
    logged = [r.getMessage() for r in caplog.records if "no subject (claim oid)" in r.getMessage()]
    assert logged == ["access token refused: no subject (claim oid)", "ID token refused: no subject (claim oid)"]


async def test_the_metadata_names_the_provider_and_the_local_authorization_server_is_not_served(
    federated: Federated,
) -> None:
    async with httpx2.AsyncClient(base_url=federated.base, timeout=30) as anonymous:
        refused = await anonymous.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        described = f"{federated.base}/.well-known/oauth-protected-resource/mcp"
        resource = (await anonymous.get(described)).json()
        local = [
            (await anonymous.get("/.well-known/oauth-authorization-server")).status_code,
            (await anonymous.post("/register", json={"redirect_uris": ["http://127.0.0.1/cb"]})).status_code,
            (await anonymous.get("/authorize")).status_code,
        ]
    assert refused.status_code == 401 and f'resource_metadata="{described}"' in refused.headers["www-authenticate"]
    assert resource["resource"] == federated.mcp
    assert [issuer.rstrip("/") for issuer in resource["authorization_servers"]] == [federated.provider.issuer]
    assert local == [404, 404, 404]


async def test_a_token_of_another_issuer_or_audience_is_refused_401(federated: Federated) -> None:
    provider = federated.provider
    impostor = Provider("http://127.0.0.1:9/realms/other", audience=federated.mcp)
    impostor.add_rsa("k1")  # the same key id, another key: the published k1 does not verify it
    tokens = {
        "another audience": provider.token(aud="https://elicit.example/mcp"),
        "another issuer, signed by the provider": provider.token(iss=impostor.issuer),
        "another issuer's key": impostor.token(),
        "no client id": provider.token(client_id=None),
    }
    statuses = {}
    async with httpx2.AsyncClient(base_url=federated.base, timeout=30) as http:
        for why, token in tokens.items():
            answer = await http.post(
                "/mcp",
                json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"},
                headers={"Authorization": f"Bearer {token}", "Accept": "application/json, text/event-stream"},
            )
            statuses[why] = answer.status_code
    assert statuses == dict.fromkeys(tokens, 401)
    async with bearer(federated.mcp, provider.token(), "legacy") as accepted:  # the provider's own still works
        assert "pid" in {tool.name for tool in (await accepted.list_tools()).tools}


def test_missing_partial_and_conflicting_settings_are_refused_naming_each_variable() -> None:
    issuer = "https://idp.example/realms/staff"
    base = "https://gateway.example"
    with pytest.raises(SettingsError) as partial:
        sign_in_settings(
            {**KEYS, "MCP_ELICIT_IDP_CLIENT_ID": WEB_CLIENT, "MCP_ELICIT_IDP_AUDIENCE": base},
            base,
            identity_provider=True,
        )
    assert [problem.split(" ", 1)[0] for problem in partial.value.problems] == [
        "MCP_ELICIT_IDP_AUDIENCE",
        "MCP_ELICIT_IDP_CLIENT_ID",
    ]
    assert all("MCP_ELICIT_IDP_ISSUER" in problem for problem in partial.value.problems)
    with pytest.raises(SettingsError) as missing:
        sign_in_settings(
            {"MCP_ELICIT_IDP_ISSUER": issuer, "MCP_ELICIT_USERS": "alice:wonderland"}, base, identity_provider=True
        )
    said = "\n".join(missing.value.problems)
    for variable in (
        "MCP_ELICIT_USERS and MCP_ELICIT_IDP_ISSUER are both set",
        "MCP_ELICIT_IDP_CLIENT_ID is not set",
        "MCP_ELICIT_IDP_CLIENT_SECRET is not set",
        "MCP_ELICIT_AUTH_KEYS is not set",
        "MCP_ELICIT_STATE_KEYS is not set",
    ):
        assert variable in said, said
    with pytest.raises(SettingsError) as clear:
        sign_in_settings(
            {**environ("http://idp.example/realms/staff"), "MCP_ELICIT_IDP_AUDIENCE": "http://gw.example/mcp"},
            base,
            identity_provider=True,
        )
    assert [problem.split(" ", 1)[0] for problem in clear.value.problems] == [
        "MCP_ELICIT_IDP_ISSUER",
        "MCP_ELICIT_IDP_AUDIENCE",
    ]
    with pytest.raises(SettingsError) as serve:
        sign_in_settings(environ(issuer), base)  # serve's reading: the local authorization server only
    assert serve.value.problems == (
        "MCP_ELICIT_IDP_ISSUER, MCP_ELICIT_IDP_CLIENT_ID, MCP_ELICIT_IDP_CLIENT_SECRET: an external identity provider "
        "signs people in to mcp-elicit gateway only; this command signs them in with its local authorization server "
        "(MCP_ELICIT_USERS): unset them",
    )
    settings = sign_in_settings(environ(issuer), base, identity_provider=True)
    assert settings.users is None and settings.identity_provider is not None
    assert settings.identity_provider.audience == f"{base}/mcp"
    assert WEB_SECRET not in repr(settings)


def test_a_provider_whose_discovery_names_another_issuer_stops_the_gateway_before_it_listens(store_url: str) -> None:
    idp_port = free_port()
    provider = Provider(f"http://127.0.0.1:{idp_port}{REALM}")
    store = open_store(store_url)
    try:
        with serving(Starlette(routes=OidcProvider(provider).routes()), idp_port), sdk_over_http() as upstream:
            settings = sign_in_settings(environ(f"{provider.issuer}/"), "http://127.0.0.1:9", identity_provider=True)
            with pytest.raises(SettingsError, match=r"MCP_ELICIT_IDP_ISSUER .*names the issuer .*trailing slash"):
                build_gateway_deployment(over_http(upstream), store=store, settings=settings)
    finally:
        store.close()


def test_a_discovery_document_whose_jwks_uri_is_plain_http_is_refused_naming_the_issuer(store_url: str) -> None:
    idp_port = free_port()
    provider = Provider(f"http://127.0.0.1:{idp_port}{REALM}")
    oidc = OidcProvider(provider)
    oidc.discovery_answer = JSONResponse(oidc.document(jwks_uri="http://idp.example/certs"))
    store = open_store(store_url)
    try:
        with serving(Starlette(routes=oidc.routes()), idp_port), sdk_over_http() as upstream:
            settings = sign_in_settings(environ(provider.issuer), "http://127.0.0.1:9", identity_provider=True)
            with pytest.raises(SettingsError) as refused:
                build_gateway_deployment(over_http(upstream), store=store, settings=settings)
    finally:
        store.close()
    [said] = refused.value.problems
    assert said.startswith(f"MCP_ELICIT_IDP_ISSUER {provider.issuer}: its discovery document "), said
    assert "names a jwks_uri the gateway cannot use" in said, said
    assert "http://idp.example/certs is plain http outside loopback" in said, said


def test_an_audience_equal_to_the_pages_client_id_is_refused_naming_both_variables() -> None:
    """A client id that is a URL may equal the audience (here the default, the gateway's /mcp)."""
    with pytest.raises(SettingsError) as refused:
        sign_in_settings(
            {**environ("https://idp.example/realms/staff"), "MCP_ELICIT_IDP_CLIENT_ID": "https://gateway.example/mcp"},
            "https://gateway.example",
            identity_provider=True,
        )
    [said] = refused.value.problems
    assert said.startswith("MCP_ELICIT_IDP_AUDIENCE is MCP_ELICIT_IDP_CLIENT_ID"), said


def test_a_subject_claim_that_cannot_name_a_person_or_without_an_issuer_is_refused_naming_the_variable() -> None:
    base = "https://gateway.example"
    refused = {
        "is not a claim name": "o id",
        "is a claim about the token, not about its person": "aud",
    }
    for said, claim in refused.items():
        with pytest.raises(SettingsError) as bad:
            sign_in_settings(
                {**environ("https://idp.example"), "MCP_ELICIT_IDP_SUBJECT_CLAIM": claim}, base, identity_provider=True
            )
        [problem] = bad.value.problems
        assert problem.startswith("MCP_ELICIT_IDP_SUBJECT_CLAIM: ") and said in problem, problem
    with pytest.raises(SettingsError) as alone:
        sign_in_settings({**KEYS, "MCP_ELICIT_IDP_SUBJECT_CLAIM": "oid"}, base, identity_provider=True)
    [problem] = alone.value.problems
    assert problem.startswith("MCP_ELICIT_IDP_SUBJECT_CLAIM is set") and "MCP_ELICIT_IDP_ISSUER" in problem, problem
    found = sign_in_settings(
        {**environ("https://idp.example"), "MCP_ELICIT_IDP_SUBJECT_CLAIM": "oid"}, base, identity_provider=True
    )
    assert found.identity_provider is not None and found.identity_provider.subject_claim == "oid"
    default = sign_in_settings(environ("https://idp.example"), base, identity_provider=True).identity_provider
    assert default is not None and default.subject_claim == "sub"
