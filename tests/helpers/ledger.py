"""What a tool under test ran, recorded by the tool itself: "nothing ran" and "ran once, with these arguments" are
then facts of the test, not of the result's text."""

from __future__ import annotations

from typing import Any


class Ledger:
    def __init__(self) -> None:
        self.ran: list[dict[str, Any]] = []
