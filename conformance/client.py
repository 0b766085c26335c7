"""The conformance client: `@modelcontextprotocol/conformance client` runs it per scenario, built only on the kit.

The suite starts a scenario server and runs `python -m conformance.client <server-url>` with the scenario in
`MCP_CONFORMANCE_SCENARIO` and its spec version in `MCP_CONFORMANCE_PROTOCOL_VERSION`. Everything here goes
through `ElicitingClient` and a scripted handler, the way a host would use the kit: what the scenarios
check (`requestState` echoed byte for byte with a new JSON-RPC id and nothing carried into another call, a
result without `resultType` taken as complete, per-request `_meta` with the declared capabilities and a
retry at a supported version) is the kit's own behaviour. Defaults in an accepted form are the handler's:
the kit sends an answer as the handler gave it, and the scripted handler, like a form that pre-fills the
schema's defaults, answers with every default its script entry leaves out.

Exit status: 0 when the scenario ran to its end, 1 when a call failed or returned something unexpected, 2
for a scenario this client does not implement.
"""

from __future__ import annotations

import os
import sys
from collections.abc import Awaitable, Callable

import anyio
from mcp_types import CallToolResult, TextContent

from mcp_elicit.client import (
    Accept,
    Cancel,
    ElicitingClient,
    FormReply,
    FormRequest,
    Http,
    ScriptedHandler,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.client.handler import Mode
from mcp_elicit.client.session import Era


class ScenarioFailed(Exception):
    pass


def era_for(spec_version: str) -> Era:
    """Pin the handshake for 2025-era scenarios; let a 2026-07-28 scenario negotiate as a host would."""
    return "2025-11-25" if spec_version.startswith("2025-") else "auto"


def expect_text(result: CallToolResult, wanted: str | None = None) -> str:
    if result.is_error or not result.content or not isinstance(result.content[0], TextContent):
        raise ScenarioFailed(f"unexpected tool result: {result.model_dump_json()}")
    text = result.content[0].text
    if wanted is not None and text != wanted:
        raise ScenarioFailed(f"expected {wanted!r}, got {text!r}")
    return text


async def elicitation_defaults(url: str, era: Era) -> None:
    """Accept the form as pre-filled: the scripted handler answers with the schema's defaults (SEP-1034)."""
    handler = ScriptedHandler([{"reply": "accept"}], modes=("form",))
    async with ElicitingClient(Http(url), handler, era=era) as client:
        await client.list_tools()
        text = expect_text(await client.call_tool("test_client_elicitation_defaults", {}))
    if not text.startswith("Elicitation completed"):
        raise ScenarioFailed(text)


class ConfirmAfterAnotherCall:
    """Confirms every question; before the first, runs an unrelated call while that round is open."""

    modes: frozenset[Mode] = frozenset({"form"})

    def __init__(self) -> None:
        self.client: ElicitingClient | None = None
        self.unrelated: str | None = None

    async def form(self, request: FormRequest) -> FormReply:
        if self.unrelated is None and self.client is not None:
            self.unrelated = expect_text(await self.client.call_tool("test_mrtr_unrelated", {}), "unrelated-ok")
        return Accept({"confirmed": True})

    async def url(self, request: UrlRequest) -> UrlReply:
        return Cancel()


async def request_state(url: str, era: Era) -> None:
    """Rounds with and without `requestState`, a call between rounds, and a result without `resultType`."""
    handler = ConfirmAfterAnotherCall()
    async with ElicitingClient(Http(url), handler, era=era) as client:
        handler.client = client
        await client.list_tools()
        expect_text(await client.call_tool("test_mrtr_echo_state", {}), "echo-state-ok")
        expect_text(await client.call_tool("test_mrtr_no_state", {}), "no-state-ok")
        expect_text(await client.call_tool("test_mrtr_no_result_type", {}), "no-result-type-test-ok")
    if handler.unrelated is None:
        raise ScenarioFailed("the unrelated call never ran")


async def request_metadata(url: str, era: Era) -> None:
    """Plain requests: the kit stamps the declared capabilities; negotiation retries a supported version."""
    async with ElicitingClient(Http(url), ScriptedHandler([]), era=era) as client:
        await client.list_tools()
        if client.protocol_version != "2026-07-28":
            raise ScenarioFailed(f"negotiated {client.protocol_version}, expected 2026-07-28")


SCENARIOS: dict[str, Callable[[str, Era], Awaitable[None]]] = {
    "elicitation-sep1034-client-defaults": elicitation_defaults,
    "sep-2322-client-request-state": request_state,
    "request-metadata": request_metadata,
}


def main(argv: list[str]) -> int:
    scenario = os.environ.get("MCP_CONFORMANCE_SCENARIO", "")
    spec_version = os.environ.get("MCP_CONFORMANCE_PROTOCOL_VERSION", "2026-07-28")
    if len(argv) != 2:
        print("usage: python -m conformance.client <server-url>", file=sys.stderr)
        return 2
    run = SCENARIOS.get(scenario)
    if run is None:
        print(f"scenario {scenario!r} is not implemented by this client", file=sys.stderr)
        return 2
    try:
        anyio.run(run, argv[1], era_for(spec_version))
    except ScenarioFailed as failed:
        print(f"{scenario}: {failed}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
