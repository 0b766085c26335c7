"""Flow tools on FastMCP 4 (`mcp_elicit.fastmcp`): every guarantee of the native path, through FastMCP's own parts.

Clients: FastMCP's `Client` (in memory, over HTTP, over stdio), the kit's `ElicitingClient` (HTTP, stdio) and
the SDK's `Client` where a test needs the raw wire (a round's `requestState`, a JSON-RPC error code). Both
eras, 2025-11-25 and 2026-07-28, and both stores. The server is `tests.helpers.peers.fastmcp_server`, served by
FastMCP's own HTTP app or run as a process of its own.
"""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import asynccontextmanager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import anyio
import httpx2
import pytest
from fastmcp import Client as FastMCPClient
from fastmcp import FastMCP
from fastmcp.client.transports import StdioTransport
from fastmcp.exceptions import ToolError as FastMCPToolError
from fastmcp.server.middleware import CallNext, Middleware, MiddlewareContext
from fastmcp.tools.base import InputRequiredToolResult, ToolResult
from mcp import Client
from mcp.client.auth import OAuthClientProvider
from mcp.client.streamable_http import streamable_http_client
from mcp.shared.auth import OAuthClientMetadata
from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import CallToolRequestParams, ElicitResult, InputRequiredResult, InputResponses, TextContent
from pydantic import AnyUrl, BaseModel, Field

from mcp_elicit.cli.login import SignInStorage
from mcp_elicit.client import (
    Accept,
    Consent,
    ElicitingClient,
    FormReply,
    FormRequest,
    Http,
    Stdio,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.client.handler import Mode
from mcp_elicit.fastmcp import FastMCPFlows, LocalOAuth
from mcp_elicit.model import DecisionStatus, Operation, OperationStatus, Operator, Principal, request_digest
from mcp_elicit.reference.demo_stack import Credentials, DemoStack, sign_in
from mcp_elicit.server import Elicitation, Fallback, Flow, IdentityPolicy, RequestState, SecretField
from mcp_elicit.server.runtime import IDEMPOTENCY_META_KEY, REPLAYED_META_KEY
from mcp_elicit.store import Store, open_store
from mcp_elicit.web import LocalAuthorizationServer, LocalUsers, Vault, VaultKeyRing, WebPages, mount_web
from mcp_elicit.web.flows import ApiKeyEntry
from tests.helpers.http_harness import free_port, serving, wait_for_port
from tests.helpers.oauth_client import CALLBACK, SigningInPerson, published_issuers, query_of
from tests.helpers.pages_site import VAULT_KEYS, hidden
from tests.helpers.peers.fastmcp_server import SERVER_NAME, STATE_KEY, build
from tests.helpers.person import Person, accept
from tests.helpers.results import text, unwrap
from tests.helpers.server import Counter

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
ERAS = ("2025-11-25", "2026-07-28")
FASTMCP_MODE = {"2025-11-25": "legacy", "2026-07-28": "2026-07-28"}
LOOPBACK = Principal("loopback-dev", "loopback")
LOCAL = Principal("local-user", "stdio")


@dataclass
class Served:
    elicitation: Elicitation
    counter: Counter
    mcp: FastMCP[Any]
    url: str

    def operations(self, principal: Principal, tool: str, arguments: dict[str, Any]) -> list[Operation]:
        digest = request_digest("tools/call", {"name": tool, "arguments": arguments})
        return self.elicitation.store.find_operations(
            principal, method="tools/call", target=tool, request_digest=digest
        )


@pytest.fixture
def served(store_url: str, tmp_path: Path) -> Iterator[Served]:
    """The flows server on FastMCP's own HTTP app, on loopback, unauthenticated (the development principal)."""
    port = free_port()
    elicitation = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[STATE_KEY]),
        public_base_url=f"http://127.0.0.1:{port}",
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
    )
    counter = Counter(tmp_path / "effects.json")
    _, mcp = build(elicitation, counter)
    try:
        with serving(mcp.http_app(), port) as base:
            yield Served(elicitation, counter, mcp, f"{base}/mcp")
    finally:
        elicitation.close()


@dataclass
class Answers:
    """FastMCP's elicitation handler: answers every form with `content`, noting each message."""

    content: dict[str, Any]
    asked: list[str] = field(default_factory=list)

    async def __call__(self, message: str, response_type: Any, params: Any, context: Any) -> dict[str, Any]:
        self.asked.append(message)
        return self.content


