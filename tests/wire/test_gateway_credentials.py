"""Upstream credentials per person (`[upstream.credential]`): each signed-in person connects the upstream once on the
gateway's own page, their key is kept in the vault and sent by the gateway with their sessions only, and a call
before that is a URL-mode "connect first" on whatever the client's era offers.

Real parts: the SDK's `MCPServer` served over streamable HTTP on loopback as the upstream, behind a check that
refuses (401) any request without a key it knows and noting which key each of its sessions carried; the signed-in
gateway served on loopback; the SDK's `Client` of either era with a bearer token; httpx2 as each person's browser on
the gateway's sign-in and decision pages; the stand-in OAuth provider served in process; a real store and vault.
"""

from __future__ import annotations

import hashlib
import json
import logging
import math
import threading
from collections.abc import AsyncIterator, Callable, Coroutine
from contextlib import asynccontextmanager
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any, cast

import anyio
import anyio.abc
import httpx2
import pytest
from mcp import Client
from mcp.client.session import ClientRequestContext
from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import MCPError
from mcp_types import (
    ElicitRequestFormParams,
    ElicitRequestParams,
    ElicitRequestURLParams,
    ElicitResult,
    InputRequiredResult,
    RequestParamsMeta,
)
from starlette.responses import PlainTextResponse
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from mcp_elicit.approvals import APPROVAL_KEY
from mcp_elicit.gateway import Gateway, Upstream
from mcp_elicit.gateway.credentials import Credential, vault_name
from mcp_elicit.gateway.deployment import build_gateway_deployment
from mcp_elicit.gateway.gates import GateTable
from mcp_elicit.model import DecisionStatus, Operator, Principal
from mcp_elicit.reference.provider import ProviderClient, ProviderConfig, ProviderUser, provider_app
from mcp_elicit.server.runtime import IDEMPOTENCY_META_KEY
from mcp_elicit.store import open_store
from mcp_elicit.web import Vault, VaultKeyRing
from mcp_elicit.web.deployment import sign_in_settings
from tests.helpers.gateway import SDK_SERVER, Person, over_http, read_body, sdk_over_http, stdio, text, until
from tests.helpers.http_harness import free_port, serving
from tests.helpers.pages_site import VAULT_KEYS, hidden
from tests.helpers.results import error_text
from tests.helpers.signed_gateway import ENVIRON, Signed, bearer, signed_in_browser, signed_in_gateway
from tests.helpers.web_answers import page_url, submit

pytestmark = pytest.mark.anyio

ALICE, BOB = "ak-alice-5b1f0c", "ak-bob-93de27"
KEYS = {ALICE: "alice", BOB: "bob"}
"""The upstream's accounts, by the API key each person types on the gateway's page."""


class Accounts:
    """The upstream: `whoami` says whose key its request carries (in `header`, after `scheme`); every request without
    a key it knows (or one it `revoked` since) is refused with 401 before the MCP server sees it, and each MCP
    session's keys are noted."""

    def __init__(self, header: str = "authorization", scheme: str = "Bearer ") -> None:
        self.server = MCPServer("accounts")
        self.header, self.scheme = header, scheme
        self.keys_by_session: dict[str, set[str]] = {}
        self.refused = 0
        self.revoked: set[str] = set()
        """Keys it no longer takes, on sessions already up too (an expired token, a revoked key)."""

        @self.server.tool()
        async def whoami(ctx: Context) -> str:
            """Whose account the call acts for."""
            request = ctx.request_context.request
            assert request is not None
            return KEYS[request.headers[header].removeprefix(scheme)]

    def app(self) -> ASGIApp:
        inner = self.server.streamable_http_app(host="127.0.0.1")

        async def checked(scope: Scope, receive: Receive, send: Send) -> None:
            if scope["type"] == "http":
                headers = {name.decode(): value.decode() for name, value in scope["headers"]}
                key = headers.get(self.header, "").removeprefix(self.scheme)
                if key not in KEYS or key in self.revoked:
                    self.refused += 1
                    await PlainTextResponse("no such key", 401)(scope, receive, send)
                    return
                if "mcp-session-id" in headers:
                    self.keys_by_session.setdefault(headers["mcp-session-id"], set()).add(key)
            await inner(scope, receive, send)

        return checked


@asynccontextmanager
async def accounts_gateway(
    store_url: str, accounts: Accounts | None = None, **credential: Any
) -> AsyncIterator[tuple[Signed, Accounts]]:
    accounts = accounts or Accounts()
    with serving(accounts.app(), free_port()) as base:
        upstream = Upstream(
            "accounts", url=f"{base}/mcp", credential=Credential(kind="api_key", title="Accounts", **credential)
        )
        with signed_in_gateway(store_url, upstream) as signed:
            yield signed, accounts


async def enter_key(signed: Signed, username: str, url: str, *, key: str) -> None:
    """`username` opens the connect page in their browser, presses Continue and types the key."""
    [done] = await type_keys(signed, username, url, key)
    assert done.status_code == 200 and "stored" in done.text, done.text


