"""Text the request digest cannot encode (a lone surrogate) is refused with -32602 naming the argument.

A JSON string may escape half of a surrogate pair ("\\ud800"); Python's JSON decoder turns it into a str that
has no UTF-8 form, so it has no digest and could never be stored. The call is refused before anything is
recorded: over real HTTP with the escape on the wire, and through the SDK client in process on both eras
for tools, prompts, resources and the idempotency key. Not through `mcp_elicit.testing.Harness`: the subject
is a malformed request, which the client kit has no reason to send.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from pathlib import Path
from typing import cast

import pytest
from mcp import Client
from mcp.shared.exceptions import MCPError
from mcp_types import RequestParamsMeta

from mcp_elicit.model import Operator
from mcp_elicit.server import Elicitation, Flow, RequestState
from mcp_elicit.server.runtime import IDEMPOTENCY_META_KEY
from mcp_elicit.store import open_store
from tests.helpers.results import text, unwrap
from tests.helpers.server import Counter
from tests.helpers.tasks_http import Served, serve
from tests.helpers.tasks_wire import LEGACY, MODERN, WireError

pytestmark = pytest.mark.anyio

ERAS = [LEGACY, MODERN]
CLIENT_MODES = ["legacy", MODERN]
LONE = "\ud800"


@pytest.fixture
def served(store_url: str, tmp_path: Path) -> Iterator[Served]:
    with serve(store_url, tmp_path) as running:
        yield running


@pytest.mark.parametrize("era", ERAS)
@pytest.mark.parametrize("as_task", [False, True], ids=["call", "task"])
async def test_a_lone_surrogate_on_the_wire_is_refused_before_anything_runs(
    served: Served, era: str, as_task: bool
) -> None:
    """2026-07-28 parses the body with the standard library, which keeps the escape, and the digest refuses it;
    the SDK's 2025-11-25 transport refuses the body itself as a parse error (-32700) before any tool sees it."""
    async with served.wire(era) as wire:
        with pytest.raises(WireError) as raised:
            if as_task:
                await wire.call_as_task("deploy", {"service": f"pay{LONE}ments"})
            else:
                await wire.request("tools/call", {"name": "deploy", "arguments": {"service": f"pay{LONE}ments"}})
    if era == MODERN:
        assert raised.value.code == -32602
        assert raised.value.message == (
            "argument 'service' of tool 'deploy' cannot be encoded: lone surrogate '\\ud800' at character 3 "
            "(text must be valid Unicode)"
        )
    else:
        assert raised.value.code == -32700
    assert served.runtime.store.list_decisions(Operator()) == []
    assert not any(served.workspace.root.iterdir())  # no step of the tool ran


@pytest.fixture
def runtime(store_url: str, tmp_path: Path) -> Iterator[tuple[Elicitation, Counter]]:
    elicitation = Elicitation(open_store(store_url), request_state=RequestState(keys=[b"u" * 32]))
    elicitation.server("unencodable")
    counter = Counter(tmp_path / "effects.json")

    @elicitation.tool()
    async def label(flow: Flow, items: list[str]) -> str:
        counter.bump("label")
        return ", ".join(items)

    @elicitation.prompt()
    async def greeting(flow: Flow, audience: str) -> str:
        counter.bump("greeting")
        return f"Hello {audience}"

    @elicitation.resource("notes://{name}")
    async def note(flow: Flow, name: str) -> str:
        counter.bump("note")
        return f"note {name}"

    yield elicitation, counter
    elicitation.close()


async def refused(call: object) -> MCPError:
    with pytest.raises((MCPError, BaseExceptionGroup)) as raised:
        await call  # type: ignore[misc]
    error = unwrap(raised.value)
    assert isinstance(error, MCPError)
    assert error.code == -32602
    json.dumps(error.error.model_dump())  # the error itself has a JSON (and UTF-8) form
    error.error.message.encode()
    return error


@pytest.mark.parametrize("era", CLIENT_MODES)
async def test_tools_prompts_and_idempotency_keys_name_what_cannot_be_encoded(
    runtime: tuple[Elicitation, Counter], era: str
) -> None:
    elicitation, counter = runtime
    async with Client(elicitation.mcp_server, mode=era) as client:
        nested = await refused(client.call_tool("label", {"items": ["ok", f"a{LONE}"]}))
        prompt = await refused(client.get_prompt("greeting", {"audience": f"{LONE}team"}))
        meta = cast(RequestParamsMeta, {IDEMPOTENCY_META_KEY: f"turn{LONE}"})
        key = await refused(client.call_tool("label", {"items": ["ok"]}, meta=meta))
        assert text(await client.call_tool("label", {"items": ["caf\u00e9", "\U0001f680"]})) == "caf\u00e9, \U0001f680"
    assert nested.error.message == (
        "argument 'items' of tool 'label' cannot be encoded (at items[1]): lone surrogate '\\ud800' at character 1 "
        "(text must be valid Unicode)"
    )
    assert prompt.error.message.startswith("argument 'audience' of prompt 'greeting' cannot be encoded: lone surrogate")
    assert key.error.message.startswith("the idempotency key cannot be encoded: lone surrogate '\\ud800' at char")
    assert counter.read() == {"label": 1}
    assert elicitation.store.list_decisions(Operator()) == []


async def test_a_resource_variable_that_cannot_be_encoded_is_named(runtime: tuple[Elicitation, Counter]) -> None:
    """On 2025-11-25 only: the 2026-07-28 SDK client cannot send such a URI (its `Mcp-Name` header is UTF-8)."""
    elicitation, counter = runtime
    async with Client(elicitation.mcp_server, mode="legacy") as client:
        error = await refused(client.read_resource(f"notes://a{LONE}b"))
    assert error.error.message.startswith("variable 'name' of resource 'notes://{name}' cannot be encoded: lone")
    assert counter.read() == {}


async def test_an_answer_with_a_lone_surrogate_is_asked_again_not_stored(served: Served) -> None:
    """2026-07-28 keeps the escape in `inputResponses` too: such an answer is invalid (answer again, named), never
    a store error, and nothing of it is recorded; a valid answer then completes the call."""
    call = {"name": "deploy", "arguments": {"service": "payments"}}
    async with served.wire(MODERN, tasks=False) as wire:
        first = await wire.request("tools/call", call)
        [key] = first["inputRequests"]
        bad = {"action": "accept", "content": {"approve": True, "note": f"go{LONE}"}}
        again = await wire.request(
            "tools/call", {**call, "inputResponses": {key: bad}, "requestState": first["requestState"]}
        )
        assert again["resultType"] == "input_required", again
        [asked] = again["inputRequests"].values()
        assert "could not be used" in asked["params"]["message"] and "lone surrogate" in asked["params"]["message"]
        [decision] = served.runtime.store.list_decisions(Operator())
        assert decision.status.value == "requested" and decision.content is None