@dataclass
class Kit:
    """The kit's handler: accepts every form with `content`, consents to every URL."""

    content: dict[str, Any]
    modes: frozenset[Mode] = frozenset({"form", "url"})
    asked: list[str] = field(default_factory=list)

    async def form(self, request: FormRequest) -> FormReply:
        self.asked.append(request.message)
        return Accept(self.content)

    async def url(self, request: UrlRequest) -> UrlReply:
        self.asked.append(request.message)
        return Consent()


def fastmcp_text(result: Any) -> str:
    assert not result.is_error, result.content
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


def error_text(result: Any) -> str:
    """The text of an error result, the SDK's `CallToolResult` or FastMCP's client's alike."""
    assert result.is_error
    first = result.content[0]
    assert isinstance(first, TextContent)
    return first.text


# -- FastMCP's own Client ----------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("transport", ["memory", "http"])
async def test_fastmcp_client_runs_a_flow_tool_once_and_a_retry_replays_it(
    served: Served, transport: str, era: str
) -> None:
    answers = Answers({"approve": True, "note": "go"})
    target: Any = served.mcp if transport == "memory" else served.url
    async with FastMCPClient(target, elicitation_handler=answers, mode=FASTMCP_MODE[era]) as client:
        tools = {tool.name: tool for tool in await client.list_tools()}
        assert set(tools["approve"].input_schema["properties"]) == {"scope"}
        done = await client.call_tool("approve", {"scope": era})
        again = await client.call_tool("approve", {"scope": era})
    assert fastmcp_text(done) == f"applied {era} on {SERVER_NAME} (go)"
    assert done.structured_content == {"result": f"applied {era} on {SERVER_NAME} (go)"}
    assert answers.asked == [f"Apply plan for {era}?"]
    assert fastmcp_text(again) == fastmcp_text(done) and REPLAYED_META_KEY in (again.meta or {})
    assert again.structured_content == done.structured_content and again.data == done.data
    assert served.counter.read() == {"plan": 1, "apply": 1}
    principal = LOCAL if transport == "memory" else LOOPBACK
    [operation] = served.operations(principal, "approve", {"scope": era})
    assert operation.status is OperationStatus.COMPLETED
    [decision] = served.elicitation.store.list_decisions(Operator(), operation_id=operation.operation_id)
    assert decision.status is DecisionStatus.ACCEPTED and decision.content == {"approve": True, "note": "go"}


@pytest.mark.parametrize("era", ERAS)
async def test_an_idempotency_key_in_meta_binds_the_call_and_a_misuse_is_refused_on_the_wire(
    served: Served, era: str
) -> None:
    key = {IDEMPOTENCY_META_KEY: f"deploy-{era}"}
    answers = Answers({"approve": True})
    async with FastMCPClient(served.url, elicitation_handler=answers, mode=FASTMCP_MODE[era]) as client:
        done = await client.call_tool("approve", {"scope": "keyed"}, meta=key)
        again = await client.call_tool("approve", {"scope": "keyed"}, meta=key)
        with pytest.raises(MCPError) as refused:
            await client.call_tool("approve", {"scope": "other"}, meta=key)
    assert fastmcp_text(done) == fastmcp_text(again) and REPLAYED_META_KEY in (again.meta or {})
    assert refused.value.code == -32602 and f"deploy-{era}" in refused.value.error.message
    assert answers.asked == ["Apply plan for keyed?"] and served.counter.read() == {"plan": 1, "apply": 1}


async def test_a_plain_fastmcp_tool_beside_flow_tools_records_nothing(served: Served) -> None:
    async with FastMCPClient(served.url) as client:
        assert fastmcp_text(await client.call_tool("ping", {})) == "pong"
    assert served.operations(LOOPBACK, "ping", {}) == []


# -- the kit ------------------------------------------------------------------------------------------------


@pytest.mark.parametrize("era", ERAS)
async def test_the_kit_runs_a_flow_tool_over_fastmcp_http(served: Served, era: Any) -> None:
    kit = Kit({"approve": True})
    async with ElicitingClient(Http(served.url), kit, era=era) as client:
        result = await client.call_tool("approve", {"scope": "kit"})
    assert text(result) == f"applied kit on {SERVER_NAME}" and kit.asked == ["Apply plan for kit?"]
    assert served.counter.read() == {"plan": 1, "apply": 1}