async def type_keys(signed: Signed, username: str, url: str, *keys: str) -> list[httpx2.Response]:
    """`username` opens the connect page, presses Continue, and types each of `keys` in turn in the form the page
    shows after the last; what the page said to each."""
    elicitation_id = url.rsplit("/", 1)[1]
    said = []
    async with signed_in_browser(signed, username) as browser:
        page = await browser.get(url)
        assert page.status_code == 200, page.text
        assert "enter your Accounts API key" in page.text
        form = await browser.post(f"/elicit/{elicitation_id}/continue", data={"csrf": hidden(page.text, "csrf")})
        assert form.status_code == 200, form.text
        for key in keys:
            form = await browser.post(
                f"/elicit/{elicitation_id}/key", data={"csrf": hidden(form.text, "csrf"), "api_key": key}
            )
            said.append(form)
    return said


def sha256(key: str) -> str:
    """What the peer's `digest` says of a variable holding `token {key}`."""
    return hashlib.sha256(f"token {key}".encode()).hexdigest()


def page_in(told: str) -> str:
    """The page a tool error sends its person to."""
    return told.split("answer at ", 1)[1].split(" ", 1)[0]


async def approve_whoami(alice: Client, browser: httpx2.AsyncClient) -> None:
    """`whoami`, gated with the web fallback, approved by alice on its page."""
    approval = page_url(await alice.call_tool("whoami", {}))
    page = await browser.get(approval)
    answered = await submit(browser, approval, page.text, "accept")
    assert answered.status_code in (200, 303), answered.text


class Connecting:
    """A 2025 person whose client is sent to a URL: they consent, then do what the page asks in their browser
    (`act`, given the URL), while the call waits; a form (an approval) they accept as it is."""

    def __init__(self, act: Callable[[str], Coroutine[Any, Any, None]], tasks: anyio.abc.TaskGroup) -> None:
        self.act = act
        self.tasks = tasks
        self.asked: list[ElicitRequestParams] = []

    async def __call__(self, context: ClientRequestContext, params: ElicitRequestParams) -> ElicitResult:
        self.asked.append(params)
        if isinstance(params, ElicitRequestURLParams):
            self.tasks.start_soon(self.act, params.url)
        return ElicitResult(action="accept", content=None if isinstance(params, ElicitRequestURLParams) else {})


async def test_each_person_connects_once_and_their_calls_carry_their_own_key(
    store_url: str, tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    async with accounts_gateway(store_url) as (signed, accounts):
        for username, key in (("alice", "ak-alice-5b1f0c"), ("bob", "ak-bob-93de27")):
            token = await signed.token(username)
            async with anyio.create_task_group() as tasks:
                person = Connecting(partial(enter_key, signed, username, key=key), tasks)
                async with bearer(signed.mcp, token, "legacy", person) as client:
                    listed = [tool.name for tool in (await client.list_tools()).tools]
                    assert listed == ["connect"]  # nothing of the upstream's before it is connected
                    assert text(await client.call_tool("whoami", {})) == username  # asked to connect, then called
                    assert text(await client.call_tool("whoami", {})) == username  # connected: asked nothing
                    listed = [tool.name for tool in (await client.list_tools()).tools]
                    assert listed == ["connect", "whoami"]
            [asked] = person.asked
            assert isinstance(asked, ElicitRequestURLParams)
            assert asked.message.startswith("whoami needs your Accounts API key")
        pool = signed.deployment.gateway.pool
        assert {lane.owner for lane in pool.lanes} == {signed.principal("alice"), signed.principal("bob")}
        decisions = signed.store.list_decisions(Operator())
        assert sorted((decision.principal_id, decision.key, decision.status) for decision in decisions) == [
            (signed.principal("alice"), "connect.accounts", DecisionStatus.EXTERNAL_COMPLETED),
            (signed.principal("bob"), "connect.accounts", DecisionStatus.EXTERNAL_COMPLETED),
        ]
    # Every session with the upstream carried one person's key, and never the other's.
    assert sorted(map(sorted, accounts.keys_by_session.values())) == [["ak-alice-5b1f0c"], ["ak-bob-93de27"]]
    assert accounts.refused == 0  # the gateway never knocked without a key
    # The keys are nowhere in the clear: not in the store's files (the vault seals them), nor in the log.
    stored = b"".join(path.read_bytes() for path in tmp_path.glob("elicit.db*"))
    assert b"connect.accounts" in stored  # the store is in these files
    for key in KEYS:
        assert key.encode() not in stored
        assert key not in caplog.text


async def test_behind_several_upstreams_the_connect_tool_and_the_tools_carry_the_prefix(store_url: str) -> None:
    accounts = Accounts()
    with serving(accounts.app(), free_port()) as base, sdk_over_http() as sdk:
        credential = Credential(kind="api_key", title="Accounts")
        upstreams = [
            Upstream("accounts", url=f"{base}/mcp", credential=credential, prefix="accounts"),
            over_http(sdk, prefix="sdk"),
        ]
        with signed_in_gateway(store_url, upstreams) as signed:
            token = await signed.token("alice")
            async with anyio.create_task_group() as tasks:
                person = Connecting(partial(enter_key, signed, "alice", key=ALICE), tasks)
                async with bearer(signed.mcp, token, "legacy", person) as alice:
                    listed = [tool.name for tool in (await alice.list_tools()).tools]
                    assert listed[0] == "accounts_connect" and "sdk_pid" in listed and "accounts_whoami" not in listed
                    assert text(await alice.call_tool("sdk_pid", {})).isdigit()  # no credential: asks nothing
                    assert person.asked == []
                    assert text(await alice.call_tool("accounts_whoami", {})) == "alice"
                    listed = [tool.name for tool in (await alice.list_tools()).tools]
                    assert listed[:2] == ["accounts_connect", "accounts_whoami"]
            [connect] = person.asked
            assert connect.message.startswith("accounts_whoami needs your Accounts API key")
            [decision] = signed.store.list_decisions(Operator())
            operation = signed.store.get_operation(decision.operation_id, Operator())
    assert operation.target == "accounts_connect"


async def test_a_2026_client_connects_through_a_round_and_its_retry_makes_the_call(store_url: str) -> None:
    async with accounts_gateway(store_url) as (signed, _):
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "2026-07-28", Person()) as alice:  # declares URL mode; asked in rounds
            first = await alice.session.call_tool("whoami", {}, allow_input_required=True)
            assert isinstance(first, InputRequiredResult)
            assert first.input_requests is not None and first.request_state is not None
            [(key, request)] = first.input_requests.items()
            asked = ElicitRequestURLParams.model_validate(request.model_dump(by_alias=True)["params"])
            await enter_key(signed, "alice", asked.url, key="ak-alice-5b1f0c")
            done = await alice.call_tool(
                "whoami", {}, input_responses={key: ElicitResult(action="accept")}, request_state=first.request_state
            )
            assert text(done) == "alice"
            assert text(await alice.call_tool("whoami", {})) == "alice"
            again = await alice.session.call_tool("connect", {}, allow_input_required=True)  # replace it
            assert isinstance(again, InputRequiredResult)
            assert again.input_requests is not None and again.request_state is not None
            [(key, request)] = again.input_requests.items()
            asked = ElicitRequestURLParams.model_validate(request.model_dump(by_alias=True)["params"])
            await enter_key(signed, "alice", asked.url, key=BOB)
            replaced = await alice.call_tool(
                "connect", {}, input_responses={key: ElicitResult(action="accept")}, request_state=again.request_state
            )
            assert text(replaced) == "Connected your Accounts API key: the tools of 'accounts' act as you."
            assert text(await alice.call_tool("whoami", {})) == "bob"


