"""The keyboard side of the terminal handler: a text line, a choice list, a checklist, a single key press.

Each widget is a short prompt_toolkit application run inline (never full screen), so everything said before
it stays in the scrollback. Keys mean the same everywhere: Esc or Ctrl-C raise `Cancelled` (nobody decided),
Ctrl-D raises `Declined` (the person's explicit no), and a closed input is `Cancelled` too. Esc is bound
eagerly: prompt_toolkit would otherwise wait to see whether it starts an Alt-key sequence, and a person
pressing Esc expects the dialog gone at once. Arrow keys still work, since a terminal sends their whole
escape sequence at once.

Widgets return what was picked or typed and judge nothing: the form flow checks answers and asks again.
Every label they show must already be safe to print (`terminal_views.printable`).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import TypeVar

from prompt_toolkit import PromptSession
from prompt_toolkit.application import Application
from prompt_toolkit.formatted_text import StyleAndTextTuples
from prompt_toolkit.history import InMemoryHistory
from prompt_toolkit.input import Input
from prompt_toolkit.key_binding import KeyBindings, KeyPressEvent, merge_key_bindings
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


class Cancelled(Exception):
    """Esc, Ctrl-C or a closed input: the dialog was dismissed without a decision."""


class Declined(Exception):
    """Ctrl-D: the person refused the whole request."""


def _exits() -> KeyBindings:
    bindings = KeyBindings()

    @bindings.add("escape", eager=True)
    @bindings.add("c-c", eager=True)
    def _cancel(event: KeyPressEvent) -> None:
        event.app.exit(exception=Cancelled())

    @bindings.add("c-d", eager=True)
    def _decline(event: KeyPressEvent) -> None:
        event.app.exit(exception=Declined())

    return bindings


class Keyboard:
    """The widgets, reading from one terminal (the process's own unless `input`/`output` are given)."""

    def __init__(self, input: Input | None = None, output: Output | None = None) -> None:
        self._input = input
        self._output = output

    async def text(self, default: str = "") -> str:
        """One line of text, starting from `default`, which the person edits or accepts with Enter."""
        session: PromptSession[str] = PromptSession(
            history=InMemoryHistory(),
            input=self._input,
            output=self._output,
            key_bindings=_exits(),
            style=STYLE,
            enable_system_prompt=False,
            enable_suspend=False,
            enable_open_in_editor=False,
        )
        try:
            return await session.prompt_async([("class:prompt", "  > ")], default=default, handle_sigint=False)
        except EOFError:
            raise Cancelled from None

    async def choose_one(self, options: Sequence[str], selected: int | None = None) -> int:
        """The index of one option: arrows (or j/k) move, a digit jumps to that number, Enter picks."""
        state = _Cursor(len(options), selected or 0)
        bindings = state.movement()

        @bindings.add("enter")
        def _pick(event: KeyPressEvent) -> None:
            event.app.exit(result=state.position)

        def lines() -> StyleAndTextTuples:
            fragments: StyleAndTextTuples = []
            for index, option in enumerate(options):
                here = index == state.position
                mark = "(*)" if index == selected else "( )"
                fragments += _line(here, f"{'>' if here else ' '} {mark} {index + 1}. {option}")
            fragments.append(("class:hint", "    ↑/↓ move · Enter choose · Esc cancel · Ctrl-D decline\n"))
            return fragments

        return await self._run(_application(lines, bindings, self._input, self._output))

    async def choose_many(self, options: Sequence[str], checked: frozenset[int] = frozenset()) -> frozenset[int]:
        """The indexes ticked: arrows move, Space ticks or unticks, a digit jumps, Enter confirms."""
        state = _Cursor(len(options), 0)
        ticked = set(checked)
        bindings = state.movement()

        @bindings.add("space")
        def _toggle(event: KeyPressEvent) -> None:
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
            fragments.append(
                ("class:hint", "    ↑/↓ move · Space tick · Enter confirm · Esc cancel · Ctrl-D decline\n")
            )
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

    async def _run(self, application: Application[T]) -> T:
        try:
            return await application.run_async(handle_sigint=False)
        except EOFError:
            raise Cancelled from None


class _Cursor:
    """The highlighted line of a list, moved by arrows, j/k, Home/End and digits."""

    def __init__(self, size: int, position: int) -> None:
        self.size = size
        self.position = min(max(position, 0), max(size - 1, 0))

    def movement(self) -> KeyBindings:
        bindings = KeyBindings()

        @bindings.add("up")
        @bindings.add("k")
        def _up(event: KeyPressEvent) -> None:
            self.position = (self.position - 1) % self.size

        @bindings.add("down")
        @bindings.add("j")
        @bindings.add("tab")
        def _down(event: KeyPressEvent) -> None:
            self.position = (self.position + 1) % self.size

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
    return Application(
        layout=Layout(HSplit([Window(control, dont_extend_height=True, wrap_lines=True)])),
        key_bindings=merge_key_bindings([bindings, _exits()]),
        style=STYLE,
        full_screen=False,
        erase_when_done=True,
        mouse_support=False,
        input=input,
        output=output,
    )
