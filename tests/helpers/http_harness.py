"""A real HTTP server on loopback for tests: uvicorn in a thread, bearer tokens checked by the SDK."""

from __future__ import annotations

import collections
import fcntl
import os
import random
import socket
import subprocess
import tempfile
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Protocol

import uvicorn
from mcp.server.auth.provider import AccessToken
from mcp.server.auth.settings import AuthSettings
from starlette.types import ASGIApp

ISSUER = "https://issuer.test"
TOKENS = {
    "token-alice": AccessToken(
        token="token-alice", client_id="client-a", scopes=["mcp"], subject="alice", claims={"iss": ISSUER}
    ),
    "token-bob": AccessToken(
        token="token-bob", client_id="client-a", scopes=["mcp"], subject="bob", claims={"iss": ISSUER}
    ),
    "token-alice-other-client": AccessToken(
        token="token-alice-other-client", client_id="client-b", scopes=["mcp"], subject="alice", claims={"iss": ISSUER}
    ),
    "token-without-subject": AccessToken(
        token="token-without-subject", client_id="client-a", scopes=["mcp"], subject=None, claims={"iss": ISSUER}
    ),
}


class StaticTokenVerifier:
    """Knows a fixed set of tokens; stands for an authorization server's introspection."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return TOKENS.get(token)


PORTS = range(20000, 32000)
"""Ports test servers listen on: below the kernel's ephemeral range (32768 up on Linux), so no outgoing
connection takes one between the probe and the server's bind."""
_PORT_LOCKS = Path(tempfile.gettempdir()) / "mcp-elicit-test-ports"
_HELD_AT_MOST = 256
_held: collections.deque[int] = collections.deque()


def free_port() -> int:
    """A loopback port nothing listens on and no other test process is handed meanwhile.

    Each port handed out stays locked (a lock file per port, shared by every pytest session and xdist worker
    on the machine) until this process has handed out 256 more: long enough for the server it was meant for
    to bind it.
    """
    _PORT_LOCKS.mkdir(exist_ok=True)
    start = random.randrange(len(PORTS))
    for offset in range(len(PORTS)):
        port = PORTS[(start + offset) % len(PORTS)]
        lock = os.open(_PORT_LOCKS / f"{port}.lock", os.O_CREAT | os.O_RDWR, 0o666)
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
            with socket.socket() as probe:
                probe.bind(("127.0.0.1", port))
        except OSError:
            os.close(lock)
            continue
        _held.append(lock)
        if len(_held) > _HELD_AT_MOST:
            os.close(_held.popleft())
        return port
    raise RuntimeError(f"no free loopback port in {PORTS.start}..{PORTS.stop - 1}")


def auth_settings(port: int) -> AuthSettings:
    return AuthSettings(
        issuer_url=ISSUER,  # type: ignore[arg-type]
        resource_server_url=f"http://127.0.0.1:{port}/mcp",  # type: ignore[arg-type]
        validate_token_resource=False,
        required_scopes=["mcp"],
    )


@contextmanager
def serving(app: ASGIApp, port: int) -> Iterator[str]:
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 10
    while not server.started:
        if time.monotonic() > deadline or not thread.is_alive():
            raise RuntimeError("the test HTTP server did not start")
        time.sleep(0.01)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)


class Child(Protocol):
    """A server process of a test: a `subprocess.Popen`, or the forked `mcp-elicit` of tests/helpers/commands.py."""

    def poll(self) -> int | None: ...
    def wait(self, timeout: float | None = None) -> int: ...
    def terminate(self) -> None: ...
    def kill(self) -> None: ...


def stop(process: Child, *, grace: float = 10.0) -> None:
    """End a test server at teardown: SIGTERM first, so it shuts down as in production and (under COVERAGE=1)
    writes its coverage data, then SIGKILL if it has not ended within `grace` seconds."""
    if process.poll() is None:
        process.terminate()
        try:
            process.wait(timeout=grace)
        except subprocess.TimeoutExpired:
            process.kill()
    process.wait(timeout=10)


def wait_for_port(port: int, process: Child, *, timeout: float = 60.0) -> None:
    """Until a subprocess listens on `port` on loopback; fails at once if it died.

    The deadline only bounds a start that hangs: a server under coverage on a loaded 2-core machine took over
    20 s to listen, and waiting longer costs nothing when it starts sooner."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0 and process.poll() is None:
                return  # ours listens, not a stranger's server while ours died on the port
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {port}")
        time.sleep(0.05)