async def test_a_client_that_cannot_be_sent_to_a_url_is_told_the_page_and_the_same_call_then_runs(
    store_url: str,
) -> None:
    async with accounts_gateway(store_url) as (signed, _):
        token = await signed.token("bob")
        async with bearer(signed.mcp, token, "legacy") as bob:  # declares no elicitation
            told = error_text(await bob.call_tool("whoami", {}))
            url = page_in(told)
            assert url.startswith(f"{signed.base}/elicit/") and "whoami needs your Accounts API key" in told
            await enter_key(signed, "bob", url, key="ak-bob-93de27")
            assert text(await bob.call_tool("whoami", {})) == "bob"


async def test_the_key_goes_in_the_header_the_table_names_as_its_value_says(store_url: str) -> None:
    accounts = Accounts(header="x-api-key", scheme="key=")
    async with accounts_gateway(store_url, accounts, header="X-Api-Key", value="key={secret}") as (signed, _):
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:
            told = error_text(await alice.call_tool("whoami", {}))
            await enter_key(signed, "alice", page_in(told), key="ak-alice-5b1f0c")
            assert text(await alice.call_tool("whoami", {})) == "alice"


async def test_a_key_the_upstream_refuses_fails_the_call_saying_so_and_the_next_call_connects_again(
    store_url: str,
) -> None:
    async with accounts_gateway(store_url) as (signed, accounts):
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:  # declares no elicitation: told the page
            await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("whoami", {}))), key="ak-typo")
            with pytest.raises(MCPError) as refused:
                await alice.call_tool("whoami", {})
            said = refused.value.error.message
            assert "upstream 'accounts'" in said and "refused the credential" in said and "HTTP 401" in said
            assert "ak-typo" not in said
            assert "next attempt" not in said, said  # none: the session is closed, not tried again
            assert signed.deployment.gateway.pool.lanes == []  # closed: not tried again until they connect anew
            listed = [tool.name for tool in (await alice.list_tools()).tools]
            assert listed == ["connect"]  # what they can do now
            told = error_text(await alice.call_tool("whoami", {}))  # connect first, again
            assert "whoami needs your Accounts API key" in told
            await enter_key(signed, "alice", page_in(told), key="ak-alice-5b1f0c")
            assert text(await alice.call_tool("whoami", {})) == "alice"
    assert accounts.refused >= 1


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_a_key_revoked_on_a_session_up_fails_the_call_saying_so_and_the_next_call_connects_again(
    store_url: str, era: str, caplog: pytest.LogCaptureFixture
) -> None:
    """The upstream stops taking the key while the person's session with it is up (an expired token, a revoked key):
    the call fails naming the refusal (never the key), the listing shows `connect` alone, and the next call asks the
    person to connect again, whichever era their client speaks."""
    async with accounts_gateway(store_url) as (signed, accounts):
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, era) as alice:  # declares no elicitation: told the page
            await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("whoami", {}))), key=ALICE)
            assert text(await alice.call_tool("whoami", {})) == "alice"
            accounts.revoked.add(ALICE)
            with pytest.raises(MCPError) as refused:
                await alice.call_tool("whoami", {})
            said = refused.value.error.message
            assert "upstream 'accounts' refused the credential of" in said and "HTTP 401" in said, said
            assert "connecting it again" in said and ALICE not in said
            assert [tool.name for tool in (await alice.list_tools()).tools] == ["connect"]
            told = error_text(await alice.call_tool("whoami", {}))  # connect first, again
            assert "whoami needs your Accounts API key" in told
            await enter_key(signed, "alice", page_in(told), key=BOB)
            assert text(await alice.call_tool("whoami", {})) == "bob"
    assert ALICE not in caplog.text


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_a_gated_call_whose_key_was_revoked_did_not_run_and_the_same_call_connects_again(
    store_url: str, era: str
) -> None:
    """A 401 means the upstream ran nothing: the approved forward it refused is known not to have run (no
    `OutcomeUnknown`), its tool error says why, and the identical call asks to connect again, then for a new
    approval."""
    accounts = Accounts()
    with serving(accounts.app(), free_port()) as base:
        upstream = Upstream("accounts", url=f"{base}/mcp", credential=Credential(kind="api_key", title="Accounts"))
        with signed_in_gateway(store_url, upstream, [GateTable(tool="whoami", fallback="web")]) as signed:
            token = await signed.token("alice")
            async with bearer(signed.mcp, token, era) as alice, signed_in_browser(signed, "alice") as browser:
                await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("whoami", {}))), key=ALICE)
                await approve_whoami(alice, browser)
                assert text(await alice.call_tool("whoami", {})) == "alice"
                accounts.revoked.add(ALICE)
                await approve_whoami(alice, browser)
                said = error_text(await alice.call_tool("whoami", {}))
                assert "upstream 'accounts' refused the credential of" in said and "HTTP 401" in said, said
                assert "did not run" in said and ALICE not in said
                told = error_text(await alice.call_tool("whoami", {}))  # the same call: connect first, again
                assert "whoami needs your Accounts API key" in told, told
                await enter_key(signed, "alice", page_in(told), key=BOB)
                await approve_whoami(alice, browser)  # a new operation: approved anew
                assert text(await alice.call_tool("whoami", {})) == "bob"


