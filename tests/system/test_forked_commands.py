"""The forked `mcp-elicit` of tests.helpers.commands answers as the installed script does: the same output,
errors and exit code for the same arguments, environment and directory, and nothing of the test's process."""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers.commands import COMMAND, FORKS, command


def installed(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [COMMAND, *args], capture_output=True, text=True, env=env, cwd=cwd, stdin=subprocess.DEVNULL, timeout=60
    )


def same(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.CompletedProcess[str]:
    forked, real = command(args, env=env, cwd=cwd, timeout=60), installed(args, env, cwd)
    assert (forked.returncode, forked.stdout, forked.stderr) == (real.returncode, real.stdout, real.stderr)
    assert forked.args == real.args
    return forked


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, str]:
    """A narrow terminal's width and a store of its own; this process names another store, never passed on."""
    monkeypatch.setenv("MCP_ELICIT_STORE", "bogus://the-test-process")
    passed = {key: value for key, value in os.environ.items() if key != "MCP_ELICIT_STORE"}
    return {**passed, "COLUMNS": "47", "XDG_DATA_HOME": str(tmp_path / "data"), "TZ": "Pacific/Auckland"}


def test_a_listing_reads_the_environment_and_directory_it_is_given(tmp_path: Path, env: dict[str, str]) -> None:
    (tmp_path / "here").mkdir()
    listed = same(["decisions", "ls", "--store", "sqlite:here/elicit.db"], env, tmp_path)
    assert listed.returncode == 0, listed.stderr
    assert "No decisions" in listed.stderr
    assert (tmp_path / "here" / "elicit.db").exists()
    default = same(["decisions", "ls"], env, tmp_path)
    assert str(tmp_path / "data") in default.stderr, "the store of the environment given, not of this process"


def test_a_usage_error_is_drawn_at_the_width_it_is_given(tmp_path: Path, env: dict[str, str]) -> None:
    refused = same(["decisions", "no-such-command"], env, tmp_path)
    assert refused.returncode == 2
    assert max(len(line) for line in refused.stderr.splitlines()) == 47


def test_a_failure_exits_with_the_commands_code(tmp_path: Path, env: dict[str, str]) -> None:
    failed = same(["decisions", "show", "nothing-like-it", "--store", "bogus://x"], env, tmp_path)
    assert failed.returncode == 2, failed.stderr


def test_a_command_past_its_timeout_is_killed(tmp_path: Path, env: dict[str, str]) -> None:
    stalled = f"{shlex.quote(sys.executable)} -c 'import time; time.sleep(5)'"
    with pytest.raises(subprocess.TimeoutExpired):
        command(["call", stalled, "anything"], env=env, cwd=tmp_path, timeout=1)


def loaded() -> list[str]:
    return sorted(sys.modules)


def test_the_forkserver_imports_nothing_that_reads_the_environment_on_import() -> None:
    """The command modules' consoles and typer take widths and colours when imported: each command imports them."""
    with FORKS.Pool(1) as pool:
        modules = pool.apply(loaded)
    assert "mcp" in modules and "mcp_elicit.server" in modules, "the preload is what saves the time"
    assert not [name for name in modules if name.partition(".")[0] == "typer" or name.startswith("mcp_elicit.cli.")]
