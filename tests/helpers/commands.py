"""The installed `mcp-elicit` command, run as a user runs it: output captured, no store or token of this shell.

Most tests that run the command are about what it does, not about a process starting: yet a new interpreter
spends a second and more of CPU importing the package and the MCP SDK before the command does anything, and the
system tier runs the command hundreds of times. So `command` forks it instead, from a forkserver that imported
those once (`FORKS`), and runs the entry point the installed script runs (`mcp_elicit.cli:main`). The fork is
still a process of its own, given what a new process is given: its argv; exactly the environment passed, not
this process's (the time zone and the temporary directory read again from it); its working directory; stdin
from the null device (no command reads it); stdout and stderr to files, read back as
`subprocess.run(..., capture_output=True, text=True)` would; the exit code Python would exit with (a
`SystemExit`'s, or 1 after `sys.excepthook` printed an uncaught exception); SIGKILL at its timeout. It inherits
nothing of the test's process (no event loop, no pytest capture, no logging or signal handlers), and coverage
measures it as any subprocess (its data file is named after its own pid).

What it is not: a fresh interpreter. What the preload imported is not imported again, so import-time behaviour
is not exercised here; `FORKS` therefore preloads nothing that reads the environment or the terminal when
imported (the command modules of `mcp_elicit.cli`, whose consoles take their width and colours from the
environment then, nor typer, which reads `TYPER_USE_RICH` and `TERMINAL_WIDTH`): those are imported by each
command as it runs. Tests about the process itself run the installed script: startup imports
(tests/system/test_cli_startup.py), `--version`, install and packaging, terminals, signals and crashes.

`spawn` leaves the fork running, as `subprocess.Popen` would (`Forked`): for a server the test talks to, such
as `serve --transport http` answering `/readyz`. SIGTERM ends it as it ends the installed script (coverage's
handler writes its data, then the server's own shuts it down), and SIGKILL kills it as any process: a test
whose subject is what the store recovers after a kill may fork the victim too.
"""

from __future__ import annotations

import contextlib
import io
import locale
import multiprocessing
import multiprocessing.process
import os
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Mapping, Sequence
from pathlib import Path

from tests.helpers.server import PRELOAD as SERVER_PRELOAD

COMMAND = str(Path(sys.executable).with_name("mcp-elicit"))
"""The installed script."""

COMMAND_PRELOAD = (
    "mcp_elicit.server",
    "mcp_elicit.client",
    "mcp_elicit.store",
    "mcp_elicit.settings",
    "mcp_elicit.web",
    "mcp.client.stdio",
    "mcp.client.streamable_http",
    "mcp.client.auth",
    "uvicorn",
    "prompt_toolkit",
    "rich.console",
    "rich.table",
    "rich.markdown",
)
"""What the commands import at run time, less whatever reads the environment or terminal on import."""

FORKS = multiprocessing.get_context("forkserver")
FORKS.set_forkserver_preload(["tests.helpers.commands", *COMMAND_PRELOAD, "tests.helpers.server", *SERVER_PRELOAD])
"""The one forkserver of a test process (a process has one: its preload list is set here, for the commands and
for the servers tests/helpers/overlapping.py forks)."""


def command(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    timeout: float,
    cwd: str | Path | None = None,
) -> subprocess.CompletedProcess[str]:
    """`mcp-elicit *args` forked from `FORKS`, in `cwd` (this directory), with exactly `env` as its environment,
    as `subprocess.run([COMMAND, *args], capture_output=True, text=True, stdin=DEVNULL, ...)` would run it."""
    argv = [COMMAND, *args]
    with tempfile.TemporaryDirectory(prefix="mcp-elicit-command-") as scratch:
        stdout, stderr = Path(scratch, "stdout"), Path(scratch, "stderr")
        process = FORKS.Process(
            target=_be_the_command,
            args=(argv, dict(env), str(cwd or os.getcwd()), str(stdout), str(stderr)),
            name="mcp-elicit",
        )
        process.start()
        process.join(timeout)
        if process.exitcode is None:
            process.kill()
            process.join()
            raise subprocess.TimeoutExpired(argv, timeout, output=_text(stdout), stderr=_text(stderr))
        return subprocess.CompletedProcess(argv, process.exitcode, _text(stdout), _text(stderr))


class Forked:
    """A forked `mcp-elicit` still running, handled as the `subprocess.Popen` it stands for: `pid`, `poll`,
    `wait` (raising `subprocess.TimeoutExpired`), `send_signal`, `terminate`, `kill`, and `returncode` as Popen
    gives it (minus the signal's number when a signal ended it). Signals reach it as they would a real process,
    so SIGTERM ends a server as in production and (under COVERAGE=1) its coverage data is written."""

    def __init__(self, process: multiprocessing.process.BaseProcess, args: list[str]) -> None:
        self._process = process
        self.args = args
        self.pid: int = process.pid or 0

    @property
    def returncode(self) -> int | None:
        return self._process.exitcode

    def poll(self) -> int | None:
        return self._process.exitcode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            raise subprocess.TimeoutExpired(self.args, timeout or 0)
        return self._process.exitcode

    def send_signal(self, number: int) -> None:
        if self._process.exitcode is None:
            os.kill(self.pid, number)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