async def test_a_key_replaced_on_another_instance_is_carried_here_after_a_look_at_the_vault_or_a_refusal(
    store_url: str,
) -> None:
    """Another instance of the gateway (its vault beside this one's, on the same store) stores a new key for the
    person: a session up here carries the old one until the vault is looked at again (`recheck` seconds), or until the
    upstream refuses the old one; then the new one, without asking the person to connect again."""
    async with accounts_gateway(store_url) as (signed, accounts):
        elsewhere = Vault(signed.store, VaultKeyRing.from_text(VAULT_KEYS))
        connecting = signed.deployment.gateway.connecting
        assert connecting is not None
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:  # declares no elicitation: a question fails the call
            await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("whoami", {}))), key=ALICE)
            assert text(await alice.call_tool("whoami", {})) == "alice"
            elsewhere.put(Principal(signed.principal("alice"), "gateway"), vault_name("accounts"), BOB)
            assert text(await alice.call_tool("whoami", {})) == "alice"  # looked at within `recheck`: kept
            connecting.recheck = 0.0
            assert text(await alice.call_tool("whoami", {})) == "bob"  # looked at again: the new one
            connecting.recheck = math.inf
            elsewhere.put(Principal(signed.principal("alice"), "gateway"), vault_name("accounts"), ALICE)
            accounts.revoked.add(BOB)
            with pytest.raises(MCPError) as refused:
                await alice.call_tool("whoami", {})
            assert "refused the credential of" in refused.value.error.message
            assert text(await alice.call_tool("whoami", {})) == "alice"  # the one stored elsewhere, nothing asked


