"""`mcp-elicit doctor` as installed, in a clean environment: its exit code, the problems listed, the checks passed."""

from __future__ import annotations

import base64
import os
from pathlib import Path

from tests.helpers.commands import command


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


GOOD = {
    "MCP_ELICIT_USERS": "alice:wonderland:Alice Liddell,bob:builder",
    "MCP_ELICIT_AUTH_KEYS": b64(b"A" * 32),
    "MCP_ELICIT_STATE_KEYS": f"{b64(b'S' * 32)},{b64(b'T' * 32)}",
    "MCP_ELICIT_VAULT_KEYS": "v2:" + b64(b"W" * 32) + ",v1:" + b64(b"V" * 32),
}


def clean_environment(tmp_path: Path, environ: dict[str, str]) -> dict[str, str]:
    """Only the path, a throwaway home and `environ`; and coverage's own variables, so that under COVERAGE=1 the
    command is measured like every other process the tests start."""
    measured = {name: value for name, value in os.environ.items() if name.startswith("COVERAGE_")}
    return {
        "PATH": os.environ["PATH"],
        "HOME": str(tmp_path),
        "XDG_DATA_HOME": str(tmp_path / "xdg"),
        **measured,
        **environ,
    }


def run(tmp_path: Path, environ: dict[str, str], *options: str) -> tuple[int, list[str], list[str]]:
    """The exit code, the problems listed and the checks passed."""
    done = command(["doctor", *options], env=clean_environment(tmp_path, environ), timeout=60)
    assert done.stderr == "" and "Traceback" not in done.stdout, done.stderr
    lines = done.stdout.splitlines()
    problems = [line.removeprefix("problem  ") for line in lines if line.startswith("problem  ")]
    fine = [line.removeprefix("ok       ") for line in lines if line.startswith("ok       ")]
    assert len(problems) + len(fine) == len(lines) - 1, done.stdout  # and one closing line
    return done.returncode, problems, fine
