"""A gateway of two upstreams, each under its prefix: the SDK's `MCPServer` peer over loopback HTTP (prefix `sdk`:
tools, prompts, resources, completion) and the hand-written one-era peer on stdio (prefix `era`: tools only, listed
two at a time, announcing list changes), relayed to SDK clients in process.
"""

from __future__ import annotations

import base64
import json
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.subscriptions import ToolsListChanged
from mcp.shared.exceptions import MCPError
from mcp_types import (
    INVALID_PARAMS,
    ListToolsRequest,
    ListToolsResult,
    PaginatedRequestParams,
    PromptReference,
    ResourceTemplateReference,
    TextResourceContents,
    ToolListChangedNotification,
)

from mcp_elicit.gateway import Gateway, Upstream, UpstreamEra, UpstreamUnavailable
from tests.helpers.gateway import ERAS, ONE_ERA, ROOT, Person, Served, connected, sdk_over_http, text
from tests.helpers.peers.sdk_server import INSTRUCTIONS
from tests.helpers.peers.sdk_server import server as sdk_server

pytestmark = pytest.mark.anyio

SDK_TOOLS = [
    "book",
    "reserve",
    "connect",
    "link",
    "finish",
    "refuse",
    "meta",
    "capabilities",
    "crash",
    "pid",
    "digest",
    "hold",
    "die",
    "count",
    "say",
    "change",
    "quiz",
    "sample",
    "roots",
    "weather",
]


def paged() -> Upstream:
    return Upstream("one-era", command=(*ONE_ERA, "--page", "2"), cwd=str(ROOT), prefix="era")


@asynccontextmanager
async def two(era: str, sdk_era: UpstreamEra = "auto", **client: Any) -> AsyncIterator[Client]:
    """A running gateway in front of both peers (the SDK's speaking `sdk_era`), and a client of `era` connected to
    it."""
    with sdk_over_http() as url:
        gateway = Gateway([Upstream("sdk", url=url, prefix="sdk", era=sdk_era), paged()])
        async with gateway.running(), connected(gateway, era, **client) as downstream:
            yield downstream


async def list_tools(client: Client, cursor: str | None = None) -> ListToolsResult:
    """One page of `tools/list`, as it is on the wire (the client's own `list_tools` may page on its own)."""
    request = ListToolsRequest(params=PaginatedRequestParams(cursor=cursor) if cursor is not None else None)
    return await client.session.send_request(request, ListToolsResult)


@pytest.mark.parametrize("era", ERAS)
async def test_lists_carry_each_upstreams_prefix_and_page_across_upstreams(era: str) -> None:
    async with two(era) as client:
        first = await list_tools(client)
        assert first.next_cursor is not None
        second = await list_tools(client, first.next_cursor)
        prompts = await client.list_prompts()
        resources = await client.list_resources()
        templates = await client.list_resource_templates()
        with pytest.raises(MCPError) as forged:
            await list_tools(client, base64.urlsafe_b64encode(json.dumps({"era": "0", "nope": "1"}).encode()).decode())
        with pytest.raises(MCPError) as garbled:
            await list_tools(client, "not a cursor")
        declared = client.server_capabilities
        instructions = client.instructions
    # Every upstream's first page on the first page (a client that never pages sees both), the rest after.
    assert [tool.name for tool in first.tools] == [f"sdk_{name}" for name in SDK_TOOLS] + ["era_echo", "era_malformed"]
    assert [tool.name for tool in second.tools] == ["era_announce", "era_later"]
    assert second.next_cursor is None
    assert first.tools[0].description == "Ask how many seats, then book them."  # the rest as the upstream gave it
    assert [prompt.name for prompt in prompts.prompts] == ["sdk_greeting"]
    assert [resource.uri for resource in resources.resources] == ["note://sdk/readme"]
    assert [template.uri_template for template in templates.resource_templates] == ["note://sdk/{name}"]
    assert (forged.value.code, garbled.value.code) == (INVALID_PARAMS, INVALID_PARAMS)
    assert garbled.value.error.message == "tools/list: the cursor 'not a cursor' is not one this gateway gave"
    assert forged.value.error.message.endswith("is not one this gateway gave")
    # What either upstream serves; list changes, as a gateway of several announces them (an upstream may restart).
    assert declared.prompts is not None and declared.resources is not None and declared.completions is not None
    assert declared.tools is not None and declared.tools.list_changed
    assert instructions == f"Upstream 'sdk' (names prefixed sdk_): {INSTRUCTIONS}"  # the one-era peer gives none


