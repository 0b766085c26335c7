"""A question answered on the web pages as a person does it: the page from the tool's answer, a sign-in, a post."""

from __future__ import annotations

import re
from collections.abc import AsyncIterator, Callable
from contextlib import AbstractContextManager, asynccontextmanager
from typing import Any

import httpx2
from mcp_types import CallToolResult

from mcp_elicit.server import Elicitation
from mcp_elicit.web import ApiKeyEntry
from tests.helpers.pages_site import McpSite as Site
from tests.helpers.pages_site import hidden, mcp_site
from tests.helpers.results import error_text

USERS = "alice:wonderland:Alice Liddell,bob:builder:Bob"


def web_site(
    store_url: str, name: str, build: Callable[[Elicitation], None], flows: dict[str, ApiKeyEntry] | None = None
) -> AbstractContextManager[Site]:
    """A served app with the URL pages and local sign-in, `build`'s tools on it, for alice to answer on."""
    return mcp_site(store_url, name, build, users=USERS, flows=flows)


@asynccontextmanager
async def browser_of() -> AsyncIterator[httpx2.AsyncClient]:
    async with httpx2.AsyncClient(timeout=30) as browser:
        yield browser


def page_url(result: CallToolResult) -> str:
    message = error_text(result)
    found = re.search(r"answer at (\S+) \(open until [^)]+\)", message)
    assert found, message
    assert "then call this tool again with the same arguments" in message
    return found.group(1)


async def sign_in(browser: httpx2.AsyncClient, site: Site, user: str, password: str) -> None:
    form = await browser.get(f"{site.base}/signin", params={"next": "/"})
    response = await browser.post(
        f"{site.base}/signin",
        data={"username": user, "password": password, "next": "/", "csrf": hidden(form.text, "csrf")},
    )
    assert response.status_code == 303, response.text


async def submit(
    browser: httpx2.AsyncClient, url: str, page: str, action: str, **fields: str | list[str]
) -> httpx2.Response:
    data: dict[str, Any] = {"csrf": hidden(page, "csrf"), "action": action}
    data.update({f"f.{name}": value for name, value in fields.items()})
    return await browser.post(f"{url}/answer", data=data)
