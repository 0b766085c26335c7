"""A PostgreSQL server of a test's own, which the test may stop and restart.

The machine's shared server serves every other test at once, so a test that restarts PostgreSQL gets a
cluster of its own: Debian's `initdb` and `pg_ctl` (run as the `postgres` user when the tests run as root),
a data directory in a temporary folder, a free loopback port, trust authentication. Under `CI=true` a
machine without these binaries fails the test rather than skipping it.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from tests.helpers.http_harness import free_port


def _binaries() -> Path | None:
    versions = sorted(Path("/usr/lib/postgresql").glob("*/bin/pg_ctl"))
    return versions[-1].parent if versions else None


class PrivatePostgres:
    def __init__(self, binaries: Path, data: Path, port: int) -> None:
        self._binaries = binaries
        self._data = data
        self.port = port

    @property
    def url(self) -> str:
        return f"postgresql://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *arguments: str) -> None:
        command = [str(self._binaries / tool), *arguments]
        if os.geteuid() == 0:
            command = ["runuser", "-u", "postgres", "--", *command]
        subprocess.run(command, check=True, capture_output=True, timeout=120)

    def init(self) -> None:
        self._run("initdb", "-D", str(self._data), "-U", "postgres", "--auth=trust", "--no-sync")

    def start(self) -> None:
        options = f"-p {self.port} -k {self._data} -c listen_addresses=127.0.0.1 -c fsync=off"
        self._run("pg_ctl", "-D", str(self._data), "-o", options, "-w", "-l", str(self._data / "log"), "start")

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self._data), "-m", "fast", "-w", "stop")

    def restart(self) -> None:
        self.stop()
        self.start()


@contextmanager
def private_postgres() -> Iterator[PrivatePostgres]:
    binaries = _binaries()
    if binaries is None:
        if os.environ.get("CI") == "true":
            pytest.fail("PostgreSQL's server binaries (initdb, pg_ctl) are required under CI=true")
        pytest.skip("no PostgreSQL server binaries (Debian's postgresql package) on this machine")
    folder = Path(tempfile.mkdtemp(prefix="elicit-pg-"))
    data = folder / "data"
    if os.geteuid() == 0:
        shutil.chown(folder, "postgres")
    server = PrivatePostgres(binaries, data, free_port())
    server.init()
    server.start()
    try:
        yield server
    finally:
        try:
            server.stop()
        finally:
            shutil.rmtree(folder, ignore_errors=True)