# -- stdio: both clients, both eras, both stores ----------------------------------------------------------


async def test_stdio_serves_fastmcp_client_and_kit_on_both_eras(store_url: str, tmp_path: Path) -> None:
    effects = tmp_path / "effects.json"
    args = ["-m", "tests.helpers.peers.fastmcp_server", "--store", store_url, "--effects", str(effects)]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    for era in ERAS:
        answers = Answers({"approve": True})
        transport = StdioTransport(sys.executable, args, env=env, cwd=str(ROOT))
        with anyio.fail_after(60):
            async with FastMCPClient(transport, elicitation_handler=answers, mode=FASTMCP_MODE[era]) as client:
                done = await client.call_tool("approve", {"scope": f"fastmcp-{era}"})
        assert fastmcp_text(done) == f"applied fastmcp-{era} on {SERVER_NAME}"
        assert answers.asked == [f"Apply plan for fastmcp-{era}?"]
        kit = Kit({"approve": True})
        parameters = Stdio(sys.executable, args, env=env, cwd=ROOT)
        with anyio.fail_after(60):
            async with ElicitingClient(parameters, kit, era=era) as kit_client:  # type: ignore[arg-type]
                result = await kit_client.call_tool("approve", {"scope": f"kit-{era}"})
        assert text(result) == f"applied kit-{era} on {SERVER_NAME}" and kit.asked == [f"Apply plan for kit-{era}?"]
    assert Counter(effects).read() == {"plan": 4, "apply": 4}
    store = open_store(store_url)
    try:
        statuses = {d.status for d in store.list_decisions(Operator())}
        assert statuses == {DecisionStatus.ACCEPTED} and len(store.list_decisions(Operator())) == 4
    finally:
        store.close()


# -- the wire: rounds, errors, fallbacks ------------------------------------------------------------------


@asynccontextmanager
async def sdk_client(url: str, mode: str, *, timeout: float = 30, **options: Any) -> AsyncIterator[Client]:
    async with httpx2.AsyncClient(timeout=timeout) as http, Client(
        streamable_http_client(url, http_client=http), mode=mode, **options
    ) as client:  # fmt: skip
        yield client


@asynccontextmanager
async def bearer_client(url: str, token: str, mode: str = "2026-07-28", **options: Any) -> AsyncIterator[Client]:
    options.setdefault("elicitation_callback", Person())
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=30) as http, Client(
        streamable_http_client(url, http_client=http), mode=mode, **options
    ) as client:  # fmt: skip
        yield client


def http_process(store_url: str, effects: Path, port: int, log: Path) -> subprocess.Popen[bytes]:
    command = [sys.executable, "-m", "tests.helpers.peers.fastmcp_server", "--store", store_url,
               "--effects", str(effects), "--port", str(port), "--lease", "1"]  # fmt: skip
    with log.open("ab") as sink:
        process = subprocess.Popen(command, cwd=ROOT, stdout=sink, stderr=sink)
    wait_for_port(port, process)
    return process


async def test_a_server_killed_while_the_person_thinks_resumes_from_its_journal(store_url: str, tmp_path: Path) -> None:
    """SIGKILL on the legacy era while the question is out; the restarted server re-asks once the dead call's
    claim on the question lapses (a 1 s lease here), and the journaled step is not run again.

    The kill happens in the elicitation callback and nowhere else: a client that gave up first (a read timeout
    while a loaded machine starts the server) would kill it at any point, between `plan` and the commit that
    records it too, where running `plan` again is what the design allows. The client waits as long as the
    other tests' clients, and the test says so if the question never came."""
    port, effects, log = free_port(), tmp_path / "effects.json", tmp_path / "server.log"
    url = f"http://127.0.0.1:{port}/mcp"
    first = http_process(store_url, effects, port, log)
    killed_while_asked = anyio.Event()
    try:

        async def kill_while_asked(context: Any, params: Any) -> ElicitResult:
            first.kill()
            first.wait()
            killed_while_asked.set()
            return accept(approve=True)

        with pytest.raises(BaseException) as ended:  # the dead server's connection, however it surfaces
            async with sdk_client(url, "legacy", elicitation_callback=kill_while_asked) as client:
                await client.call_tool("approve", {"scope": "crash"})
    finally:
        first.kill()
        first.wait()
    assert killed_while_asked.is_set(), f"the call ended before its question came: {ended.value!r}"
    assert Counter(effects).read() == {"plan": 1}
    second = http_process(store_url, effects, port, log)
    try:
        person = Person([accept(approve=True)])
        async with sdk_client(url, "legacy", elicitation_callback=person) as client:
            done = await client.call_tool("approve", {"scope": "crash"})
    finally:
        second.terminate()
        second.wait(timeout=10)
    assert text(done) == f"applied crash on {SERVER_NAME}" and len(person.asked) == 1
    assert Counter(effects).read() == {"plan": 1, "apply": 1}


