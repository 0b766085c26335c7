"""A scripted "browser" that completes a URL-mode flow over HTTP, for unattended demo runs.

In `mcp-elicit demo --script FILE` nobody sits at a browser, yet the URL-mode scenarios must really happen:
the reference server's sign-in and principal check, its decision page, the provider's sign-in and consent,
the OAuth callback, the vault; or the provider's checkout, where it presses Pay, and back to the server's
page, which the provider's webhook completes. So after the scripted consent the client
kit hands the URL to this walker (it is injected as the kit's URL opener), and it clicks through the very
pages a person would see, with a cookie jar and without JavaScript, exactly as a person's browser submits
them.

It goes nowhere but the two origins it was given (the reference server and the provider), signs in with
the credentials it was given, presses Continue, Allow and Pay and nothing else, and stops with `WalkFailed`
when a page refuses it or it ends anywhere but on the server's "Done" page.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final
from urllib.parse import urljoin, urlsplit

import httpx2

from mcp_elicit.reference.demo_stack import Credentials
from mcp_elicit.reference.page_forms import Page, PageForm, read_page

MAX_PAGES: Final = 16
DONE: Final = "Done"
"""The heading of the reference server's page for a completed external flow."""


class WalkFailed(RuntimeError):
    """The walk did not reach the completed page; the message says where it stopped."""


@dataclass(frozen=True, slots=True)
class Walked:
    steps: tuple[str, ...]
    """What was done, in order, for the person reading the demo."""


@dataclass(frozen=True, slots=True)
class ScriptedBrowser:
    server_url: str
    provider_url: str
    user: Credentials
    provider_user: Credentials
    timeout: float = 30.0

    async def walk(self, url: str) -> Walked:
        try:
            return await self._walk(url)
        except httpx2.HTTPError as error:
            raise WalkFailed(f"{type(error).__name__}: {error}") from None

    async def _walk(self, url: str) -> Walked:
        steps: list[str] = []
        posted: set[tuple[str, str]] = set()
        paid = False
        async with httpx2.AsyncClient(timeout=self.timeout, follow_redirects=False) as browser:
            response = await browser.get(self._allowed(url))
            for _ in range(MAX_PAGES):
                if response.is_redirect:
                    response = await browser.get(
                        self._allowed(urljoin(str(response.url), response.headers["location"]))
                    )
                    continue
                page = read_page(response.text)
                if response.status_code == 200 and page.heading == DONE:
                    return Walked((*steps, f"the server's page says {DONE!r}"))
                origin = _origin(str(response.url))
                if paid and origin == _origin(self.server_url) and "reload this page" in response.text:
                    # Back from the checkout before the provider's webhook: the server tells the client when it
                    # arrives, and the page would say Done on a reload.
                    return Walked((*steps, "back on the server's page, which waits for the provider's confirmation"))
                chosen = self._next(page, origin)
                if chosen is None:
                    shown = page.heading or page.title or "a page without a heading"
                    raise WalkFailed(f"the flow stopped on {shown!r} (HTTP {response.status_code}) at {origin}")
                form, data, step = chosen
                if (origin, form.action) in posted:
                    raise WalkFailed(f"refused: {step} was asked for again ({page.heading or page.title!r})")
                posted.add((origin, form.action))
                steps.append(step)
                paid = paid or data.get("action") == "pay"
                response = await browser.post(self._allowed(urljoin(str(response.url), form.action)), data=data)
        raise WalkFailed(f"no outcome after {MAX_PAGES} pages")

    def _next(self, page: Page, origin: str) -> tuple[PageForm, dict[str, str], str] | None:
        """The form a person would submit next on this page, what they would type, and what that means."""
        if origin == _origin(self.server_url):
            if (form := page.form("/signin")) is not None:
                credentials = {"username": self.user.username, "password": self.user.password}
                return (
                    form,
                    {**form.hidden, **credentials},
                    f"signed in to the reference server as {self.user.username}",
                )
            if (form := page.form_ending("/continue")) is not None:
                return form, dict(form.hidden), "pressed Continue on the decision page"
        elif origin == _origin(self.provider_url):
            if (checkout := next((f for f in page.forms if f.action.startswith("/checkout/")), None)) is not None:
                return checkout, {**checkout.hidden, "action": "pay"}, "pressed Pay at the provider's checkout"
            if (form := page.form("/authorize/consent")) is not None:
                return form, {**form.hidden, "action": "allow"}, "pressed Allow at the provider"
            if (form := page.form("/authorize")) is not None:
                login = self.provider_user.username
                credentials = {"username": login, "password": self.provider_user.password}
                return form, {**form.hidden, **credentials}, f"signed in at the provider as {login}"
        return None

    def _allowed(self, url: str) -> str:
        if _origin(url) not in (_origin(self.server_url), _origin(self.provider_url)):
            raise WalkFailed(f"refused to leave the demo's servers for {_origin(url) or url!r}")
        return url


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}".lower() if parts.scheme and parts.netloc else ""