def spawn(
    args: Sequence[str],
    *,
    env: Mapping[str, str],
    output: str | Path,
    errors: str | Path | None = None,
    cwd: str | Path | None = None,
) -> Forked:
    """`mcp-elicit *args` forked from `FORKS` and left running, as `subprocess.Popen([COMMAND, *args], env=env,
    stdin=DEVNULL, stdout=..., stderr=...)` would start it: stdout to the file `output`, stderr to `errors` (to
    the same file, interleaved as one descriptor, when not given). For a server a test talks to, not for a test
    of the process's start, its signals or its exit."""
    argv = [COMMAND, *args]
    process = FORKS.Process(
        target=_be_the_command,
        args=(argv, dict(env), str(cwd or os.getcwd()), str(output), str(errors or output)),
        name="mcp-elicit",
        daemon=True,  # ended with the test process rather than waited for, should a test leave one running
    )
    process.start()
    return Forked(process, argv)


def cli(*args: str, store: str | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    """An operator command (`decisions ...`) on `store`, 160 columns wide."""
    full_env = {**os.environ, "COLUMNS": "160", **(env or {})}
    full_env.pop("MCP_ELICIT_STORE", None)
    if store is not None:
        full_env["MCP_ELICIT_STORE"] = store
    return command(args, env=full_env, timeout=60)


def run(*args: str, env: dict[str, str] | None = None, timeout: float = 90) -> subprocess.CompletedProcess[str]:
    """Any command (`call` a server, say), 200 columns wide, with no terminal to read from."""
    full_env = {**os.environ, "COLUMNS": "200", **(env or {})}
    for name in ("MCP_ELICIT_STORE", "MCP_ELICIT_TOKEN", "MCP_ELICIT_TOKEN_FILE"):
        if env is None or name not in env:
            full_env.pop(name, None)
    return command(args, env=full_env, timeout=timeout)


def _text(path: Path) -> str:
    """What `subprocess.run(text=True)` decodes: the locale's encoding, universal newlines."""
    if not path.exists():
        return ""
    with path.open(encoding=locale.getpreferredencoding(False)) as file:
        return file.read()


def _be_the_command(argv: list[str], env: dict[str, str], cwd: str, stdout: str, stderr: str) -> None:
    """The forked child: made the process `subprocess.run` would have started, then the script's entry point."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    time.tzset()
    tempfile.tempdir = None  # TMPDIR is read on first use, and the preload may have used it
    sys.argv = list(argv)
    for fd, path, flags in (
        (0, os.devnull, os.O_RDONLY),
        (1, stdout, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
        (2, stderr, os.O_WRONLY | os.O_CREAT | os.O_TRUNC),
    ):
        if fd == 2 and path == stdout:
            os.dup2(1, 2)  # one file: one descriptor, one offset, as `stderr=STDOUT` gives
            continue
        opened = os.open(path, flags, 0o600)
        os.dup2(opened, fd)
        os.close(opened)
    encoding, _, errors = env.get("PYTHONIOENCODING", "").partition(":")
    encoding = encoding or locale.getpreferredencoding(False)
    sys.stdin = sys.__stdin__ = _stream(0, "r", encoding, errors or "strict")  # type: ignore[misc]
    sys.stdout = sys.__stdout__ = _stream(1, "w", encoding, errors or "strict")  # type: ignore[misc]
    sys.stderr = sys.__stderr__ = _stream(2, "w", encoding, "backslashreplace", line_buffering=True)  # type: ignore[misc]
    signal.signal(signal.SIGINT, signal.default_int_handler)
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)
    signal.signal(signal.SIGPIPE, signal.SIG_IGN)
    from mcp_elicit.cli import main

    code: int
    try:
        main()
        code = 0
    except SystemExit as exit:
        if exit.code is None or isinstance(exit.code, int):
            code = exit.code or 0
        else:
            print(exit.code, file=sys.stderr)
            code = 1
    except BaseException:
        sys.excepthook(*sys.exc_info())  # typer's, when the command set one: the traceback a person sees
        code = 1
    for stream in (sys.stdout, sys.stderr):
        with contextlib.suppress(Exception):
            stream.flush()
    raise SystemExit(code)


def _stream(fd: int, mode: str, encoding: str, errors: str, *, line_buffering: bool = False) -> io.TextIOWrapper:
    raw = io.FileIO(fd, mode, closefd=False)
    buffered = io.BufferedReader(raw) if mode == "r" else io.BufferedWriter(raw)
    return io.TextIOWrapper(buffered, encoding=encoding, errors=errors, line_buffering=line_buffering)