async def test_a_key_a_header_cannot_carry_is_refused_on_the_page_saying_why_and_never_quoted(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A key pasted across two lines (the page strips only its ends), or with a character outside ASCII, would make
    the HTTP client refuse the header, quoting it: the page refuses it as it is typed, and stores nothing."""
    caplog.set_level(logging.DEBUG)
    async with accounts_gateway(store_url) as (signed, accounts):
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:
            url = page_in(error_text(await alice.call_tool("whoami", {})))
            broken, accented, done = await type_keys(signed, "alice", url, f"{ALICE}\n{ALICE}", "ak-alicé", ALICE)
            assert "holds a line break or another control character" in broken.text
            assert "outside printable ASCII" in accented.text
            for refused in (broken, accented):
                assert "Nothing was stored" in refused.text and 'name="api_key"' in refused.text
                assert ALICE not in refused.text and "ak-alic" not in refused.text
            assert "stored" in done.text
            assert text(await alice.call_tool("whoami", {})) == "alice"
    assert list(accounts.keys_by_session.values()) == [{ALICE}]
    assert ALICE not in caplog.text


async def test_a_stored_credential_that_cannot_be_sent_is_never_quoted_and_its_person_connects_again(
    store_url: str, caplog: pytest.LogCaptureFixture
) -> None:
    """A credential in the vault that a header cannot carry (a provider's token, a key stored before the page
    checked) fails the call naming why, never the secret (to the client, so the model, nor to the log), and counts
    as refused: the person is asked to connect again, which replaces it."""
    caplog.set_level(logging.DEBUG)
    secret = "sk-TOPSECRET-1\nsk-TOPSECRET-2"
    async with accounts_gateway(store_url) as (signed, _):
        vault = Vault(signed.store, VaultKeyRing.from_text(VAULT_KEYS))
        vault.put(Principal(signed.principal("alice"), "gateway"), vault_name("accounts"), secret)
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:
            with pytest.raises(MCPError) as failed:
                await alice.call_tool("whoami", {})
            said = failed.value.error.message
            assert "cannot carry the credential of" in said and "holds a line break" in said
            listed = [tool.name for tool in (await alice.list_tools()).tools]
            assert listed == ["connect"]
            told = error_text(await alice.call_tool("whoami", {}))  # asked to connect again
            assert "whoami needs your Accounts API key" in told
            await enter_key(signed, "alice", page_in(told), key=ALICE)
            assert text(await alice.call_tool("whoami", {})) == "alice"
    assert "TOPSECRET" not in said
    assert "TOPSECRET" not in caplog.text


async def test_a_credential_the_vault_cannot_open_asks_its_person_to_connect_again(store_url: str) -> None:
    """An entry sealed with a key the gateway's ring does not hold (rotated away, or a tampered row): the call fails
    saying so, and the next asks the person to connect again, rather than failing for good."""
    async with accounts_gateway(store_url) as (signed, _):
        elsewhere = Vault(signed.store, VaultKeyRing.from_text("v9:" + "b3RoZXIta2V5LW90aGVyLWtleS1vdGhlci1rZXktMDk="))
        elsewhere.put(Principal(signed.principal("alice"), "gateway"), vault_name("accounts"), ALICE)
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:
            with pytest.raises(MCPError) as failed:
                await alice.call_tool("whoami", {})
            assert "cannot open the credential of" in failed.value.error.message
            told = error_text(await alice.call_tool("whoami", {}))
            assert "whoami needs your Accounts API key" in told
            await enter_key(signed, "alice", page_in(told), key=ALICE)
            assert text(await alice.call_tool("whoami", {})) == "alice"


async def test_connecting_again_replaces_the_key_and_the_next_call_carries_the_new_one(store_url: str) -> None:
    async with accounts_gateway(store_url) as (signed, _):
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:
            await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("whoami", {}))), key=ALICE)
            assert text(await alice.call_tool("whoami", {})) == "alice"
            told = error_text(await alice.call_tool("connect", {}))  # the gateway's own tool: connect again
            assert "Connect your Accounts API key to the gateway" in told
            await enter_key(signed, "alice", page_in(told), key=BOB)  # another account of the upstream's
            assert text(await alice.call_tool("whoami", {})) == "bob"


async def test_a_command_gets_the_key_in_its_environment_and_each_person_a_process_of_their_own(
    store_url: str,
) -> None:
    """One session at most: bob's first call closes alice's idle process to start his own, and hers starts anew."""
    credential = Credential(kind="api_key", title="Accounts", env="PEER_TOKEN", value="token {secret}")
    with signed_in_gateway(store_url, stdio(SDK_SERVER, credential=credential)) as signed:
        pids: list[int] = []
        for username, key in (("alice", ALICE), ("bob", BOB), ("alice", ALICE)):
            token = await signed.token(username)
            async with bearer(signed.mcp, token, "legacy") as client:
                if not pids or username == "bob":
                    await enter_key(signed, username, page_in(error_text(await client.call_tool("pid", {}))), key=key)
                assert text(await client.call_tool("digest", {"variable": "PEER_TOKEN"})) == sha256(key)
                pids.append(int(text(await client.call_tool("pid", {}))))
                [lane] = signed.deployment.gateway.pool.lanes
                assert lane.owner == signed.principal(username)
    assert len(set(pids)) == 3


async def test_a_persons_process_inherits_neither_the_gateways_settings_nor_any_client_secret(
    store_url: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """`mcp-elicit gateway` reads its settings from its environment (the vault's keys, the sign-in keys) and an OAuth
    client's secret from the variable `client_secret_env` names: a process started for a person, with their key,
    inherits the rest of that environment, and none of those."""
    withheld = {**ENVIRON, "MCP_ELICIT_VAULT_KEYS": VAULT_KEYS, "EXAMPLE_CLIENT_SECRET": "provider-secret-4e1"}
    for name, value in {**withheld, "PEER_REGION": "eu-west"}.items():
        monkeypatch.setenv(name, value)
    oauth = Credential(
        kind="oauth",
        authorize_url="https://id.example/authorize",
        token_url="https://id.example/token",
        client_id="gateway",
        client_secret_env="EXAMPLE_CLIENT_SECRET",
    )
    upstreams = [
        stdio(SDK_SERVER, credential=Credential(kind="api_key", title="Accounts", env="PEER_TOKEN"), prefix="peer"),
        Upstream("profiles", url="http://127.0.0.1:9/mcp", credential=oauth, prefix="profiles"),
    ]
    with signed_in_gateway(store_url, upstreams, environ=withheld) as signed:
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:
            await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("peer_pid", {}))), key=ALICE)

            async def digest(variable: str) -> str:
                return text(await alice.call_tool("peer_digest", {"variable": variable}))

            assert await digest("PEER_TOKEN") == hashlib.sha256(ALICE.encode()).hexdigest()
            assert await digest("PEER_REGION") == hashlib.sha256(b"eu-west").hexdigest()  # the rest it inherits
            for name in withheld:
                assert await digest(name) == "", name  # not set


async def test_another_persons_page_cannot_connect_it(store_url: str) -> None:
    async with accounts_gateway(store_url) as (signed, accounts):
        token = await signed.token("alice")
        async with bearer(signed.mcp, token, "legacy") as alice:
            url = page_in(error_text(await alice.call_tool("whoami", {})))
            async with signed_in_browser(signed, "bob") as bob:
                assert (await bob.get(url)).status_code == 403
            refused = await alice.call_tool("whoami", {})
            assert refused.is_error  # still not connected: asked again
    assert accounts.keys_by_session == {}


async def test_a_gated_tool_is_connected_first_then_approved_then_called(store_url: str) -> None:
    """Before anyone connected, nothing lists the upstream's tools to bind the gate to: the caller's session, once
    connected, does, and the gate applies before the call goes upstream."""
    accounts = Accounts()
    with serving(accounts.app(), free_port()) as base:
        credential = Credential(kind="api_key", title="Accounts")
        upstream = Upstream("accounts", url=f"{base}/mcp", credential=credential)
        with signed_in_gateway(store_url, upstream, [GateTable(tool="whoami")]) as signed:
            token = await signed.token("alice")
            async with anyio.create_task_group() as tasks:
                person = Connecting(partial(enter_key, signed, "alice", key=ALICE), tasks)
                async with bearer(signed.mcp, token, "legacy", person) as alice:
                    assert text(await alice.call_tool("whoami", {})) == "alice"
            connect, approval = person.asked
            assert isinstance(connect, ElicitRequestURLParams) and isinstance(approval, ElicitRequestFormParams)
            assert approval.message.startswith("Approve this call?")
            keys = sorted(decision.key for decision in signed.store.list_decisions(Operator()))
    assert keys == [APPROVAL_KEY, "connect.accounts"]


async def test_a_call_with_an_idempotency_key_keeps_it_for_itself_not_for_its_connection(store_url: str) -> None:
    """The connection's operation stays open when its person connects on the page (their client cannot be sent to
    it); the gated call made again with its key then starts its own operation under that key."""
    accounts = Accounts()
    keyed = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: "whoami-1"})
    with serving(accounts.app(), free_port()) as base:
        upstream = Upstream("accounts", url=f"{base}/mcp", credential=Credential(kind="api_key", title="Accounts"))
        with signed_in_gateway(store_url, upstream, [GateTable(tool="whoami", fallback="web")]) as signed:
            token = await signed.token("alice")
            async with bearer(signed.mcp, token, "legacy") as alice, signed_in_browser(signed, "alice") as browser:
                told = error_text(await alice.call_tool("whoami", {}, meta=keyed))
                await enter_key(signed, "alice", page_in(told), key=ALICE)
                approval = page_url(await alice.call_tool("whoami", {}, meta=keyed))
                page = await browser.get(approval)
                answered = await submit(browser, approval, page.text, "accept")
                assert answered.status_code in (200, 303), answered.text
                assert text(await alice.call_tool("whoami", {}, meta=keyed)) == "alice"


def oauth_upstream(provider: str) -> MCPServer:
    """An upstream that acts as the person at the provider: `profile` reads their profile there with the token its
    request carries."""
    server = MCPServer("profiles")

    @server.tool()
    async def profile(ctx: Context) -> str:
        request = ctx.request_context.request
        assert request is not None
        async with httpx2.AsyncClient(timeout=10) as http:
            me = await http.get(f"{provider}/api/me", headers={"Authorization": request.headers["authorization"]})
        me.raise_for_status()
        return str(me.json()["name"])

    return server


async def sign_in_at_provider(signed: Signed, url: str) -> None:
    """Alice opens the connect page, goes on to the provider, signs in and allows; back on the gateway: done."""
    elicitation_id = url.rsplit("/", 1)[1]
    async with signed_in_browser(signed, "alice") as browser, httpx2.AsyncClient(timeout=30) as provider:
        page = await browser.get(url)
        assert "connect your Example account" in page.text
        sent = await browser.post(f"/elicit/{elicitation_id}/continue", data={"csrf": hidden(page.text, "csrf")})
        authorize = sent.headers["location"]
        form = await provider.get(authorize)
        endpoint = authorize.split("?")[0]
        signed_at = await provider.post(
            endpoint, data={"username": "alice", "password": "wonderland", "request": hidden(form.text, "request")}
        )
        allowed = await provider.post(
            f"{endpoint}/consent",
            data={
                "request": hidden(signed_at.text, "request"),
                "csrf_token": hidden(signed_at.text, "csrf_token"),
                "action": "allow",
            },
        )
        assert allowed.status_code == 302
        back = await browser.get(allowed.headers["location"])
        assert back.status_code == 200 and "connected" in back.text.lower(), back.text


async def test_an_oauth_credential_is_the_providers_token_kept_for_the_person_and_sent_upstream(
    store_url: str,
) -> None:
    gateway_port, provider_port = free_port(), free_port()
    provider = f"http://127.0.0.1:{provider_port}"
    config = ProviderConfig(
        issuer=provider,
        clients={
            "gateway": ProviderClient("provider-secret-4e1", (f"http://127.0.0.1:{gateway_port}/elicit/callback",))
        },
        users={"alice": ProviderUser("wonderland", "Alice Liddell")},
    )
    credential = Credential(
        kind="oauth",
        title="Example",
        authorize_url=f"{provider}/authorize",
        token_url=f"{provider}/token",
        client_id="gateway",
        client_secret_env="EXAMPLE_CLIENT_SECRET",
        scope="profile",
    )
    with (
        serving(provider_app(config), provider_port),
        serving(oauth_upstream(provider).streamable_http_app(host="127.0.0.1"), free_port()) as upstream_base,
        signed_in_gateway(
            store_url,
            Upstream("profiles", url=f"{upstream_base}/mcp", credential=credential),
            port=gateway_port,
            environ={"EXAMPLE_CLIENT_SECRET": "provider-secret-4e1"},
        ) as signed,
    ):
        token = await signed.token("alice")
        async with anyio.create_task_group() as tasks:
            person = Connecting(partial(sign_in_at_provider, signed), tasks)
            async with bearer(signed.mcp, token, "legacy", person) as alice:
                assert text(await alice.call_tool("profile", {})) == "Alice Liddell"


def test_what_a_credential_needs_is_checked_when_the_gateway_is_built(store_url: str) -> None:
    upstream = Upstream("tickets", url="http://127.0.0.1:9/mcp", credential=Credential(kind="api_key"))
    others = Upstream("plain", url="http://127.0.0.1:9/mcp", prefix="plain")
    settings = sign_in_settings(ENVIRON, "http://127.0.0.1:9")
    store = open_store(store_url)
    try:
        with pytest.raises(ValueError, match=r"^upstream\[0\]\.credential: each person connects it on the gateway's"):
            Gateway(upstream, store=store)
        with pytest.raises(
            ValueError, match=r"^upstream\[1\]\.credential: each person's credential is kept in the vault"
        ):
            build_gateway_deployment([others, replace(upstream, prefix="t")], store=store, settings=settings)
        oauth = Credential(
            kind="oauth",
            authorize_url="https://id.example/authorize",
            token_url="https://id.example/token",
            client_id="gateway",
            client_secret_env="TICKETS_SECRET",
        )
        with pytest.raises(
            ValueError, match=r"^upstream\[0\]\.credential\.client_secret_env: .* TICKETS_SECRET is empty"
        ):
            build_gateway_deployment(
                replace(upstream, credential=oauth),
                store=store,
                settings=settings,
                vault_keys=VaultKeyRing.from_text(VAULT_KEYS),
                environ={"TICKETS_SECRET": " "},
            )
    finally:
        store.close()


class Refusing:
    """In front of the upstream: the client's standalone GET stream is refused (403), and a `tools/call` is relayed
    only once that was done, then its answer is lost to a proxy's 502 without a body, after the upstream ran it."""

    def __init__(self, inner: ASGIApp) -> None:
        self.inner = inner
        self.refused_get = anyio.Event()
        self.ran = 0

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.inner(scope, receive, send)
            return
        if scope["method"] == "GET":
            await PlainTextResponse("forbidden", 403)(scope, receive, send)
            self.refused_get.set()
            return
        body, replayed = await read_body(receive)
        if json.loads(body).get("method") != "tools/call":
            await self.inner(scope, replayed, send)
            return
        await self.refused_get.wait()

        async def dropped(message: Message) -> None:
            pass

        await self.inner(scope, replayed, dropped)
        self.ran += 1
        await PlainTextResponse("bad gateway", 502)(scope, receive, send)


async def test_a_403_to_the_get_stream_is_not_taken_for_the_refusal_of_a_call_that_then_failed_otherwise(
    store_url: str,
) -> None:
    """A 403 to the SDK's standalone GET stream blames no request: an approved forward whose answer a proxy then lost
    (502, no body) may have run, so it is not said to have not run, and the person is not asked to connect again."""
    accounts = Accounts()
    front = Refusing(accounts.app())
    with serving(front, free_port()) as base:
        upstream = Upstream("accounts", url=f"{base}/mcp", credential=Credential(kind="api_key", title="Accounts"))
        with signed_in_gateway(store_url, upstream, [GateTable(tool="whoami", fallback="web")]) as signed:
            token = await signed.token("alice")
            async with bearer(signed.mcp, token, "legacy") as alice, signed_in_browser(signed, "alice") as browser:
                await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("whoami", {}))), key=ALICE)
                await approve_whoami(alice, browser)
                with pytest.raises(MCPError) as failed:  # the upstream's failure as the gateway heard it
                    await alice.call_tool("whoami", {})
                said = failed.value.error.message
                assert front.ran == 1
                assert "refused the credential" not in said and "did not run" not in said, said
                again = str((await alice.call_tool("whoami", {})).content)
                assert "needs your Accounts API key" not in again, again
    assert front.ran == 1