async def test_calls_prompts_reads_and_completions_go_to_the_upstream_of_their_prefix() -> None:
    person = Person({"seats": 2})
    async with two("legacy", "legacy", elicitation_callback=person) as client:  # `book` asks on the live call
        echoed = await client.call_tool("era_echo", {"to": "era"})
        booked = await client.call_tool("sdk_book", {"city": "Oslo"})
        prompt = await client.get_prompt("sdk_greeting", {"name": "Ada"})
        read = await client.read_resource("note://sdk/readme")
        expanded = await client.read_resource("note://sdk/mine")
        names = await client.complete(
            PromptReference(type="ref/prompt", name="sdk_greeting"), {"name": "name", "value": "A"}
        )
        template = ResourceTemplateReference(type="ref/resource", uri="note://sdk/{name}")
        notes = await client.complete(template, {"name": "name", "value": "G"})
    assert text(echoed) == '{"to": "era"}'
    assert text(booked) == "booked 2 to Oslo"  # the upstream's question reached the client of the routed call
    assert [message.content.text for message in prompt.messages] == ["Say hello to Ada."]  # type: ignore[union-attr]
    contents = read.contents[0]
    assert isinstance(contents, TextResourceContents)
    assert (contents.uri, contents.text) == ("note://sdk/readme", "read me")  # the URI the client asked for
    assert [(each.uri, getattr(each, "text", None)) for each in expanded.contents] == [("note://sdk/mine", "note mine")]
    assert (names.completion.values, notes.completion.values) == (["Ada", "Alan"], ["Grace"])


async def test_a_name_or_uri_with_no_upstreams_prefix_is_refused_naming_it() -> None:
    async with two("legacy") as client:
        refused = []
        for attempt in (
            client.call_tool("nope_echo", {}),
            client.call_tool("echo", {}),
            client.get_prompt("era_greeting", {}),
            client.read_resource("note://nope/readme"),
            client.read_resource("note:readme"),
        ):
            with pytest.raises(MCPError) as error:
                await attempt
            refused.append((error.value.code, error.value.error.message))
        assert text(await client.call_tool("era_echo", {})) == "{}"  # and the gateway serves on
    assert refused == [
        (INVALID_PARAMS, "unknown tool 'nope_echo': its name begins with none of this gateway's prefixes (sdk_, era_)"),
        (INVALID_PARAMS, "unknown tool 'echo': its name begins with none of this gateway's prefixes (sdk_, era_)"),
        (INVALID_PARAMS, "unknown prompt 'era_greeting': upstream 'one-era' serves no prompts"),
        (
            INVALID_PARAMS,
            "unknown resource 'note://nope/readme': its URI carries none of this gateway's prefixes (sdk, era) as the "
            "first segment after its scheme",
        ),
        (
            INVALID_PARAMS,
            "unknown resource 'note:readme': its URI carries none of this gateway's prefixes (sdk, era) as the first "
            "segment after its scheme",
        ),
    ]


@pytest.mark.parametrize("era", ERAS)
async def test_a_list_change_of_the_second_upstream_reaches_clients_of_both_eras(era: str) -> None:
    heard = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            heard.set()

    async with two(era, message_handler=on_message) as client:
        if era == "legacy":
            assert text(await client.call_tool("era_announce", {})) == "announced"
            with anyio.fail_after(10):
                await heard.wait()
        else:
            async with client.listen(tools_list_changed=True) as changes:
                assert text(await client.call_tool("era_announce", {})) == "announced"
                with anyio.fail_after(10):
                    event = await changes.__anext__()
            assert isinstance(event, ToolsListChanged)


async def test_an_upstream_that_went_away_is_left_out_of_lists_and_announced_when_it_is_back() -> None:
    back = anyio.Event()

    async def on_message(message: object) -> None:
        if isinstance(message, ToolListChangedNotification):
            back.set()

    sdk = Served(lambda: sdk_server.streamable_http_app(host="127.0.0.1"))
    sdk.start()
    try:
        gateway = Gateway([Upstream("sdk", url=sdk.url, prefix="sdk", timeout=5), paged()])
        async with gateway.running(), connected(gateway, "legacy", message_handler=on_message) as client:
            sdk.stop()
            with pytest.raises(MCPError) as gone:
                await client.call_tool("sdk_pid", {})
            away = await list_tools(client)
            assert text(await client.call_tool("era_echo", {})) == "{}"  # the other upstream serves on
            sdk.start()
            with anyio.fail_after(30):  # the gateway connects again on its own schedule (a backoff)
                await back.wait()
            again = await list_tools(client)
    finally:
        sdk.stop()
    assert gone.value.error.message.startswith("upstream 'sdk' ")
    assert [tool.name for tool in away.tools] == ["era_echo", "era_malformed"]
    assert [tool.name for tool in again.tools][:2] == ["sdk_book", "sdk_reserve"]


async def test_an_upstream_that_cannot_start_is_named_and_none_serves() -> None:
    missing = Upstream("ledger", command=("no-such-command-anywhere",), prefix="ledger")
    with sdk_over_http() as url:
        gateway = Gateway([Upstream("sdk", url=url, prefix="sdk"), missing])
        with pytest.raises(UpstreamUnavailable) as refused:
            async with gateway.running():
                pytest.fail("the gateway ran without one of its upstreams")
    assert str(refused.value).startswith("upstream 'ledger' could not be started: FileNotFoundError")
