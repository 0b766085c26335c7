"""Over real streamable HTTP with bearer tokens: principals come from the verified token, never the client."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.exceptions import MCPError
from mcp_types import CallToolResult, ElicitResult, InputRequiredResult

from mcp_elicit.model import DecisionStatus, Operator, Principal
from mcp_elicit.server import Elicitation, RequestState
from mcp_elicit.store import open_store
from tests.helpers.http_harness import ISSUER, StaticTokenVerifier, auth_settings, free_port, serving
from tests.helpers.person import Person, accept
from tests.helpers.results import text
from tests.helpers.server import Counter, flow_tools

pytestmark = pytest.mark.anyio
ALICE = Principal(f"{ISSUER}#alice", "client-a")


@pytest.fixture
def served(store_url: str, tmp_path: Path) -> Iterator[tuple[Elicitation, str]]:
    port = free_port()
    runtime = Elicitation(open_store(store_url), request_state=RequestState(keys=[b"h" * 32]))
    server = runtime.server("http-server", token_verifier=StaticTokenVerifier(), auth=auth_settings(port))
    flow_tools(runtime, Counter(tmp_path / "effects.json"))
    with serving(server.streamable_http_app(), port) as base:
        yield runtime, f"{base}/mcp"
    runtime.close()


@asynccontextmanager
async def connect(url: str, token: str | None, era: str, person: Person | None = None) -> AsyncIterator[Client]:
    headers = {"Authorization": f"Bearer {token}"} if token else {}
    async with httpx2.AsyncClient(headers=headers, timeout=30) as http:
        transport = streamable_http_client(url, http_client=http)
        async with Client(transport, mode=era, elicitation_callback=person or Person()) as client:
            yield client


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_the_principal_is_the_tokens_subject_and_client(served: tuple[Elicitation, str], era: str) -> None:
    runtime, url = served
    async with connect(url, "token-alice", era, Person([accept(approve=True)])) as alice:
        assert text(await alice.call_tool("approve", {"scope": "prod"})) == "applied prod"
    [decision] = runtime.store.list_decisions(Operator())
    assert decision.principal == ALICE
    assert decision.status is DecisionStatus.ACCEPTED


async def test_unauthenticated_http_is_refused(served: tuple[Elicitation, str]) -> None:
    _, url = served
    async with httpx2.AsyncClient(timeout=10) as http:
        response = await http.post(url, json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert response.status_code == 401


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_a_verified_token_without_a_subject_binds_nothing(served: tuple[Elicitation, str], era: str) -> None:
    """The bundled JWKS verifier refuses such a token itself; this one (any verifier a deployment plugs in) lets
    it through, and the runtime refuses to bind a call to it."""
    runtime, url = served
    async with connect(url, "token-without-subject", era, Person([accept(approve=True)])) as nobody:
        with pytest.raises(MCPError, match="Unauthenticated: the access token has no subject") as raised:
            await nobody.call_tool("approve", {"scope": "prod"})
    assert raised.value.code == -32600
    assert runtime.store.list_decisions(Operator()) == []


@pytest.mark.parametrize("stranger", ["token-bob", "token-alice-other-client"])
async def test_someone_elses_request_state_is_refused(served: tuple[Elicitation, str], stranger: str) -> None:
    runtime, url = served
    async with connect(url, "token-alice", "2026-07-28") as alice:
        round_one = await alice.session.call_tool("approve", {"scope": "prod"}, allow_input_required=True)
    assert isinstance(round_one, InputRequiredResult)
    async with connect(url, stranger, "2026-07-28") as other:
        with pytest.raises(MCPError) as raised:
            await other.session.call_tool(
                "approve",
                {"scope": "prod"},
                input_responses={"approve_scope": ElicitResult(action="accept", content={"approve": True})},
                request_state=round_one.request_state,
                allow_input_required=True,
            )
    assert raised.value.code == -32602
    [decision] = runtime.store.list_decisions(Operator())
    assert decision.status is DecisionStatus.REQUESTED


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_a_second_principal_never_attaches_to_the_firsts_operation(
    served: tuple[Elicitation, str], era: str
) -> None:
    runtime, url = served
    async with connect(url, "token-alice", "2026-07-28") as alice:
        round_one = await alice.session.call_tool("approve", {"scope": "prod"}, allow_input_required=True)
    assert isinstance(round_one, InputRequiredResult)
    bob_person = Person([ElicitResult(action="decline")])
    async with connect(url, "token-bob", era, bob_person) as bob:
        result = await bob.call_tool("approve", {"scope": "prod"})
    assert isinstance(result, CallToolResult) and text(result) == "declined"
    assert len(bob_person.asked) == 1
    by_principal = {d.principal_id: d.status for d in runtime.store.list_decisions(Operator())}
    assert by_principal == {f"{ISSUER}#alice": DecisionStatus.REQUESTED, f"{ISSUER}#bob": DecisionStatus.DECLINED}


async def test_http_without_authorization_is_refused_unless_loopback_development(
    store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    from mcp_elicit.server import IdentityPolicy

    for allow in (False, True):
        port = free_port()
        # Refused: the runtime's own default policy, as a deployment gets it without asking for anything.
        identity = IdentityPolicy(allow_unauthenticated_loopback=True) if allow else None
        runtime = Elicitation(open_store(store_url), request_state=RequestState(keys=[b"u" * 32]), identity=identity)
        server = runtime.server("open-server")
        flow_tools(runtime, Counter(tmp_path / "effects.json"))
        try:
            with serving(server.streamable_http_app(host="127.0.0.1"), port) as base:
                async with connect(f"{base}/mcp", None, "2026-07-28", Person([accept(approve=True)])) as client:
                    if allow:
                        assert text(await client.call_tool("approve", {"scope": "dev"})) == "applied dev"
                    else:
                        with pytest.raises(MCPError, match="Unauthenticated"):
                            await client.call_tool("approve", {"scope": "dev"})
        finally:
            runtime.close()
    assert "unauthenticated HTTP call from 127.0.0.1" in caplog.text
    reopened = open_store(store_url)
    try:
        [decision] = reopened.list_decisions(Operator())
    finally:
        reopened.close()
    assert decision.principal_id == "loopback-dev"
