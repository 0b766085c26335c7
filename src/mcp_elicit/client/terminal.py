"""An `ElicitationHandler` for a person at a terminal: rich prints the request, prompt_toolkit reads the answers.

A form is asked field by field (defaults filled in, each answer checked before the next field), then shown
back as a numbered table where the person submits, edits a field by number, or declines. A URL request
shows the full URL with its host highlighted, the ASCII host when it differs, and every warning of the
review, then waits for an explicit key: `o` consents, `d` declines. Enter alone never decides anything.

Decline and cancel stay apart, as the spec's result actions do: `d` in the review or at the URL prompt is
the person's explicit no (`Decline`), and nothing else declines; Esc or Ctrl-C in any prompt, Ctrl-D (the
input closing) or a closed terminal dismisses the request (`Cancel`). Ctrl-C between prompts, while
nothing reads the keyboard, is a signal and is left to the host's own handling. A choice starts on the
field's default or earlier answer, on "(no answer)" for an optional field, and otherwise on nothing: Enter
alone never picks an option the person did not move to.

One handler serves one terminal, and a person reads one request at a time: the handler asks one request
at a time, even for several clients sharing it (each client only queues its own questions), so two
prompts never read the same keyboard at once.

A schema that is not the spec's restricted form schema is not rendered at all: the person is told why and
the request is cancelled. Guessing what an unknown keyword means would show a form whose rules differ
from the server's (see `mcp_elicit.model.form_schema`). A URL that is not http(s) is shown but never offered: cancelled.
Nothing here opens or fetches a URL; the kit opens it after `Consent`.

While the kit waits on something a person is doing elsewhere (a URL flow in the browser, see
`pending.FlowWaits`), `status_line` keeps a live line on screen: what is awaited, the time elapsed, the
deadline, and two keys: `r` ("I'm done": retry now, since the server's completion notification is optional
and may never come) and `c` (cancel; Esc and Ctrl-C too, as in every prompt). A call the server keeps in
still-waiting rounds with no URL flow of its own (`mrtr_loop.RoundWaits`) gets the same line: `r` sends
the next round now, `c` stops the call. The line gives the keyboard up to any question and comes back
after it. Anything printed while it shows goes through `say`, above it.

`on_ctrl_c` lets a host take Ctrl-C over (see `terminal_input.Keyboard`), e.g. to stop on a second press.

The widgets need an asyncio event loop (prompt_toolkit's); they read the process's terminal unless
`input`/`output` are given, which is how tests drive them without one.
"""

from __future__ import annotations

import time
from collections.abc import AsyncIterator, Callable, Iterable, Sequence
from contextlib import asynccontextmanager
from typing import Literal

import anyio
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.input import Input
from prompt_toolkit.output import Output
from rich.console import Console, RenderableType
from rich.text import Text

from mcp_elicit.client.handler import (
    Accept,
    Cancel,
    Consent,
    Decline,
    FormReply,
    FormRequest,
    Mode,
    UrlReply,
    UrlRequest,
)
from mcp_elicit.client.pending import Wait, WaitSource
from mcp_elicit.client.terminal_input import Cancelled, Declined, Keyboard
from mcp_elicit.client.terminal_views import (
    WARNING_STYLE,
    asker_view,
    display,
    field_heading,
    printable,
    problem_line,
    review_table,
    url_view,
    wait_times,
    wait_title,
)
from mcp_elicit.model.form_schema import (
    Answer,
    Field,
    Form,
    UnsupportedSchema,
    parse_form,
    read_choices,
    read_text,
    text_of,
)

__all__ = ["TerminalHandler"]

NO_ANSWER = "(no answer)"
FORM_KEYS = "Enter accepts a field. Esc, Ctrl-C or Ctrl-D cancels the request; d at the review declines it."
WAIT_KEYS = "[r] I'm done: retry now   [c] cancel"
SERVER_WAIT_KEYS = "[r] retry now   [c] stop the call"
"""The keys when every wait shown is on the server alone: nobody is in the browser to be done."""
WAIT_IDLE = 0.2
"""Seconds between two looks for waits while the status line is not showing, and after a key acted on
one: the call moves on first (a retry ends this stretch of waiting), so the line never shows what was."""

