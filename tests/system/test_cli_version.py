"""`mcp-elicit --version`, run as the installed command."""

from __future__ import annotations

import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

COMMAND = str(Path(sys.executable).with_name("mcp-elicit"))


def test_version_prints_the_installed_package_version() -> None:
    ran = subprocess.run([COMMAND, "--version"], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"mcp-elicit {version('mcp-elicit')}\n"
    assert version("mcp-elicit") != ""


def test_version_wins_over_a_command() -> None:
    ran = subprocess.run([COMMAND, "--version", "serve"], capture_output=True, text=True, timeout=60, check=False)
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"mcp-elicit {version('mcp-elicit')}\n"
