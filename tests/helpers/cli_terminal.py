"""The installed `mcp-elicit` command in a real pseudo-terminal: keys in, screen text out, exit status.

Tests wait for what a person would see before pressing each key: a key sent while no prompt reads the
keyboard would land in the terminal's line editor, as it would for a person typing ahead.
"""

from __future__ import annotations

import os
import re
import signal
import time

import pexpect  # type: ignore[import-untyped]
import pytest

from tests.helpers.commands import COMMAND as COMMAND  # the installed script, where it always was

ROWS, COLS = 50, 140
UP, DOWN, ESC, CTRL_D = "\x1b[A", "\x1b[B", "\x1b", "\x04"
TEXT_PROMPT = "  > "
CHOICE = "Enter choose"
REVIEW = "d to decline. Esc cancels."
_CSI = re.compile(r"\x1b\[([0-9;?]*)([@-~])")
_OTHER_ESCAPES = re.compile(r"\x1b[()][0-9A-Za-z]|\x1b[=>78]|\x1b\][^\x07\x1b]*(?:\x07|\x1b\\)")
_BACKSPACED = re.compile(r"[^\n]\x08")


def screen_text(raw: str) -> str:
    """The output as text: styles dropped, cursor-forward moves (prompt_toolkit's spaces) made spaces."""

    def replace(match: re.Match[str]) -> str:
        return " " * int(match.group(1) or "1") if match.group(2) == "C" else ""

    return _BACKSPACED.sub("", _OTHER_ESCAPES.sub("", _CSI.sub(replace, raw)).replace("\r", ""))


def terminal_env(**extra: str) -> dict[str, str]:
    """A plain xterm without a graphical session, so nothing ever tries to start a browser."""
    env = {
        **os.environ,
        "TERM": "xterm",
        "LANG": "C.UTF-8",
        "PYTHONIOENCODING": "utf-8",
        "PROMPT_TOOLKIT_NO_CPR": "1",
        "COLUMNS": str(COLS),
        "LINES": str(ROWS),
        **extra,
    }
    for name in (
        "NO_COLOR",
        "DISPLAY",
        "WAYLAND_DISPLAY",
        "BROWSER",
        "MCP_ELICIT_STORE",
        "MCP_ELICIT_TOKEN",
        "MCP_ELICIT_TOKEN_FILE",
    ):
        if name not in extra:
            env.pop(name, None)
    return env


class Terminal:
    """One run of `mcp-elicit ARGS...` (or of `command`); `see` waits for texts in order, after what was seen."""

    def __init__(
        self,
        args: list[str],
        env: dict[str, str],
        *,
        command: str = COMMAND,
        timeout: float = 60.0,
        dimensions: tuple[int, int] = (ROWS, COLS),
    ) -> None:
        self.timeout = timeout
        self.child = pexpect.spawn(
            command,
            args,
            env=env,
            dimensions=dimensions,
            encoding="utf-8",
            codec_errors="replace",
            timeout=timeout,
        )
        self.raw = ""
        self._seen = 0

    @property
    def text(self) -> str:
        return screen_text(self.raw)

    def see(self, *texts: str) -> None:
        for text in texts:
            deadline = time.monotonic() + self.timeout
            while (found := self.text.find(text, self._seen)) < 0:
                if time.monotonic() > deadline or not self._read():
                    pytest.fail(f"{text!r} never showed; the screen after the last match:\n{self.text[self._seen :]}")
            self._seen = found + len(text)

    def search(self, pattern: str) -> re.Match[str]:
        """Wait for a regular expression after what was already seen; the match."""
        deadline = time.monotonic() + self.timeout
        while (match := re.compile(pattern).search(self.text, self._seen)) is None:
            if time.monotonic() > deadline or not self._read():
                pytest.fail(f"{pattern!r} never showed; the screen after the last match:\n{self.text[self._seen :]}")
        self._seen = match.end()
        return match

    def press(self, *keys: str) -> None:
        for key in keys:
            self.child.send(key)
            time.sleep(0.05)

    def answer(self, prompt: str, *keys: str) -> None:
        self.see(prompt)
        self.press(*keys)

    def review(self, *keys: str) -> None:
        """At the form's review: wait for the instructions, then for the prompt reading the keys."""
        self.see(REVIEW)
        self.answer(TEXT_PROMPT, *keys)

    def signal(self, number: signal.Signals) -> None:
        self.child.kill(number)

    def finish(self) -> int:
        """Read to the end; the exit status (128 + N when killed by signal N)."""
        deadline = time.monotonic() + self.timeout
        while self._read():
            if time.monotonic() > deadline:
                pytest.fail(f"still running after {self.timeout} s; the screen:\n{self.text[-3000:]}")
        self.child.close()
        if self.child.exitstatus is None:
            return 128 + int(self.child.signalstatus)
        return int(self.child.exitstatus)

    def _read(self) -> bool:
        try:
            self.raw += self.child.read_nonblocking(65536, timeout=0.2)
        except pexpect.TIMEOUT:
            return True
        except pexpect.EOF:
            return False
        return True

    def close(self) -> None:
        if self.child.isalive():
            self.child.terminate(force=True)
