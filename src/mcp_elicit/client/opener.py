"""Opening a consented URL: the only place the kit lets anything touch an elicitation's URL.

The kit never fetches a URL-mode URL itself (no prefetch, no preview, no metadata) and calls the opener
only after the person's explicit consent. The default opener hands the URL to the system browser, where
neither this client nor a model can read the page or what the person types. Hosts replace it for other
surfaces, and tests or scripted demos replace it with whatever completes the flow without a browser.

An opener returns False (or raises) when it could not open the URL; returning True or None means opened.
A synchronous opener runs in a worker thread, since a browser launch may block; when what it returns is
awaitable (a lambda or partial around a coroutine function), that is awaited on the event loop, since an
unawaited coroutine would count as "opened" without ever running.
"""

from __future__ import annotations

import inspect
import logging
import webbrowser
from collections.abc import Awaitable, Callable
from typing import cast

import anyio.to_thread

log = logging.getLogger(__name__)

UrlOpener = Callable[[str], Awaitable[bool | None] | bool | None]


def system_browser(url: str) -> bool:
    """Open in a new window of the person's default browser."""
    return webbrowser.open(url, new=2)


async def open_with(opener: UrlOpener, url: str) -> str | None:
    """Open `url` with `opener`; None if it opened, otherwise why not."""
    try:
        if _is_async(opener):
            opened: object = await cast(Callable[[str], Awaitable[bool | None]], opener)(url)
        else:
            opened = await anyio.to_thread.run_sync(cast(Callable[[str], object], opener), url)
        if inspect.isawaitable(opened):
            opened = await opened
    except Exception as error:
        log.warning("the URL opener failed: %s", type(error).__name__)
        return f"the URL could not be opened ({type(error).__name__}: {error})"
    if opened is False:
        return "the URL could not be opened (no browser available)"
    return None


def _is_async(opener: UrlOpener) -> bool:
    """A coroutine function, or an object whose `__call__` is one (`functools.partial` is unwrapped)."""
    return inspect.iscoroutinefunction(opener) or inspect.iscoroutinefunction(getattr(opener, "__call__", None))  # noqa: B004
