"""The gateway in front of the TypeScript reference server, `@modelcontextprotocol/server-everything` (pinned in
`.tools/` by `make tools`), over stdio: what a server of another language and SDK sends comes through the
gateway to the Python SDK's client, on both eras.
"""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import anyio
import pytest
from mcp_types import (
    ElicitRequestFormParams,
    LoggingMessageNotificationParams,
    PromptReference,
    TextContent,
    TextResourceContents,
)

from mcp_elicit.gateway import Gateway, Upstream
from tests.helpers.gateway import Person, connected, everything, sdk_over_http, set_level, text

pytestmark = pytest.mark.anyio


def texts(result: Any) -> list[str]:
    return [block.text for block in result.content if isinstance(block, TextContent)]


async def test_a_handshake_client_gets_every_family_progress_questions_and_logs() -> None:
    person = Person({"name": "Ada Lovelace"})
    reported: list[tuple[float, float | None]] = []
    logged = anyio.Event()
    heard: list[LoggingMessageNotificationParams] = []

    async def hear(params: LoggingMessageNotificationParams) -> None:
        heard.append(params)
        logged.set()

    async def progressed(progress: float, total: float | None, message: str | None) -> None:
        reported.append((progress, total))

    gateway = Gateway(everything())
    async with (
        gateway.running(),
        connected(gateway, "legacy", elicitation_callback=person, logging_callback=hear) as client,
    ):
        assert client.instructions  # the upstream's, passed on
        tools = {tool.name for tool in (await client.list_tools()).tools}
        assert {"echo", "get-sum", "trigger-long-running-operation", "trigger-elicitation-request"} <= tools
        assert text(await client.call_tool("echo", {"message": "hi"})) == "Echo: hi"
        assert text(await client.call_tool("get-sum", {"a": 2, "b": 3})) == "The sum of 2 and 3 is 5."
        ran = await client.call_tool(
            "trigger-long-running-operation", {"duration": 0.3, "steps": 3}, progress_callback=progressed
        )
        assert texts(ran) == ["Long running operation completed. Duration: 0.3 seconds, Steps: 3."]
        asked = await client.call_tool("trigger-elicitation-request", {})
        assert "- Name: Ada Lovelace" in "\n".join(texts(asked))
        prompt = await client.get_prompt("args-prompt", {"city": "Lima"})
        completed = await client.complete(
            PromptReference(type="ref/prompt", name="completable-prompt"), {"name": "department", "value": "Eng"}
        )
        resources = (await client.list_resources()).resources
        read = await client.read_resource(str(resources[0].uri))
        templates = (await client.list_resource_templates()).resource_templates
        assert client.server_capabilities.logging is not None
        await set_level(client, "debug")
        await client.call_tool("toggle-simulated-logging", {})  # logs once at once, then every 5 s
        with anyio.fail_after(10):
            await logged.wait()
        await client.call_tool("toggle-simulated-logging", {})
    assert reported == [(1, 3), (2, 3), (3, 3)]
    [question] = person.asked
    assert isinstance(question, ElicitRequestFormParams) and question.requested_schema["required"] == ["name"]
    [message] = prompt.messages
    assert isinstance(message.content, TextContent) and message.content.text == "What's weather in Lima?"
    assert completed.completion.values == ["Engineering"]
    assert isinstance(read.contents[0], TextResourceContents) and read.contents[0].text
    assert {template.uri_template for template in templates} >= {"demo://resource/dynamic/text/{resourceId}"}
    assert heard[0].logger is None and "message" in str(heard[0].data)  # "Debug-level message", at a random level


async def test_a_2026_client_is_relayed_and_the_upstream_told_it_cannot_be_asked() -> None:
    gateway = Gateway(everything())
    async with (
        gateway.running(),
        connected(gateway, "2026-07-28", elicitation_callback=Person({"name": "A"})) as client,
    ):
        assert text(await client.call_tool("echo", {"message": "hi"})) == "Echo: hi"
        prompt = await client.get_prompt("args-prompt", {"city": "Lima"})
        refused = await client.call_tool("trigger-elicitation-request", {})
    assert len(prompt.messages) == 1
    assert refused.is_error
    assert "the gateway cannot ask the client of tools/call 'trigger-elicitation-request' on the live call" in "".join(
        texts(refused)
    )


async def test_behind_a_gateway_of_several_its_names_carry_its_prefix_and_it_alone_is_given_the_log_level() -> None:
    logged = anyio.Event()

    async def hear(params: LoggingMessageNotificationParams) -> None:
        logged.set()

    with sdk_over_http() as url:
        # The SDK peer serves no logging: `logging/setLevel` is not sent to it (it would refuse it).
        gateway = Gateway([replace(everything(), prefix="everything"), Upstream("sdk", url=url, prefix="sdk")])
        async with gateway.running(), connected(gateway, "legacy", logging_callback=hear) as client:
            assert text(await client.call_tool("everything_get-sum", {"a": 2, "b": 3})) == "The sum of 2 and 3 is 5."
            resources = (await client.list_resources()).resources
            listed = [str(resource.uri) for resource in resources if str(resource.uri).startswith("demo://")]
            read = await client.read_resource(listed[0])
            assert client.server_capabilities.logging is not None
            await set_level(client, "debug")
            await client.call_tool("everything_toggle-simulated-logging", {})  # logs once at once, then every 5 s
            with anyio.fail_after(10):
                await logged.wait()
            await client.call_tool("everything_toggle-simulated-logging", {})
    assert listed and all(uri.startswith("demo://everything/") for uri in listed)
    assert [str(contents.uri) for contents in read.contents] == [listed[0]]