WaitAction = Literal["retry", "cancel"]
_WAIT_ACTIONS: dict[str, WaitAction] = {"r": "retry", "R": "retry", "c": "cancel", "C": "cancel"}


class TerminalHandler:
    """Asks the person at this terminal; declares `modes` (both by default) to servers through the kit."""

    def __init__(
        self,
        *,
        modes: Iterable[Mode] = ("form", "url"),
        console: Console | None = None,
        input: Input | None = None,
        output: Output | None = None,
        on_ctrl_c: Callable[[], bool] | None = None,
    ) -> None:
        self._modes = frozenset(modes)
        self._console = console or Console(highlight=False, markup=False, emoji=False)
        self._keys = Keyboard(input, output, on_ctrl_c=on_ctrl_c)
        self._one_at_a_time = anyio.Lock()
        self._asking = 0
        """Questions waiting for the keyboard: the status line gives it up to them."""

    @property
    def modes(self) -> frozenset[Mode]:
        return self._modes

    async def form(self, request: FormRequest) -> FormReply:
        if "form" not in self._modes:
            return Cancel()
        async with self._keyboard():
            return await self._form(request)

    async def url(self, request: UrlRequest) -> UrlReply:
        if "url" not in self._modes:
            return Cancel()
        async with self._keyboard():
            return await self._url(request)

    @asynccontextmanager
    async def status_line(
        self, *sources: WaitSource, clock: Callable[[], float] = time.monotonic
    ) -> AsyncIterator[None]:
        """While inside: whenever a source has waits and no question is on screen, the live status line.

        `clock` is the kit's clock (the client's, `time.monotonic` unless replaced), which the waits' times
        are on. The keys act on every wait shown: in practice the waits of the one call in flight.
        """
        done = anyio.Event()
        async with anyio.create_task_group() as group:
            group.start_soon(self._show_waits, sources, clock, done)
            try:
                yield
            finally:
                done.set()

    def say(self, renderable: RenderableType) -> None:
        """Print now, or above the status line while it shows (printing under it would garble the screen)."""
        self._keys.above(lambda: self._console.print(renderable))

    @asynccontextmanager
    async def _keyboard(self) -> AsyncIterator[None]:
        """The keyboard for one question: the status line steps aside, other questions queue."""
        self._asking += 1
        try:
            await self._one_at_a_time.acquire()
        finally:
            self._asking -= 1
        try:
            yield
        finally:
            self._one_at_a_time.release()

    async def _show_waits(self, sources: Sequence[WaitSource], clock: Callable[[], float], done: anyio.Event) -> None:
        cancelled: set[tuple[int, str]] = set()  # by the person: never shown again while their call ends

        def current() -> list[tuple[int, Wait]]:
            return [
                (number, wait)
                for number, source in enumerate(sources)
                for wait in source.waits()
                if (number, wait.id) not in cancelled
            ]

        def wanted() -> bool:
            return not done.is_set() and not self._asking and bool(current())

        def lines() -> StyleAndTextTuples:
            now = clock()
            fragments: StyleAndTextTuples = []
            shown = current()
            for _, wait in shown:
                fragments += [("class:prompt", f"  {wait_title(wait)}\n"), ("", f"  {wait_times(wait, now)}\n")]
            keys = WAIT_KEYS if any(wait.kind == "url_flow" for _, wait in shown) else SERVER_WAIT_KEYS
            return [*fragments, ("class:hint", f"  {keys}"), ("[SetCursorPosition]", ""), ("", "\n")]

        while not done.is_set():
            if not wanted():
                with anyio.move_on_after(WAIT_IDLE):
                    await done.wait()
                continue
            async with self._one_at_a_time:
                if not wanted():
                    continue
                shown = current()
                try:
                    action = await self._keys.status(lines, _WAIT_ACTIONS, wanted=wanted)
                except Cancelled as dismissed:
                    if dismissed.closed:
                        self._say("The terminal's input closed: the kit goes on waiting, no key is read.", "dim")
                        return
                    action = "cancel"
                if action is not None:
                    acted_on = current() or shown
                    if action == "cancel":
                        cancelled.update((number, wait.id) for number, wait in acted_on)
                    self._act(action, [(sources[number], wait) for number, wait in acted_on])
            if action is not None:
                with anyio.move_on_after(WAIT_IDLE):
                    await done.wait()

    def _act(self, action: WaitAction, waits: list[tuple[WaitSource, Wait]]) -> None:
        if action == "retry":
            if any([source.retry_now(wait.id) for source, wait in waits]):
                self._say("Retrying now: the server is asked again.", "bold")
            else:
                self._say("The server is being asked right now: its answer comes back shortly.", "dim")
            return
        if any([source.cancel(wait.id, "cancelled at the terminal") for source, wait in waits]):
            if all(wait.kind == "server" for _, wait in waits):
                self._say("Stopped: the call ends here; nothing is withdrawn on the server.", "bold")
            else:
                self._say("Cancelled.", "bold")
        else:
            self._say("Nothing was left to cancel.", "dim")

    async def _form(self, request: FormRequest) -> FormReply:
        self._console.print(asker_view("Form request", request.asker, request.message))
        if request.problem:
            self._say(f"Your previous answer was not accepted: {printable(request.problem)}", WARNING_STYLE)
        try:
            form = parse_form(request.requested_schema)
        except UnsupportedSchema as why:
            self._say(f"This form cannot be shown faithfully: {printable(str(why))}.", WARNING_STYLE)
            self._say("Nothing was sent. The request is cancelled.", WARNING_STYLE)
            return Cancel()
        self._say(FORM_KEYS, "dim")
        try:
            answers = await _FormDialog(form, self._console, self._keys).run()
        except Cancelled:
            self._say("Cancelled: no answer was sent.", "bold")
            return Cancel()
        except Declined:
            self._say("Declined: the server is told you refused.", "bold")
            return Decline()
        self._say("Submitted.", "bold green")
        return Accept(content=answers)

    async def _url(self, request: UrlRequest) -> UrlReply:
        self._console.print(asker_view("Request to open a web page", request.asker, request.message))
        self._console.print(url_view(request.review))
        if not request.review.may_open:
            self._say("This is not a web (http or https) address: it will not be opened.", WARNING_STYLE)
            self._say("The request is cancelled.", WARNING_STYLE)
            return Cancel()
        self._say("Open this page in your browser? Nothing has been loaded from it yet.", "bold")
        keys: dict[str, UrlReply] = {"o": Consent(), "O": Consent(), "d": Decline(), "D": Decline()}
        try:
            reply = await self._keys.press("[o] open   [d] decline   [Esc] cancel", keys)
        except Cancelled:
            self._say("Cancelled: the page was not opened.", "bold")
            return Cancel()
        if isinstance(reply, Consent):
            self._say("Opening the page was allowed.", "bold green")
        else:
            self._say("Declined: the page will not be opened.", "bold")
        return reply

    def _say(self, text: str, style: str = "") -> None:
        self._console.print(Text(text, style=style))


