"""Every wait of a call shown while it runs: a live status line at a terminal, the script's answers otherwise.

A URL flow the kit waits on must never be silent: the server's completion notification is optional, so a
person needs to see that the call waits for them, since when and until when, and to say "I'm done" or stop.
Nor may a call the server keeps in still-waiting rounds with no URL flow of its own (`RoundWaits`): the
person sees it wait, and may retry now or stop the call. At a terminal that is
`TerminalHandler.status_line`; with `--script` the script answers the same prompt
(`ScriptedHandler.follow`) and each wait is printed once with the answer, as the questions are.

A question the script has no entry for stops the call (`OnMissing.FAIL`): answering `cancel` for it would
record a decision nobody made and let the tool go on as if someone had, so the call is cancelled as a
request instead (the question stays open on a durable server) and the command fails naming it.
`OnMissing.CANCEL` answers `cancel`, as the kit's `ScriptedHandler` does on its own.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from enum import StrEnum

import anyio
from rich.console import Console
from rich.text import Text

from mcp_elicit.cli._failures import CALL_FAILED, CommandFailed
from mcp_elicit.cli._render import preview
from mcp_elicit.cli._shown import ShownHandler
from mcp_elicit.client import (
    Cancel,
    ElicitationHandler,
    FormReply,
    FormRequest,
    ScriptedHandler,
    TerminalHandler,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.client.handlers import WaitReply
from mcp_elicit.client.pending import Wait, WaitKind, WaitSource
from mcp_elicit.client.terminal_views import wait_summary
from mcp_elicit.printable import printable

_SAID: dict[tuple[WaitKind, WaitReply], str] = {
    ("url_flow", "done"): "done (retry now)",
    ("url_flow", "stop"): "stop (cancel the flow)",
    ("server", "done"): "done (retry now)",
    ("server", "stop"): "stop (stop the call)",
}


class OnMissing(StrEnum):
    """What a question the script has no entry for gets."""

    FAIL = "fail"
    CANCEL = "cancel"


class ScriptShown(ShownHandler):
    """A script's answers, shown; the script also answers the pending-flow prompts (`done`, `stop`)."""

    def __init__(self, script: ScriptedHandler, console: Console, on_missing: OnMissing = OnMissing.CANCEL) -> None:
        super().__init__(script, console)
        self.script = script
        self.on_missing = on_missing
        self.unanswered: FormRequest | UrlRequest | None = None
        """The question the script had no entry for, which stopped the call."""
        self.stopped = anyio.Event()

    async def form(self, request: FormRequest) -> FormReply:
        if self.on_missing is OnMissing.CANCEL or self.script.answers(request.message, "form"):
            return await super().form(request)
        self._show_form(request)
        return await self._stop(request)

    async def url(self, request: UrlRequest) -> UrlReply:
        if self.on_missing is OnMissing.CANCEL or self.script.answers(request.message, "url"):
            return await super().url(request)
        self._show_url(request)
        return await self._stop(request)

    async def _stop(self, request: FormRequest | UrlRequest) -> Cancel:
        """Stop the call (`waits_shown` cancels it) and answer nothing: this waits until that cancel arrives."""
        self._say("The script has no answer for this question: the call stops", "bold red")
        self.unanswered = request
        self.stopped.set()
        await anyio.sleep_forever()
        return Cancel()  # never reached: the call's cancel ends the wait above


def unanswered_failure(request: FormRequest | UrlRequest) -> CommandFailed:
    """The command's failure for a question the script had no entry for: its message, which an entry's `match`
    is tested against, and its fields, which an entry's `content` answers."""
    if isinstance(request, UrlRequest):
        kind = "URL mode"
    else:
        fields = request.requested_schema.get("properties")
        kind = f"form fields: {', '.join(fields)}" if isinstance(fields, dict) and fields else "a form"
    after = ""
    if isinstance(request, FormRequest) and request.problem:
        after = f" after its answer was not accepted ({printable(request.problem)})"
    return CommandFailed(
        f"the script has no answer for the question {preview(request.message)!r} ({kind}){after}: the call "
        "stopped and left it unanswered; add an entry whose match the question contains, or pass "
        "--on-missing cancel",
        CALL_FAILED,
    )


@asynccontextmanager
async def waits_shown(
    handler: ElicitationHandler,
    source: WaitSource | Sequence[WaitSource],
    console: Console,
    clock: Callable[[], float],
) -> AsyncIterator[None]:
    """While inside, the waits of `source` (one or several) are shown and steered by whoever answers the
    questions.

    `clock` is the client's (the waits' times are on it). A handler that is neither the terminal's nor a
    script's (nobody to ask) shows nothing: there is nobody to act on a wait either.
    """
    sources = tuple(source) if isinstance(source, Sequence) else (source,)
    if isinstance(handler, TerminalHandler):
        async with handler.status_line(*sources, clock=clock):
            yield
        return
    if not isinstance(handler, ScriptShown):
        yield
        return

    def shown(wait: Wait, reply: WaitReply | None) -> None:
        console.print(Text(wait_summary(wait, clock()), style="bold"))
        said = _SAID[wait.kind, reply] if reply is not None else "nothing (no entry fits: the wait goes on)"
        console.print(Text(f"Answered by the script: {said}", style="bold"))

    async def stop_when_unanswered() -> None:
        await handler.stopped.wait()
        group.cancel_scope.cancel()

    async with anyio.create_task_group() as group:
        group.start_soon(lambda: handler.script.follow(*sources, shown=shown))
        group.start_soon(stop_when_unanswered)
        try:
            yield
        finally:
            group.cancel_scope.cancel()
    if handler.unanswered is not None:
        raise unanswered_failure(handler.unanswered)
