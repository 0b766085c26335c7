"""The decision inbox served beside the URL pages (alice and bob ask, carol operates it), and how a test reaches it."""

from __future__ import annotations

import re
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager
from datetime import UTC, datetime, timedelta

import httpx2
import pytest
from mcp import Client
from mcp_types import CallToolResult
from starlette.routing import Route

from mcp_elicit.model import (
    Decision,
    DecisionOrigin,
    JSONObject,
    Operator,
    Principal,
    new_form_decision,
    new_operation,
    new_url_decision,
)
from mcp_elicit.model.decision import new_elicitation_id
from mcp_elicit.server import Accepted, Completed, Elicitation, Fallback, Flow
from mcp_elicit.web import ApiKeyEntry, UrlPages
from mcp_elicit.web.inbox import DecisionInbox, InboxSettings
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.pages_site import hidden, mcp_site
from tests.helpers.person import Person
from tests.helpers.server import Seats

USERS = "alice:wonderland:Alice Liddell,bob:builder:Bob,carol:operates:Carol"
PASSWORDS = {"alice": "wonderland", "bob": "builder", "carol": "operates"}
PAGE_SIZE = 3
SCHEMA: JSONObject = {
    "type": "object",
    "properties": {"seats": {"type": "integer", "minimum": 1}},
    "required": ["seats"],
}


def build_tools(elicitation: Elicitation) -> None:
    @elicitation.tool(fallback=Fallback.WEB)
    async def book(flow: Flow, city: str) -> str:
        seats = await flow.ask(f"How many seats to {city}?", Seats)
        return f"booked {seats.data.seats} to {city}" if isinstance(seats, Accepted) else type(seats).__name__.lower()

    @elicitation.tool(fallback=Fallback.WEB)
    async def set_key(flow: Flow) -> str:
        outcome = await flow.ask_url("Enter your Example API key", key="set_api_key")
        return "key stored" if isinstance(outcome, Completed) else type(outcome).__name__.lower()

    @elicitation.tool()
    async def connect(flow: Flow) -> str:
        outcome = await flow.ask_url("Connect your account", key="connect_account")
        return "connected" if isinstance(outcome, Completed) else type(outcome).__name__.lower()


def inbox_routes(pages: UrlPages, base: str) -> list[Route]:
    """The inbox beside the URL pages; carol is its operator; pages of `PAGE_SIZE`."""
    inbox = DecisionInbox(pages, InboxSettings(operators=frozenset({f"{base}#carol"}), page_size=PAGE_SIZE))
    return inbox.routes()


def inbox_site(store_url: str) -> AbstractContextManager[Site]:
    """The app with the inbox mounted beside the URL pages, alice's `set_api_key` flow among them."""
    flows = {"set_api_key": ApiKeyEntry(vault_name="example-api-key", service_title="Example")}
    return mcp_site(store_url, "inbox-test", build_tools, users=USERS, flows=flows, more_routes=inbox_routes)


@pytest.fixture
def site(store_url: str) -> Iterator[Site]:
    with inbox_site(store_url) as served:
        yield served


async def call(site: Site, era: str, tool: str, person: Person | None = None, **arguments: object) -> CallToolResult:
    """A call from an in-process client of alice's; without `person` it declares no elicitation at all."""
    async with Client(site.server, mode=era, elicitation_callback=person) as client:
        return await client.call_tool(tool, dict(arguments))


def recorded(
    site: Site,
    user: str,
    *,
    tool: str = "deploy",
    client: str = "client-x",
    url: bool = False,
    ttl: timedelta = timedelta(minutes=10),
    message: str = "Approve the deploy?",
    schema: JSONObject = SCHEMA,
) -> Decision:
    """A decision of `user`'s, asked by `tool` through `client`, recorded as the runtime records one."""
    principal = Principal(site.principal(user), client)
    now = datetime.now(UTC)
    operation = site.store.create_operation(
        new_operation(principal, method="tools/call", target=tool, request_digest="sha256:" + new_elicitation_id(),
                      now=now, ttl=timedelta(hours=1))
    )  # fmt: skip
    origin = DecisionOrigin(operation_id=operation.operation_id, key="q", principal=principal,
                            origin_method="tools/call", origin_request_digest=operation.request_digest)  # fmt: skip
    if url:
        elicitation_id = new_elicitation_id()
        decision = new_url_decision(origin, message=message, url=site.elicitation.decision_url(elicitation_id),
                                    now=now, ttl=ttl, elicitation_id=elicitation_id)  # fmt: skip
    else:
        decision = new_form_decision(origin, message=message, requested_schema=schema, now=now, ttl=ttl)
    return site.store.create_decision(decision)


def only(site: Site, tool_message: str) -> Decision:
    [decision] = [d for d in site.store.list_decisions(Operator()) if d.message == tool_message]
    return decision


@contextmanager
def browser() -> Iterator[httpx2.Client]:
    with httpx2.Client(timeout=30) as client:
        yield client


def sign_in(browser: httpx2.Client, site: Site, user: str) -> None:
    form = browser.get(f"{site.base}/signin", params={"next": "/inbox"})
    signed = browser.post(
        f"{site.base}/signin",
        data={"username": user, "password": PASSWORDS[user], "next": "/inbox", "csrf": hidden(form.text, "csrf")},
    )
    assert signed.status_code == 303 and signed.headers["location"] == "/inbox", signed.text


def token(html: str, elicitation_id: str, action: str) -> str:
    found = re.search(
        rf'action="/inbox/{elicitation_id}/{action}">\s*<input type="hidden" name="csrf" value="([^"]+)"', html
    )
    assert found, (elicitation_id, action)
    return found.group(1)