async def test_a_2026_round_is_durable_and_its_state_is_single_use(served: Served) -> None:
    async with sdk_client(served.url, "2026-07-28", elicitation_callback=Person()) as client:
        first = await client.session.call_tool("approve", {"scope": "rounds"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult) and list(first.input_requests or {}) == ["approve_scope"]
        assert served.counter.read() == {"plan": 1}
        answer: InputResponses = {"approve_scope": accept(approve=True)}
        done = await client.call_tool("approve", {"scope": "rounds"}, input_responses=answer,
                                      request_state=first.request_state)  # fmt: skip
        assert text(done) == f"applied rounds on {SERVER_NAME}"
        with pytest.raises((MCPError, BaseExceptionGroup)) as replayed:
            await client.call_tool("approve", {"scope": "rounds"}, input_responses=answer,
                                   request_state=first.request_state)  # fmt: skip
    refused = unwrap(replayed.value)
    assert isinstance(refused, MCPError) and refused.code == -32602  # a JSON-RPC error, not a masked tool error
    assert served.counter.read() == {"plan": 1, "apply": 1}


async def test_legacy_url_mode_answers_32042_on_the_wire_and_the_retry_completes(served: Served) -> None:
    async with sdk_client(served.url, "legacy", elicitation_callback=Person()) as client:
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await client.call_tool("connect_later", {})
        error = unwrap(raised.value)
        assert isinstance(error, MCPError) and error.code == -32042
        [wanted] = UrlElicitationRequiredError.from_error(error.error).elicitations
        store = served.elicitation.store
        [decision] = store.list_decisions(Operator())
        assert wanted.url == served.elicitation.decision_url(decision.elicitation_id)
        consented = store.transition(decision, DecisionStatus.ACCEPTED_URL, caller=LOOPBACK, reason="page opened")
        pending = store.transition(consented, DecisionStatus.EXTERNAL_PENDING, caller=LOOPBACK)
        store.transition(pending, DecisionStatus.EXTERNAL_COMPLETED, caller=LOOPBACK, reason="provider callback")
        assert text(await client.call_tool("connect_later", {})) == "connected"


async def test_a_client_that_cannot_be_asked_gets_32021_on_2026(served: Served) -> None:
    async with sdk_client(served.url, "2026-07-28") as client:
        with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
            await client.call_tool("approve", {"scope": "nobody"})
    error = unwrap(raised.value)
    assert isinstance(error, MCPError) and error.code == -32021
    assert error.error.data == {"requiredCapabilities": {"elicitation": {"form": {}}}}


@pytest.mark.parametrize("era", ["legacy", "2026-07-28"])
async def test_the_arguments_fallback_names_elicit_answers_and_takes_them(served: Served, era: str) -> None:
    async with FastMCPClient(served.url, mode=era) as client:
        [book] = [tool for tool in await client.list_tools() if tool.name == "book"]
        assert set(book.input_schema["properties"]) == {"city", "elicit_answers"}
        told = await client.call_tool("book", {"city": "Oslo"}, raise_on_error=False)
        assert "elicit_answers" in error_text(told)
        done = await client.call_tool("book", {"city": "Oslo", "elicit_answers": {"seats": {"seats": 3}}})
    assert fastmcp_text(done) == "booked 3 to Oslo"


async def test_a_tool_error_fails_the_operation_and_a_bug_leaves_it_open_for_the_retry(served: Served) -> None:
    async with FastMCPClient(served.url) as client:
        failed = await client.call_tool("refuse", {"why": "tool-error"}, raise_on_error=False)
        assert error_text(failed) == "refused on purpose"
        crashed = await client.call_tool("refuse", {"why": "bug"}, raise_on_error=False)
        assert "a bug the first time" in error_text(crashed)
        [open_one] = served.operations(LOOPBACK, "refuse", {"why": "bug"})
        assert open_one.status is OperationStatus.OPEN
        assert fastmcp_text(await client.call_tool("refuse", {"why": "bug"})) == "went on"
    [failed_one] = served.operations(LOOPBACK, "refuse", {"why": "tool-error"})
    [went_on] = served.operations(LOOPBACK, "refuse", {"why": "bug"})
    assert failed_one.status is OperationStatus.FAILED and went_on.status is OperationStatus.COMPLETED
    assert served.counter.read() == {"prepare": 2, "bug": 2}  # one per operation: the retry replayed its step


class Observer(Middleware):
    """A user's own FastMCP middleware: what its `on_call_tool` sees of each `tools/call`."""

    def __init__(self) -> None:
        self.seen: list[tuple[str, object]] = []

    async def on_call_tool(
        self, context: MiddlewareContext[CallToolRequestParams], call_next: CallNext[CallToolRequestParams, ToolResult]
    ) -> ToolResult:
        try:
            result = await call_next(context)
        except MCPError as error:
            self.seen.append((context.message.name, error.error.code))
            raise
        outcome = "input_required" if isinstance(result, InputRequiredToolResult) else "result"
        self.seen.append((context.message.name, "error" if result.is_error else outcome))
        return result


@pytest.mark.parametrize("era", ERAS)
async def test_a_users_middleware_sees_each_flow_tool_request_and_its_json_rpc_error(
    store_url: str, tmp_path: Path, era: str
) -> None:
    elicitation = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[STATE_KEY]),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
    )
    observer = Observer()
    key = {IDEMPOTENCY_META_KEY: f"observed-{era}"}
    try:
        _, mcp = build(elicitation, Counter(tmp_path / "effects.json"), middleware=[observer])
        answers = Answers({"approve": True})
        async with FastMCPClient(mcp, elicitation_handler=answers, mode=FASTMCP_MODE[era]) as client:
            done = await client.call_tool("approve", {"scope": "seen"}, meta=key)
            with pytest.raises(MCPError) as refused:
                await client.call_tool("approve", {"scope": "other"}, meta=key)
            failed = await client.call_tool("refuse", {"why": "tool-error"}, raise_on_error=False)
    finally:
        elicitation.close()
    assert fastmcp_text(done) == f"applied seen on {SERVER_NAME}" and refused.value.code == -32602
    assert error_text(failed) == "refused on purpose"
    asked = [("approve", "input_required")] if era == "2026-07-28" else []
    assert observer.seen == [*asked, ("approve", "result"), ("approve", -32602), ("refuse", "error")]