async def test_a_403_asking_for_more_scope_is_the_upstreams_answer_and_the_key_is_kept(store_url: str) -> None:
    """A 403 with `insufficient_scope` (the MCP specification's step-up answer) says the key is taken, not for this
    call: the call fails with the upstream's answer, and the person is not asked for a key that works."""
    accounts = Accounts()
    inner = accounts.app()
    scoped = True

    async def stepping_up(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST" and scoped:
            body, replayed = await read_body(receive)
            if json.loads(body).get("method") == "tools/call":
                challenge = {"www-authenticate": 'Bearer error="insufficient_scope", scope="accounts:read"'}
                await PlainTextResponse("more scope", 403, headers=challenge)(scope, receive, send)
                return
            await inner(scope, replayed, send)
            return
        await inner(scope, receive, send)

    with serving(stepping_up, free_port()) as base:
        upstream = Upstream("accounts", url=f"{base}/mcp", credential=Credential(kind="api_key", title="Accounts"))
        with signed_in_gateway(store_url, upstream) as signed:
            token = await signed.token("alice")
            async with bearer(signed.mcp, token, "legacy") as alice:
                await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("whoami", {}))), key=ALICE)
                with pytest.raises(MCPError) as answered:
                    await alice.call_tool("whoami", {})
                assert "refused the credential" not in answered.value.error.message, answered.value.error.message
                assert "whoami" in [tool.name for tool in (await alice.list_tools()).tools]
                scoped = False
                assert text(await alice.call_tool("whoami", {})) == "alice"


