"""The keyboard side of the terminal handler: a text line, a choice list, a checklist, a single key press.

Each widget is a short prompt_toolkit application run inline (never full screen), so everything said before
it stays in the scrollback. Keys mean the same everywhere: Esc or Ctrl-C raise `Cancelled` (nobody decided),
and so does a closed input: Ctrl-D, the terminal's end-of-input key, is read as the input closing (in a text
line it still deletes the character under the cursor, as it always does there, and closes the input on an
empty line). No key here declines: a decline is the person's explicit no, given only by its own choice
(`d` at a form's review or at the URL prompt, which raise `Declined` or return it).

Esc is not bound eagerly: a terminal sends Alt-key combinations, and arrow keys on a slow link, as Esc
followed by more bytes, and an eager Esc would cancel the whole request on them. prompt_toolkit waits
`ESCAPE_TIMEOUT` seconds for the rest of such a sequence instead, then takes a lone Esc for Esc.

Choice lists start with nothing highlighted unless there is an answer to start from (a default, an earlier
answer, or "no answer" for an optional field): Enter does nothing until the person has moved to an option,
so no option is ever chosen for them.

A host may take Ctrl-C over (`Keyboard(on_ctrl_c=...)`): it hears of every Ctrl-C that dismisses a widget,
once the widget is gone and before the dismissal is acted on, and may answer that this press stops the
whole program (a second press in a row, say); the widget then answers nothing at all and waits to be
cancelled, so no decision goes out on the way down.

`status` is the one widget that shows no question: a live status line, redrawn every `STATUS_REFRESH`
seconds until a key is pressed or the host says it is no longer wanted.

Widgets return what was picked or typed and judge nothing: the form flow checks answers and asks again.
Every label they show must already be safe to print (`terminal_views.printable`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

import anyio
from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application, run_in_terminal
from prompt_toolkit.application.current import set_app
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.input.typeahead import get_typeahead, store_typeahead
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent, merge_key_bindings
from prompt_toolkit.keys import Keys
from prompt_toolkit.layout import HSplit, Layout, Window
from prompt_toolkit.layout.controls import FormattedTextControl
from prompt_toolkit.output import Output
from prompt_toolkit.styles import Style

__all__ = ["Cancelled", "Declined", "Keyboard"]

T = TypeVar("T")

STYLE = Style.from_dict(
    {
        "cursor-line": "reverse",
        "checked": "bold",
        "hint": "italic",
        "prompt": "bold",
    }
)


ESCAPE_TIMEOUT = 0.3
"""Seconds to wait after Esc for the rest of an escape sequence (Alt-key, arrow) before taking it alone."""


STATUS_REFRESH = 0.5
"""Seconds between two drawings of a live status line (it shows elapsed seconds)."""
STATUS_POLL = 0.1
"""Seconds between two looks at whether a live status line is still wanted."""


class Cancelled(Exception):
    """Esc, Ctrl-C or a closed input (Ctrl-D): the dialog was dismissed without a decision.

    `ctrl_c`: it was Ctrl-C; `closed`: the input closed, so nothing more can be read from it. `presses`: how
    many Ctrl-C came before the widget was gone (a quick second press is read with the first, or while the
    widget goes): each counts for a host that stops on a second press.
    """

    def __init__(self, *, ctrl_c: bool = False, closed: bool = False) -> None:
        super().__init__("closed" if closed else "Ctrl-C" if ctrl_c else "cancelled")
        self.ctrl_c = ctrl_c
        self.closed = closed
        self.presses = 1 if ctrl_c else 0


class Declined(Exception):
    """The person chose to refuse the whole request (`d` at the review)."""


def _exits(*, closing: bool) -> KeyBindings:
    """Esc and Ctrl-C cancel; with `closing`, Ctrl-D too (a text line has its own end-of-input handling)."""
    bindings = KeyBindings()

    @bindings.add("escape")
    def _cancel(event: KeyPressEvent) -> None:
        _exit(event, Cancelled())

    @bindings.add("c-c", eager=True)
    def _interrupt(event: KeyPressEvent) -> None:
        _exit(event, Cancelled(ctrl_c=True))

    if closing:

        @bindings.add("c-d", eager=True)
        def _closed(event: KeyPressEvent) -> None:
            _exit(event, Cancelled(closed=True))

    return bindings


def _exit(event: KeyPressEvent, error: Cancelled) -> None:
    """Dismiss the widget; keys typed ahead before it is gone find it already dismissed and change nothing."""
    if not event.app.is_done:
        event.app.exit(exception=error)


def _escape_timeouts(application: Application[T]) -> Application[T]:
    application.ttimeoutlen = ESCAPE_TIMEOUT
    application.timeoutlen = ESCAPE_TIMEOUT
    return application


class Keyboard:
    """The widgets, reading from one terminal (the process's own unless `input`/`output` are given)."""

    def __init__(
        self, input: Input | None = None, output: Output | None = None, *, on_ctrl_c: Callable[[], bool] | None = None
    ) -> None:
        self._input = input
        self._output = output
        self._on_ctrl_c = on_ctrl_c
        self._live: Application[Any] | None = None

    async def text(self, default: str = "") -> str:
        """One line of text, starting from `default`, which the person edits or accepts with Enter."""
        session: PromptSession[str] = PromptSession(
            history=InMemoryHistory(),
            input=self._input,
            output=self._output,
            key_bindings=_exits(closing=False),
            style=STYLE,
            enable_system_prompt=False,
            enable_suspend=False,
            enable_open_in_editor=False,
        )
        _escape_timeouts(session.app)
        try:
            return await session.prompt_async([("class:prompt", "  > ")], default=default, handle_sigint=False)
        except EOFError:
            raise Cancelled(closed=True) from None
        except Cancelled as dismissed:
            if dismissed.ctrl_c:
                dismissed.presses += _ctrl_c_typed_ahead(session.app.input)
            await self._dismissed(dismissed)
            raise

    async def choose_one(self, options: Sequence[str], selected: int | None = None) -> int:
        """The index of one option: arrows (or j/k) move, a digit jumps to that number, Enter picks.

        The highlight starts on `selected` (the current answer, marked `(*)`); with None it starts nowhere and
        Enter does nothing until an option is highlighted.
        """
        state = _Cursor(len(options), selected)
        bindings = state.movement()

        @bindings.add("enter")
        def _pick(event: KeyPressEvent) -> None:
            if state.position is not None:
                event.app.exit(result=state.position)

        def lines() -> StyleAndTextTuples:
            fragments: StyleAndTextTuples = []
            for index, option in enumerate(options):
                here = index == state.position
                mark = "(*)" if index == selected else "( )"
                fragments += _line(here, f"{'>' if here else ' '} {mark} {index + 1}. {option}")
            hint = "↑/↓ or a number to choose · Enter choose" if state.position is None else "↑/↓ move · Enter choose"
            fragments.append(("class:hint", f"    {hint} · Esc cancel\n"))
            return fragments

        return await self._run(_application(lines, bindings, self._input, self._output))

    async def choose_many(self, options: Sequence[str], checked: frozenset[int] = frozenset()) -> frozenset[int]:
        """The indexes ticked: arrows move, Space ticks or unticks, a digit jumps, Enter confirms."""
        state = _Cursor(len(options), 0)
        ticked = set(checked)
        bindings = state.movement()

        @bindings.add("space")
        def _toggle(event: KeyPressEvent) -> None:
            if state.position is not None:
                ticked.symmetric_difference_update({state.position})

        @bindings.add("enter")
        def _confirm(event: KeyPressEvent) -> None:
            event.app.exit(result=frozenset(ticked))

        def lines() -> StyleAndTextTuples:
            fragments: StyleAndTextTuples = []
            for index, option in enumerate(options):
                here = index == state.position
                box = "[x]" if index in ticked else "[ ]"
                fragments += _line(here, f"{'>' if here else ' '} {box} {index + 1}. {option}", index in ticked)
            fragments.append(("class:hint", "    ↑/↓ move · Space tick · Enter confirm · Esc cancel\n"))
            return fragments

        return await self._run(_application(lines, bindings, self._input, self._output))

    async def press(self, prompt: str, keys: Mapping[str, T]) -> T:
        """What the key pressed stands for; any other key (Enter included) does nothing, so no choice is implied."""
        bindings = KeyBindings()
        for key, meaning in keys.items():

            @bindings.add(key)
            def _press(event: KeyPressEvent, meaning: T = meaning) -> None:
                event.app.exit(result=meaning)

        def lines() -> StyleAndTextTuples:
            return [("class:prompt", f"  {prompt} "), ("[SetCursorPosition]", ""), ("", "\n")]

        return await self._run(_application(lines, bindings, self._input, self._output))

    async def status(
        self, lines: Callable[[], StyleAndTextTuples], keys: Mapping[str, T], *, wanted: Callable[[], bool]
    ) -> T | None:
        """A live status line: `lines` drawn anew every `STATUS_REFRESH` seconds, until a key of `keys` is
        pressed (what it stands for) or `wanted()` turns false (None). Esc and Ctrl-C raise `Cancelled`."""
        bindings = KeyBindings()
        for key, meaning in keys.items():

            @bindings.add(key)
            def _press(event: KeyPressEvent, meaning: T = meaning) -> None:
                if not event.app.is_done:
                    event.app.exit(result=meaning)

        application: Application[T | None] = _application(lines, bindings, self._input, self._output)
        application.refresh_interval = STATUS_REFRESH

        async def unwanted() -> None:
            while wanted():
                await anyio.sleep(STATUS_POLL)
            if not application.is_done:
                application.exit(result=None)

        def start_watching() -> None:
            application.create_background_task(unwanted())

        self._live = application
        try:
            return await self._run(application, pre_run=start_watching)
        finally:
            self._live = None

    def above(self, show: Callable[[], None]) -> None:
        """Run `show` (which prints) now, or, while a status line is live, above it: printing under it would
        leave the line's drawing where the cursor no longer is, garbling the screen."""
        live = self._live
        if live is None or not live.is_running:
            show()
            return
        with set_app(live):
            run_in_terminal(show)

    async def _run(self, application: Application[T], pre_run: Callable[[], None] | None = None) -> T:
        try:
            return await application.run_async(pre_run=pre_run, handle_sigint=False)
        except EOFError:
            raise Cancelled(closed=True) from None
        except Cancelled as dismissed:
            if dismissed.ctrl_c:
                dismissed.presses += _ctrl_c_typed_ahead(application.input)
            await self._dismissed(dismissed)
            raise

    async def _dismissed(self, dismissed: Cancelled) -> None:
        """A Ctrl-C the host takes as the end of the program: answer nothing, wait to be cancelled."""
        if self._on_ctrl_c is None:
            return
        for _ in range(dismissed.presses):
            if self._on_ctrl_c():
                await anyio.sleep_forever()


def _ctrl_c_typed_ahead(input: Input) -> int:
    """Ctrl-C read with the one that dismissed the prompt: prompt_toolkit keeps keys read after its end for the
    next prompt, where a second press would count as a first. Taken out and counted; other keys stay."""
    ahead = get_typeahead(input)
    kept = [press for press in ahead if press.key != Keys.ControlC]
    store_typeahead(input, kept)
    return len(ahead) - len(kept)


class _Cursor:
    """The highlighted line of a list (None: none yet), moved by arrows, j/k, Home/End and digits."""

    def __init__(self, size: int, position: int | None) -> None:
        self.size = size
        self.position = None if position is None else min(max(position, 0), max(size - 1, 0))

    def movement(self) -> KeyBindings:
        bindings = KeyBindings()

        @bindings.add("up")
        @bindings.add("k")
        def _up(event: KeyPressEvent) -> None:
            self.position = self.size - 1 if self.position is None else (self.position - 1) % self.size

        @bindings.add("down")
        @bindings.add("j")
        @bindings.add("tab")
        def _down(event: KeyPressEvent) -> None:
            self.position = 0 if self.position is None else (self.position + 1) % self.size

        @bindings.add("home")
        def _first(event: KeyPressEvent) -> None:
            self.position = 0

        @bindings.add("end")
        def _last(event: KeyPressEvent) -> None:
            self.position = self.size - 1

        for digit in range(1, min(self.size, 9) + 1):

            @bindings.add(str(digit))
            def _jump(event: KeyPressEvent, index: int = digit - 1) -> None:
                self.position = index

        return bindings


def _line(here: bool, text: str, checked: bool = False) -> StyleAndTextTuples:
    style = "class:cursor-line" if here else ("class:checked" if checked else "")
    fragments: StyleAndTextTuples = [("", "  ")]
    if here:
        fragments.append(("[SetCursorPosition]", ""))
    return [*fragments, (style, text), ("", "\n")]


def _application(
    lines: Callable[[], StyleAndTextTuples], bindings: KeyBindings, input: Input | None, output: Output | None
) -> Application[T]:
    control = FormattedTextControl(lines, focusable=True, show_cursor=False)
    application: Application[T] = Application(
        layout=Layout(HSplit([Window(control, dont_extend_height=True, wrap_lines=True)])),
        key_bindings=merge_key_bindings([bindings, _exits(closing=True)]),
        style=STYLE,
        full_screen=False,
        erase_when_done=True,
        mouse_support=False,
        input=input,
        output=output,
    )
    return _escape_timeouts(application)