# -- registration ------------------------------------------------------------------------------------------


class Credential(BaseModel):
    api_token: str = Field(description="Your API token")


def test_registration_refuses_what_it_cannot_serve(sqlite_url: str) -> None:
    elicitation = Elicitation(open_store(sqlite_url), request_state=RequestState(single_process=True))
    try:
        flows = FastMCPFlows(elicitation)
        with pytest.raises(RuntimeError, match=r"FastMCPFlows\.server"):
            flows.tool()
        flows.server("strict")
        with pytest.raises(TypeError, match="exactly one parameter annotated Flow"):

            @flows.tool()
            async def no_flow(city: str) -> str:
                return city

        with pytest.raises(TypeError, match="must be async"):

            @flows.tool()  # type: ignore[type-var]
            def blocking(flow: Flow) -> str:
                return "no"

        with pytest.raises(ValueError, match="public_base_url"):
            flows.tool(fallback=Fallback.WEB)
        with pytest.raises(SecretField):

            @flows.tool(asks=(Credential,))
            async def leaky(flow: Flow) -> str:
                return "no"

        with pytest.raises(ValueError, match="background task"):
            flows.tool(task=True)
        with pytest.raises(ValueError, match="not built by these flows"):
            flows.tool(FastMCP("elsewhere"))
    finally:
        elicitation.close()


