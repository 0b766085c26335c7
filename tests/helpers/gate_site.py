"""A served app with a gated refund tool answered on the web page (`Fallback.WEB`), and what its body ran."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Annotated, Any

from mcp import Client
from mcp_types import CallToolResult
from pydantic import Field

from mcp_elicit import Fallback, Flow, Gate
from mcp_elicit.server import Elicitation
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.web_answers import web_site


class Refunds:
    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []

    def build(self, elicitation: Elicitation) -> None:
        ran = self.ran

        @elicitation.tool(fallback=Fallback.WEB, gate=Gate(editable=["amount"]))
        async def refund(flow: Flow, order: str, amount: Annotated[int, Field(ge=1, le=500)]) -> str:
            ran.append({"order": order, "amount": amount})
            return f"refunded {amount} on {order}"


@contextmanager
def gate_site(store_url: str) -> Iterator[tuple[Site, Refunds]]:
    refunds = Refunds()
    with web_site(store_url, "gate-web", refunds.build) as served:
        yield served, refunds


async def call(site: Site, era: str, **arguments: object) -> CallToolResult:
    """A call from an in-process client that declares no elicitation: the approval goes to the web page."""
    async with Client(site.server, mode=era) as client:
        return await client.call_tool("refund", dict(arguments))
