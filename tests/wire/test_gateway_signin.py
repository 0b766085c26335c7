"""The gateway signing its clients in (`mcp_elicit.gateway.deployment`): the local authorization server in front
of its `/mcp`, its questions bound to the signed-in principal, the decision pages and the inbox, and upstream
sessions kept apart per principal.

Real parts: the gateway's app served on loopback by uvicorn, the SDK's OAuth client and `Client` over streamable
HTTP, httpx2 as the browser on the real sign-in and decision pages, the SDK peer (or a server of this module)
served over loopback HTTP as the upstream, a real store.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path

import anyio
import httpx2
import pytest
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.auth import OAuthClientMetadata
from mcp.shared.exceptions import MCPError
from mcp_types import ElicitResult, InputRequiredResult, InputResponses
from pydantic import AnyUrl

from mcp_elicit.cli.login import SignInStorage
from mcp_elicit.gateway import Gateway, Upstream
from mcp_elicit.gateway.deployment import build_gateway_deployment
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.server import Fallback
from mcp_elicit.store import open_store
from mcp_elicit.web import LocalAuthorizationServer
from mcp_elicit.web.deployment import sign_in_settings
from tests.helpers.gateway import (
    SDK_SERVER,
    Person,
    over_http,
    refusing_calls,
    sdk_over_http,
    stdio,
    text,
    until,
)
from tests.helpers.http_harness import free_port, serving
from tests.helpers.oauth_client import CALLBACK, SigningInPerson
from tests.helpers.results import unwrap
from tests.helpers.signed_gateway import ENVIRON, Signed, bearer, signed_in_browser, signed_in_gateway
from tests.helpers.web_answers import page_url, submit

pytestmark = pytest.mark.anyio

SEATS = {"city": "Oslo"}


@pytest.fixture
def signed(store_url: str) -> Iterator[Signed]:
    with sdk_over_http() as url, signed_in_gateway(store_url, over_http(url)) as gateway:
        yield gateway


async def test_a_client_signs_in_with_the_sdks_oauth_and_its_question_is_bound_to_its_person(signed: Signed) -> None:
    async with httpx2.AsyncClient(base_url=signed.base, follow_redirects=False, timeout=30) as browser:
        person, storage = SigningInPerson(browser), SignInStorage()
        oauth = OAuthClientProvider(
            server_url=signed.mcp,
            client_metadata=OAuthClientMetadata(client_name="Host", redirect_uris=[AnyUrl(CALLBACK)]),
            storage=storage,
            redirect_handler=person.redirect,
            callback_handler=person.callback,
        )
        async with httpx2.AsyncClient(auth=oauth, timeout=30) as http:
            transport = streamable_http_client(signed.mcp, http_client=http)
            async with Client(transport, mode="legacy", elicitation_callback=Person({"seats": 2})) as client:
                assert text(await client.call_tool("book", SEATS)) == "booked 2 to Oslo"
    assert storage.client_info is not None
    [decision] = signed.store.list_decisions(Operator())
    assert (decision.principal_id, decision.client_id) == (signed.principal("alice"), storage.client_info.client_id)
    assert decision.status is DecisionStatus.ACCEPTED


async def test_an_unauthenticated_call_is_refused_naming_the_protected_resource_metadata(signed: Signed) -> None:
    async with httpx2.AsyncClient(base_url=signed.base, timeout=30) as anonymous:
        refused = await anonymous.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        described = f"{signed.base}/.well-known/oauth-protected-resource/mcp"
        resource = (await anonymous.get(described)).json()
        authorization = (await anonymous.get("/.well-known/oauth-authorization-server")).json()
        health = [(await anonymous.get(path)).status_code for path in ("/healthz", "/readyz")]
    assert refused.status_code == 401
    assert f'resource_metadata="{described}"' in refused.headers["www-authenticate"]
    assert resource["resource"] == signed.mcp
    assert [issuer.rstrip("/") for issuer in resource["authorization_servers"]] == [signed.base]
    assert authorization["issuer"].rstrip("/") == signed.base
    assert authorization["grant_types_supported"] == ["authorization_code"]  # what is served, not the SDK's list
    assert health == [200, 200]


async def test_a_round_issued_to_one_principal_is_refused_to_another(signed: Signed) -> None:
    alice_token, bob_token = await signed.token("alice"), await signed.token("bob")
    async with bearer(signed.mcp, alice_token, "2026-07-28", Person()) as alice:
        first = await alice.session.call_tool("book", SEATS, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        assert first.input_requests is not None
        [key] = first.input_requests
        answer: InputResponses = {key: ElicitResult(action="accept", content={"seats": 2})}
        async with bearer(signed.mcp, bob_token, "2026-07-28", Person()) as bob:
            with pytest.raises((MCPError, BaseExceptionGroup)) as stolen:
                await bob.call_tool("book", SEATS, input_responses=answer, request_state=first.request_state)
        refused = unwrap(stolen.value)
        assert isinstance(refused, MCPError) and refused.code == -32602
        [decision] = signed.store.list_decisions(Operator())
        assert decision.principal_id == signed.principal("alice")
        assert decision.status is DecisionStatus.REQUESTED  # bob's answer was never recorded
        done = await alice.call_tool("book", SEATS, input_responses=answer, request_state=first.request_state)
    assert text(done) == "booked 2 to Oslo"


async def test_a_client_that_cannot_be_asked_gets_the_page_and_operators_see_it_in_the_inbox(signed: Signed) -> None:
    token = await signed.token("alice")
    async with bearer(signed.mcp, token, "legacy") as alice:  # declares no elicitation
        url = page_url(await alice.call_tool("book", SEATS))
        async with (
            signed_in_browser(signed, "carol") as carol,
            signed_in_browser(signed, "bob") as bob,
            signed_in_browser(signed, "alice") as person,
        ):
            inbox = await carol.get("/inbox")
            assert inbox.status_code == 200 and "How many seats to Oslo?" in inbox.text
            assert (await bob.get(url)).status_code == 403  # the page is alice's question
            page = await person.get(url)
            assert page.status_code == 200 and "How many seats to Oslo?" in page.text
            answered = await submit(person, url, page.text, "accept", seats="2")
            assert answered.status_code in (200, 303), answered.text
        again = await alice.call_tool("book", SEATS)
    assert text(again) == "booked 2 to Oslo"
    [decision] = signed.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.ACCEPTED and decision.principal_id == signed.principal("alice")


async def test_a_gate_whose_fallback_is_the_web_is_approved_on_its_page_and_then_forwarded_once(
    store_url: str,
) -> None:
    gate = GateTable(tool="pid", fallback="web")
    with sdk_over_http() as upstream, signed_in_gateway(store_url, over_http(upstream), [gate]) as signed:
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:  # declares no elicitation
            refused = await alice.call_tool("pid", {})
            url = page_url(refused)
            async with signed_in_browser(signed, "alice") as person:
                page = await person.get(url)
                assert page.status_code == 200 and "Tool: pid" in page.text
                answered = await submit(person, url, page.text, "accept")
                assert answered.status_code in (200, 303), answered.text
            ran = await alice.call_tool("pid", {})
        [approval] = signed.store.list_decisions(Operator())
    assert text(ran).isdigit()
    assert approval.status is DecisionStatus.ACCEPTED and approval.principal_id == signed.principal("alice")


held = MCPServer("held-upstream")


@held.tool()
async def wait(marker: str, release: str) -> str:
    """Say so in `marker`, then hold the call until `release` exists."""
    Path(marker).write_text("waiting")
    while not Path(release).exists():
        await anyio.sleep(0.02)
    return "released"


@held.tool()
async def whoami(ctx: Context) -> str:
    return json.dumps(ctx.request_context.meta or {})


async def test_two_principals_never_share_an_upstream_session(store_url: str, tmp_path: Path) -> None:
    """A 2026-07-28 client cannot be asked on its call, so alice's and bob's calls have the same holder and could
    share a session with a 2026-07-28 upstream; the principal keeps them apart."""
    marker, release = tmp_path / "marker", tmp_path / "release"
    with serving(held.streamable_http_app(host="127.0.0.1"), free_port()) as upstream_base:
        upstream = Upstream("held", url=f"{upstream_base}/mcp", era="2026-07-28", sessions=2)
        with signed_in_gateway(store_url, upstream) as signed:
            alice_token, bob_token = await signed.token("alice"), await signed.token("bob")
            async with (
                bearer(signed.mcp, alice_token, "2026-07-28") as alice,
                bearer(signed.mcp, bob_token, "2026-07-28") as bob,
                anyio.create_task_group() as tasks,
            ):
                held_call = {"marker": str(marker), "release": str(release)}
                tasks.start_soon(alice.call_tool, "wait", held_call)
                await until(lambda: marker.exists())
                pool = signed.deployment.gateway.pool
                [holding] = [lane for lane in pool.lanes if lane.calls]
                assert holding.principal == signed.principal("alice")
                await bob.call_tool("whoami", {})
                assert len(pool.lanes) == 2  # bob's call opened a session of its own rather than ride alice's
                release.write_text("go")


@held.tool()
async def session(ctx: Context) -> str:
    """The `Mcp-Session-Id` of the session the call came on."""
    request = ctx.request_context.request
    assert request is not None
    return str(request.headers.get("mcp-session-id"))


async def sessions_of_each(signed: Signed, tool: str) -> tuple[str, str, str]:
    """What `tool` says of the session each call reached: alice's, then bob's once hers is idle, then alice's again;
    and that both still see the upstream's tools."""
    alice_token, bob_token = await signed.token("alice"), await signed.token("bob")
    async with bearer(signed.mcp, alice_token, "legacy") as alice, bearer(signed.mcp, bob_token, "legacy") as bob:
        first = text(await alice.call_tool(tool, {}))
        assert tool in {listed.name for listed in (await bob.list_tools()).tools}
        second = text(await bob.call_tool(tool, {}))
        again = text(await alice.call_tool(tool, {}))
        assert tool in {listed.name for listed in (await alice.list_tools()).tools}
    return first, second, again


