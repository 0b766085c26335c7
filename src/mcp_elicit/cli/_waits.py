"""Every wait of a call shown while it runs: a live status line at a terminal, the script's answers otherwise.

A URL flow the kit waits on must never be silent: the server's completion notification is optional, so a
person needs to see that the call waits for them, since when and until when, and to say "I'm done" or stop.
Nor may a call the server keeps in still-waiting rounds with no URL flow of its own (`RoundWaits`): the
person sees it wait, and may retry now or stop the call. At a terminal that is
`TerminalHandler.status_line`; with `--script` the script answers the same prompt
(`ScriptedHandler.follow`) and each wait is printed once with the answer, as the questions are.
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager

import anyio
from rich.console import Console
from rich.text import Text

from mcp_elicit.cli._shown import ShownHandler
from mcp_elicit.client import ElicitationHandler, ScriptedHandler, TerminalHandler
from mcp_elicit.client.handlers import WaitReply
from mcp_elicit.client.pending import Wait, WaitKind, WaitSource
from mcp_elicit.client.terminal_views import wait_summary

_SAID: dict[tuple[WaitKind, WaitReply], str] = {
    ("url_flow", "done"): "done (retry now)",
    ("url_flow", "stop"): "stop (cancel the flow)",
    ("server", "done"): "done (retry now)",
    ("server", "stop"): "stop (stop the call)",
}


class ScriptShown(ShownHandler):
    """A script's answers, shown; the script also answers the pending-flow prompts (`done`, `stop`)."""

    def __init__(self, script: ScriptedHandler, console: Console) -> None:
        super().__init__(script, console)
        self.script = script


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

    async with anyio.create_task_group() as group:
        group.start_soon(lambda: handler.script.follow(*sources, shown=shown))
        try:
            yield
        finally:
            group.cancel_scope.cancel()
