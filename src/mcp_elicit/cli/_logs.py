"""Logging for the client commands: one short line per warning, no tracebacks, nothing below warnings.

`call` and `demo` share the terminal with the person answering questions; the SDK and the kit log a
refused elicitation or an unparsable server line with a full traceback, which would bury the prompt.
"""

from __future__ import annotations

import logging
import sys


class _OneLine(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return f"{record.levelname.lower()}: {record.getMessage()}"


def one_line_warnings() -> None:
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(_OneLine())
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(logging.WARNING)