@pytest.mark.parametrize("sessions", [1, 2])
async def test_a_handshake_upstream_without_a_credential_gives_each_principal_sessions_of_their_own(
    store_url: str, sessions: int
) -> None:
    """Whatever a stdio upstream keeps per session (its process) never passes from alice to bob, even once alice's
    calls are over; with a second session alice keeps hers, with one the idle one is closed for the other person."""
    with signed_in_gateway(store_url, stdio(SDK_SERVER, sessions=sessions)) as signed:
        alices, bobs, alices_again = await sessions_of_each(signed, "pid")
    assert bobs != alices
    assert alices_again == alices if sessions == 2 else alices_again not in (alices, bobs)


async def test_an_http_upstream_without_a_credential_gives_each_principal_a_session_of_their_own(
    store_url: str,
) -> None:
    with serving(held.streamable_http_app(host="127.0.0.1"), free_port()) as upstream_base:
        upstream = Upstream("held", url=f"{upstream_base}/mcp", era="legacy")
        with signed_in_gateway(store_url, upstream) as signed:
            alices, bobs, alices_again = await sessions_of_each(signed, "session")
    assert "None" not in (alices, bobs)
    assert bobs != alices and alices_again == alices


def test_what_a_signed_in_gateway_is_built_from_is_checked_when_it_is_built(store_url: str) -> None:
    upstream = Upstream("sdk", url="http://127.0.0.1:9/mcp")
    store = open_store(store_url)
    try:
        deployment = build_gateway_deployment(
            upstream, store=store, settings=sign_in_settings(ENVIRON, "http://127.0.0.1:9")
        )
        questions = deployment.gateway.questions
        assert questions is not None
        with pytest.raises(ValueError, match="takes the store, request state, timing and identity from it"):
            Gateway(upstream, elicitation=questions.elicitation, store=store)
        with pytest.raises(ValueError, match="the web fallback needs a store"):
            Gateway(upstream, fallback=Fallback.WEB)
        assert isinstance(deployment.auth, LocalAuthorizationServer)
        with pytest.raises(ValueError, match="needs resource_server_url=, the URL of its MCP endpoint"):
            deployment.auth.http_app(deployment.gateway.server)
    finally:
        store.close()


async def test_a_refusal_by_an_upstream_without_a_credential_names_no_credential_to_connect(store_url: str) -> None:
    """Behind sign-in a handshake session is its person's, but an upstream without a credential has nothing of
    theirs to connect: its 401 says the call did not run, not that their credential was refused."""
    with serving(refusing_calls(held.streamable_http_app(host="127.0.0.1")), free_port()) as upstream_base:
        upstream = Upstream("held", url=f"{upstream_base}/mcp", era="legacy")
        with signed_in_gateway(store_url, upstream) as signed:
            async with bearer(signed.mcp, await signed.token("alice"), "legacy") as alice:
                with pytest.raises(MCPError) as refused:
                    await alice.call_tool("session", {})
    said = refused.value.error.message
    assert said.startswith("upstream 'held' refused tools/call 'session' (HTTP 401)"), said
    assert "did not run" in said and "credential of" not in said and "connect" not in said, said