async def test_a_flow_tool_called_from_code_without_an_mcp_request_refuses_to_run(sqlite_url: str) -> None:
    elicitation = Elicitation(open_store(sqlite_url), request_state=RequestState(single_process=True))
    ran: list[str] = []
    try:
        flows = FastMCPFlows(elicitation)
        mcp = flows.server("direct")

        @flows.tool()
        async def direct(flow: Flow) -> str:
            ran.append("body")
            return "ran"

        with pytest.raises(FastMCPToolError, match="needs an MCP request"):
            await mcp.call_tool("direct", {})
    finally:
        elicitation.close()
    assert ran == []


def test_the_core_package_never_imports_fastmcp() -> None:
    """Every module of mcp_elicit but `mcp_elicit.fastmcp` imports without FastMCP: it stays an optional extra."""
    probe = (
        "import importlib, pathlib, sys, mcp_elicit\n"
        "root = pathlib.Path(mcp_elicit.__file__).parent\n"
        "for path in sorted(root.rglob('*.py')):\n"
        "    parts = ('mcp_elicit', *path.relative_to(root).with_suffix('').parts)\n"
        "    if 'fastmcp' not in parts and parts[-1] != '__main__':\n"
        "        importlib.import_module('.'.join(parts[:-1] if parts[-1] == '__init__' else parts))\n"
        "print(sorted(name for name in sys.modules if name.split('.')[0] == 'fastmcp'))"
    )
    ran = subprocess.run([sys.executable, "-c", probe], capture_output=True, text=True, check=False, cwd=ROOT)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout.strip() == "[]", ran.stdout


# -- URL mode with sign-in, both on the FastMCP app ----------------------------------------------------


@dataclass
class SignedIn:
    """The flows server with the local authorization server as its `auth=`, pages and sign-in on its app."""

    base: str
    store: Store
    tmp_path: Path
    store_url: str

    async def token(self, user: str) -> str:
        person = Credentials(user, f"{user}-pw", user.title())
        log = self.tmp_path / "server.log"
        return await sign_in(DemoStack(self.base, self.base, self.store_url, self.tmp_path, person, person, log, log))


