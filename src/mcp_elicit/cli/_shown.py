"""A handler adapter that shows each question and the answer given, for runs where nobody types.

With `--script` the answers come from a file, yet the person reading the output (or a CI log) should see
what was asked, by whom, and what was answered, exactly as they would have at the terminal. The adapter
prints with the kit's own views, so a server's text is shown as safely as the terminal handler shows it.
"""

from __future__ import annotations

import json

from rich.console import Console
from rich.text import Text

from mcp_elicit.client import (
    Accept,
    Consent,
    Decline,
    ElicitationHandler,
    FormReply,
    FormRequest,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.client.handler import Mode
from mcp_elicit.client.terminal_views import asker_view, url_view
from mcp_elicit.printable import printable


class ShownHandler:
    """Delegates every question to `inner` and prints the question and its reply."""

    def __init__(self, inner: ElicitationHandler, console: Console, *, source: str = "script") -> None:
        self._inner = inner
        self._console = console
        self._source = source

    @property
    def modes(self) -> frozenset[Mode]:
        return self._inner.modes

    async def form(self, request: FormRequest) -> FormReply:
        self._show_form(request)
        reply = await self._inner.form(request)
        if isinstance(reply, Accept):
            answer = json.dumps(dict(reply.content), ensure_ascii=False, sort_keys=True)
            self._say(f"Answered by the {self._source}: accept {printable(answer)}", "bold green")
        else:
            self._say(f"Answered by the {self._source}: {_action(reply)}", "bold")
        return reply

    async def url(self, request: UrlRequest) -> UrlReply:
        self._show_url(request)
        reply = await self._inner.url(request)
        style = "bold green" if isinstance(reply, Consent) else "bold"
        self._say(f"Answered by the {self._source}: {_action(reply)}", style)
        return reply

    def _show_form(self, request: FormRequest) -> None:
        self._console.print(asker_view("Form request", request.asker, request.message))
        if request.problem:
            self._say(f"The previous answer was not accepted: {printable(request.problem)}", "bold red")

    def _show_url(self, request: UrlRequest) -> None:
        self._console.print(asker_view("Request to open a web page", request.asker, request.message))
        self._console.print(url_view(request.review))

    def _say(self, text: str, style: str) -> None:
        self._console.print(Text(text, style=style))


def _action(reply: object) -> str:
    if isinstance(reply, Consent):
        return "consent (open the page)"
    if isinstance(reply, Decline):
        return "decline"
    return "cancel (nobody decided)"
