"""Whether a browser can be started from here: the commands that open a page for the person use it alike."""

from __future__ import annotations

import os
import sys


def graphical_session() -> bool:
    """Whether a browser would open in a window, not take over this terminal (a console browser would)."""
    if sys.platform in ("darwin", "win32") or os.environ.get("BROWSER"):
        return True
    return bool(os.environ.get("DISPLAY") or os.environ.get("WAYLAND_DISPLAY"))
