"""The installed `mcp-elicit` command, run as a user runs it: output captured, no store or token of this shell."""

from __future__ import annotations

import os
import subprocess

from tests.helpers.cli_terminal import COMMAND


def cli(*args: str, store: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """An operator command (`decisions ...`) on `store`, 160 columns wide."""
    full_env = {**os.environ, "COLUMNS": "160", **(env or {})}
    full_env.pop("MCP_ELICIT_STORE", None)
    if store is not None:
        full_env["MCP_ELICIT_STORE"] = store
    return subprocess.run([COMMAND, *args], capture_output=True, text=True, env=full_env, timeout=60, check=False)


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Any command (`call` a server, say), 200 columns wide, with no terminal to read from."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    for name in ("MCP_ELICIT_STORE", "MCP_ELICIT_TOKEN", "MCP_ELICIT_TOKEN_FILE"):
        if env is None or name not in env:
            full_env.pop(name, None)
    return subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, env=full_env, stdin=subprocess.DEVNULL, timeout=timeout
    )