@pytest.fixture
def signed_in(store_url: str, tmp_path: Path, request: pytest.FixtureRequest) -> Iterator[SignedIn]:
    """`request.param`, when given, is how the issuer is written after the origin ("/": with a trailing slash)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    store = open_store(store_url)
    elicitation = Elicitation(store, request_state=RequestState(keys=[STATE_KEY]), public_base_url=base)
    users = LocalUsers.from_text("alice:alice-pw:Alice,bob:bob-pw:Bob")
    issuer = base + getattr(request, "param", "")
    auth = LocalAuthorizationServer(issuer, users, store, signing_keys=[b"a" * 32], server_name=SERVER_NAME)
    _, mcp = build(elicitation, Counter(tmp_path / "effects.json"), auth=LocalOAuth(auth))
    mount_web(mcp, elicitation, WebPages(
        sign_in=auth, page_key=b"p" * 32, vault=Vault(store, VaultKeyRing.from_text(VAULT_KEYS)),
        flows={"set_api_key": ApiKeyEntry(vault_name="example-api-key", service_title="Example")},
    ))  # fmt: skip
    try:
        with serving(mcp.http_app(), port):
            yield SignedIn(base, store, tmp_path, store_url)
    finally:
        elicitation.close()


@pytest.mark.parametrize("signed_in", ["", "/"], indirect=True, ids=["issuer", "issuer-with-slash"])
async def test_the_sdk_clients_sign_in_to_the_fastmcp_app_compares_one_issuer_string_throughout(
    signed_in: SignedIn,
) -> None:
    """The SDK compares the issuer listed by the resource with the metadata's, and the answer's `iss` with both,
    as strings (RFC 8414 §3.3, RFC 9207): one spelling everywhere, however the issuer was configured."""
    base = signed_in.base
    async with httpx2.AsyncClient(base_url=base, follow_redirects=False, timeout=30) as browser:
        person = SigningInPerson(browser, password="alice-pw")
        provider = OAuthClientProvider(
            server_url=f"{base}/mcp",
            client_metadata=OAuthClientMetadata(client_name="SDK client", redirect_uris=[AnyUrl(CALLBACK)]),
            storage=SignInStorage(),
            redirect_handler=person.redirect,
            callback_handler=person.callback,
        )
        async with httpx2.AsyncClient(auth=provider, timeout=30) as http, Client(
            streamable_http_client(f"{base}/mcp", http_client=http), mode="2026-07-28",
            elicitation_callback=Person([accept(approve=True)]),
        ) as client:  # fmt: skip
            done = await client.call_tool("approve", {"scope": "signed"})
    assert text(done) == f"applied signed on {SERVER_NAME}"
    assert await published_issuers(base) == ([base], base)
    assert query_of(person.redirects[0])["iss"] == base
    [decision] = signed_in.store.list_decisions(Operator())
    assert decision.principal.principal_id == f"{base}#alice"


async def test_health_readiness_and_the_inbox_are_served_on_the_fastmcp_app(signed_in: SignedIn) -> None:
    base = signed_in.base
    async with bearer_client(f"{base}/mcp", await signed_in.token("alice"), elicitation_callback=None) as client:
        told = await client.call_tool("reserve", {"city": "Lima"})
    [decision] = signed_in.store.list_decisions(Operator())
    assert f"{base}/elicit/{decision.elicitation_id}" in error_text(told)
    async with httpx2.AsyncClient(base_url=base, follow_redirects=False, timeout=30) as browser:
        refused = await browser.post("/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        healthy, ready = await browser.get("/healthz"), await browser.get("/readyz")
        unsigned = await browser.get("/inbox")
        form = await browser.get("/signin", params={"next": "/inbox"})
        signed = await browser.post("/signin", data={"username": "alice", "password": "alice-pw", "next": "/inbox",
                                                     "csrf": hidden(form.text, "csrf")})  # fmt: skip
        inbox = await browser.get("/inbox")
    assert refused.status_code == 401  # the MCP endpoint demands a token; the health routes do not
    assert (healthy.status_code, healthy.json()) == (200, {"status": "ok"})
    checks = {"store": "ok", "schema": "ok", "keys": "ok"}
    assert (ready.status_code, ready.json()) == (200, {"status": "ready", "checks": checks})
    assert unsigned.status_code == 303 and unsigned.headers["location"] == "/signin?next=%2Finbox"
    assert signed.status_code == 303 and inbox.status_code == 200
    assert "How many seats to Lima?" in inbox.text and f'href="/elicit/{decision.elicitation_id}"' in inbox.text


async def test_url_mode_and_sign_in_mount_on_the_fastmcp_app(signed_in: SignedIn) -> None:
    base, store = signed_in.base, signed_in.store
    async with bearer_client(f"{base}/mcp", await signed_in.token("alice")) as client:
        first = await client.session.call_tool("set_key", {}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        [decision] = store.list_decisions(Operator())
        assert decision.principal.principal_id == f"{base}#alice"
        await anyio.to_thread.run_sync(_enter_the_key, base, decision.elicitation_id)
        done = await client.call_tool(
            "set_key", {}, input_responses={"set_api_key": ElicitResult(action="accept")},
            request_state=first.request_state,
        )  # fmt: skip
    assert text(done) == f"{base}#alice set the key"
    async with httpx2.AsyncClient(timeout=10) as anonymous:
        refused = await anonymous.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
        metadata = (await anonymous.get(f"{base}/.well-known/oauth-authorization-server")).json()
    assert refused.status_code == 401
    assert metadata["issuer"] == base and metadata["grant_types_supported"] == ["authorization_code"]


async def test_a_round_is_bound_to_the_user_it_was_issued_to(signed_in: SignedIn) -> None:
    url = f"{signed_in.base}/mcp"
    answer: InputResponses = {"approve_scope": accept(approve=True)}
    async with bearer_client(url, await signed_in.token("alice")) as alice:
        first = await alice.session.call_tool("approve", {"scope": "prod"}, allow_input_required=True)
        assert isinstance(first, InputRequiredResult)
        async with bearer_client(url, await signed_in.token("bob")) as bob:
            with pytest.raises((MCPError, BaseExceptionGroup)) as stolen:
                await bob.call_tool("approve", {"scope": "prod"}, input_responses=answer,
                                    request_state=first.request_state)  # fmt: skip
        refused = unwrap(stolen.value)
        assert isinstance(refused, MCPError) and refused.code == -32602
        [decision] = signed_in.store.list_decisions(Operator())
        assert decision.status is DecisionStatus.REQUESTED  # bob's answer was never recorded
        done = await alice.call_tool("approve", {"scope": "prod"}, input_responses=answer,
                                     request_state=first.request_state)  # fmt: skip
    assert text(done) == f"applied prod on {SERVER_NAME}"
    assert Counter(signed_in.tmp_path / "effects.json").read() == {"plan": 1, "apply": 1}


async def test_a_round_begun_on_one_instance_ends_on_another(store_url: str, tmp_path: Path) -> None:
    """Two FastMCP instances with one store and one key ring: nothing of the round is pinned to the first."""
    counter = Counter(tmp_path / "effects.json")
    instances = []
    for _ in range(2):
        elicitation = Elicitation(
            open_store(store_url),
            request_state=RequestState(keys=[STATE_KEY]),
            identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        )
        instances.append((elicitation, build(elicitation, counter)[1], free_port()))
    try:
        with serving(instances[0][1].http_app(), instances[0][2]) as first_base, serving(
            instances[1][1].http_app(), instances[1][2]
        ) as second_base:  # fmt: skip
            async with sdk_client(f"{first_base}/mcp", "2026-07-28", elicitation_callback=Person()) as one:
                first = await one.session.call_tool("approve", {"scope": "moved"}, allow_input_required=True)
            assert isinstance(first, InputRequiredResult)
            async with sdk_client(f"{second_base}/mcp", "2026-07-28", elicitation_callback=Person()) as two:
                done = await two.call_tool("approve", {"scope": "moved"},
                                           input_responses={"approve_scope": accept(approve=True)},
                                           request_state=first.request_state)  # fmt: skip
    finally:
        for elicitation, _, _ in instances:
            elicitation.close()
    assert text(done) == f"applied moved on {SERVER_NAME}" and counter.read() == {"plan": 1, "apply": 1}


@pytest.mark.parametrize("mode", ["legacy", "2026-07-28"])
async def test_the_web_fallback_sends_the_person_to_the_page_on_the_fastmcp_app(signed_in: SignedIn, mode: str) -> None:
    url = f"{signed_in.base}/mcp"
    async with bearer_client(url, await signed_in.token("alice"), mode, elicitation_callback=None) as client:
        told = await client.call_tool("reserve", {"city": "Lima"})
        [decision] = signed_in.store.list_decisions(Operator())
        page_url = f"{signed_in.base}/elicit/{decision.elicitation_id}"
        assert page_url in error_text(told) and "How many seats to Lima?" in error_text(told)
        await anyio.to_thread.run_sync(_answer_on_the_page, signed_in.base, decision.elicitation_id)
        done = await client.call_tool("reserve", {"city": "Lima"})
    assert text(done) == "reserved 2 to Lima"


def _answer_on_the_page(base: str, elicitation_id: str) -> None:
    page_path = f"/elicit/{elicitation_id}"
    with httpx2.Client(base_url=base) as browser:
        _sign_in_browser(browser, page_path)
        page = browser.get(page_path)
        assert page.status_code == 200 and "How many seats to Lima?" in page.text, page.text
        answered = browser.post(f"{page_path}/answer", data={"csrf": hidden(page.text, "csrf"), "action": "accept",
                                                              "f.seats": "2"})  # fmt: skip
        assert answered.status_code == 200, answered.text


def _sign_in_browser(browser: httpx2.Client, next_path: str) -> None:
    form = browser.get("/signin", params={"next": next_path})
    signed = browser.post("/signin", data={"username": "alice", "password": "alice-pw", "next": next_path,
                                           "csrf": hidden(form.text, "csrf")})  # fmt: skip
    assert signed.status_code == 303, signed.text


def _enter_the_key(base: str, elicitation_id: str) -> None:
    """Alice, in a browser: signs in on the server's own page, continues, and enters the key there."""
    page_path = f"/elicit/{elicitation_id}"
    with httpx2.Client(base_url=base) as browser:
        _sign_in_browser(browser, page_path)
        page = browser.get(page_path)
        assert page.status_code == 200 and SERVER_NAME in page.text, page.text
        key_form = browser.post(f"{page_path}/continue", data={"csrf": hidden(page.text, "csrf")})
        assert 'type="password"' in key_form.text, key_form.text
        done = browser.post(f"{page_path}/key", data={"csrf": hidden(key_form.text, "csrf"), "api_key": "k-123"})
        assert "Done" in done.text, done.text