async def test_a_gated_call_refused_for_want_of_scope_did_not_run_and_says_so(store_url: str) -> None:
    """A 403 with `insufficient_scope` refuses the approved forward before it runs: its tool error says so (the status,
    the scope missing, that it did not run) rather than the SDK's `Server returned an error response`, and the key is
    kept."""
    accounts = Accounts()
    inner = accounts.app()
    ran = 0

    async def stepping_up(scope: Scope, receive: Receive, send: Send) -> None:
        nonlocal ran
        if scope["type"] == "http" and scope["method"] == "POST":
            body, replayed = await read_body(receive)
            if json.loads(body).get("method") == "tools/call":
                ran += 1
                challenge = {"www-authenticate": 'Bearer error="insufficient_scope", scope="accounts:read"'}
                await PlainTextResponse("more scope", 403, headers=challenge)(scope, receive, send)
                return
            await inner(scope, replayed, send)
            return
        await inner(scope, receive, send)

    with serving(stepping_up, free_port()) as base:
        upstream = Upstream("accounts", url=f"{base}/mcp", credential=Credential(kind="api_key", title="Accounts"))
        with signed_in_gateway(store_url, upstream, [GateTable(tool="whoami", fallback="web")]) as signed:
            token = await signed.token("alice")
            async with bearer(signed.mcp, token, "legacy") as alice, signed_in_browser(signed, "alice") as browser:
                await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("whoami", {}))), key=ALICE)
                await approve_whoami(alice, browser)
                said = error_text(await alice.call_tool("whoami", {}))
                assert "HTTP 403" in said and "insufficient_scope" in said and "did not run" in said, said
                assert "refused the credential" not in said and ALICE not in said, said
                assert "whoami" in [tool.name for tool in (await alice.list_tools()).tools]
    assert ran == 1


