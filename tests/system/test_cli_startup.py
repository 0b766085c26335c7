"""`mcp-elicit --version` and `decisions ls` load none of what serving, calling and the demo need.

The command's entry point runs in a fresh interpreter, which then reports every module it loaded: a command
that starts at once is one that imports only what it uses (the MCP SDK, the web layer, telemetry and the
PostgreSQL driver cost a second and more together). Times are measured in bench/cli_start.py, never here.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.metadata import version
from pathlib import Path

import pytest

RUN_AND_REPORT = """
import json, sys
from mcp_elicit.cli import main

sys.argv = ["mcp-elicit", *sys.argv[1:]]
try:
    main()
finally:
    print(json.dumps(sorted(sys.modules)))
"""

HEAVY = (
    "mcp",
    "psycopg",
    "psycopg_pool",
    "starlette",
    "authlib",
    "opentelemetry",
    "httpx",
    "uvicorn",
    "prompt_toolkit",
    "pydantic_settings",
    "mcp_elicit.settings",
    "mcp_elicit.server",
    "mcp_elicit.client",
    "mcp_elicit.web",
    "mcp_elicit.reference",
    "mcp_elicit.telemetry",
    "mcp_elicit.cli.serve",
    "mcp_elicit.cli.call",
    "mcp_elicit.cli.login",
    "mcp_elicit.cli.demo",
    "mcp_elicit.cli.doctor",
    "mcp_elicit.cli.install",
)
"""Packages (with everything under them) neither command may load."""


def run(*args: str, store: str | None = None) -> tuple[subprocess.CompletedProcess[str], set[str]]:
    env = {**os.environ, "COLUMNS": "160"}
    env.pop("MCP_ELICIT_STORE", None)
    if store is not None:
        env["MCP_ELICIT_STORE"] = store
    ran = subprocess.run(
        [sys.executable, "-c", RUN_AND_REPORT, *args], capture_output=True, text=True, env=env, timeout=60, check=False
    )
    *output, loaded = ran.stdout.splitlines()
    ran.stdout = "".join(f"{line}\n" for line in output)
    return ran, set(json.loads(loaded))


def heavy(loaded: set[str]) -> list[str]:
    return sorted(name for name in loaded if any(name == top or name.startswith(f"{top}.") for top in HEAVY))


def test_version_loads_no_command() -> None:
    ran, loaded = run("--version")
    assert ran.returncode == 0, ran.stderr
    assert ran.stdout == f"mcp-elicit {version('mcp-elicit')}\n"
    assert "mcp_elicit.cli" in loaded
    assert heavy(loaded) == []
    assert not {name for name in loaded if name.startswith("mcp_elicit.cli.")}
    assert "mcp_elicit.store" not in loaded


@pytest.mark.parametrize("json_output", [False, True])
def test_listing_an_empty_sqlite_store_loads_only_the_store(tmp_path: Path, json_output: bool) -> None:
    url = f"sqlite://{tmp_path / 'empty.db'}"
    ran, loaded = run("decisions", "ls", *(["--json"] if json_output else []), store=url)
    assert ran.returncode == 0, ran.stderr
    if json_output:
        assert json.loads(ran.stdout) == []
    else:
        assert f"No decisions in {url}." in ran.stderr
    assert {"mcp_elicit.cli.decisions", "mcp_elicit.store.sqlite"} <= loaded
    assert heavy(loaded) == []