class _FormDialog:
    """One form being answered: the fields in order, then review and edit until submitted."""

    def __init__(self, form: Form, console: Console, keys: Keyboard) -> None:
        self._form = form
        self._console = console
        self._keys = keys
        self._answers: dict[str, Answer] = {}
        self._asked: set[str] = set()

    async def run(self) -> dict[str, Answer]:
        for index in range(len(self._form.fields)):
            await self._ask(index)
        while True:
            if self._form.fields:
                self._console.print(review_table(self._form, self._answers))
            else:
                self._console.print(Text("This request asks for no answers."))
            problems = self._form.problems(self._answers)
            if problems:
                await self._fix(problems)
                continue
            choice = await self._review_choice()
            if choice is None:
                return dict(self._answers)
            await self._ask(choice)

    async def _fix(self, problems: dict[str, list[str]]) -> None:
        names = [field.name for field in self._form.fields]
        for name, found in problems.items():
            field = self._form.field(name)
            for problem in found:
                self._console.print(problem_line(field, problem))
        wrong = [index for index, name in enumerate(names) if name in problems]
        if not wrong:
            self._console.print(Text("The answers cannot satisfy this form.", style=WARNING_STYLE))
            raise Cancelled
        await self._ask(wrong[0])

    async def _review_choice(self) -> int | None:
        """None to submit, or the index of the field to edit; `Declined` on `d`."""
        count = len(self._form.fields)
        edit = f", a field number (1-{count}) to edit it" if count else ""
        self._console.print(Text(f"Type s to submit{edit}, d to decline. Esc cancels.", style="bold"))
        while True:
            typed = (await self._keys.text()).strip().lower()
            if typed in ("s", "submit"):
                return None
            if typed in ("d", "decline"):
                raise Declined
            if typed.isdigit() and 1 <= int(typed) <= count:
                return int(typed) - 1
            number = f", or a field number from 1 to {count}" if count else ""
            self._console.print(Text(f"  ! Type s to submit, d to decline{number}.", style=WARNING_STYLE))

    async def _ask(self, index: int) -> None:
        field = self._form.fields[index]
        self._console.print(field_heading(index + 1, len(self._form.fields), field))
        start = self._answers.get(field.name)
        if start is None and field.name not in self._asked:
            start = field.default
        self._asked.add(field.name)
        if field.kind in ("text", "integer", "number"):
            value = await self._type(field, start)
        else:
            value = await self._pick(field, start)
            self._console.print(Text(f"  > {printable(display(field, value))}"))
        if value is None:
            self._answers.pop(field.name, None)
        else:
            self._answers[field.name] = value

    async def _type(self, field: Field, start: Answer | None) -> Answer | None:
        typed = text_of(start)
        while True:
            typed = await self._keys.text(typed)
            try:
                value = read_text(field, typed)
            except ValueError as problem:
                problems = [str(problem)]
            else:
                problems = field.problems(value)
            if not problems:
                return value
            self._show(field, problems)

    async def _pick(self, field: Field, start: Answer | None) -> Answer | None:
        while True:
            value = await self._pick_once(field, start)
            problems = field.problems(value)
            if not problems:
                return value
            self._show(field, problems)
            start = value

    async def _pick_once(self, field: Field, start: Answer | None) -> Answer | None:
        optional = [] if field.required else [NO_ANSWER]
        if field.kind == "boolean":
            selected = {True: 0, False: 1}.get(start) if isinstance(start, bool) else _unanswered(field, 2)
            picked = await self._keys.choose_one(["yes", "no", *optional], selected)
            return (True, False, None)[picked]
        titles = [printable(choice.title) for choice in field.choices]
        values = [choice.value for choice in field.choices]
        if field.kind == "choice":
            if isinstance(start, str) and start in values:
                selected = values.index(start)
            else:
                selected = _unanswered(field, len(values))
            picked = await self._keys.choose_one([*titles, *optional], selected)
            return values[picked] if picked < len(values) else None
        checked = frozenset(values.index(item) for item in start if item in values) if isinstance(start, list) else None
        ticked = await self._keys.choose_many(titles, checked or frozenset())
        return read_choices(field, [value for index, value in enumerate(values) if index in ticked])

    def _show(self, field: Field, problems: list[str]) -> None:
        for problem in problems:
            self._console.print(problem_line(field, problem))


def _unanswered(field: Field, no_answer: int) -> int | None:
    """Where a choice without an answer starts: on "(no answer)" (at `no_answer`) if optional, else nowhere."""
    return None if field.required else no_answer