async def test_a_key_refused_on_one_session_retires_every_session_of_its_person_that_carries_it(
    store_url: str,
) -> None:
    """The upstream refused the key on one of the person's sessions: their other sessions carry the same key, so their
    next call asks them to connect again rather than meet the same refusal on another session."""
    accounts = Accounts()
    inner = accounts.app()
    arrived, release = threading.Event(), threading.Event()

    async def holding_the_first_call(scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "http" and scope["method"] == "POST":
            body, receive = await read_body(receive)
            if json.loads(body).get("method") == "tools/call" and not arrived.is_set():
                arrived.set()
                await anyio.to_thread.run_sync(release.wait)
        await inner(scope, receive, send)

    with serving(holding_the_first_call, free_port()) as base:
        credential = Credential(kind="api_key", title="Accounts")
        upstream = Upstream("accounts", url=f"{base}/mcp", credential=credential, sessions=2)
        with signed_in_gateway(store_url, upstream) as signed:
            token = await signed.token("alice")
            async with bearer(signed.mcp, token, "legacy") as alice:
                await enter_key(signed, "alice", page_in(error_text(await alice.call_tool("whoami", {}))), key=ALICE)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(alice.call_tool, "whoami", {})
                    await until(arrived.is_set)
                    assert text(await alice.call_tool("whoami", {})) == "alice"  # on a second session
                    release.set()
                pool = signed.deployment.gateway.pool
                assert len(pool.owned(signed.principal("alice"))) == 2
                accounts.revoked.add(ALICE)
                with pytest.raises(MCPError) as refused:
                    await alice.call_tool("whoami", {})
                assert "refused the credential of" in refused.value.error.message
                told = error_text(await alice.call_tool("whoami", {}))
                assert "whoami needs your Accounts API key" in told, told
