"""A real HTTP server on loopback for tests: uvicorn in a thread, bearer tokens checked by the SDK."""

from __future__ import annotations

import itertools
import os
import socket
import subprocess
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

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
}


class StaticTokenVerifier:
    """Knows a fixed set of tokens; stands for an authorization server's introspection."""

    async def verify_token(self, token: str) -> AccessToken | None:
        return TOKENS.get(token)


PORTS_PER_WORKER = 1500
FIRST_PORT = 20000
"""Ports tests listen on lie below the kernel's ephemeral range (32768 up on Linux), one block per xdist worker.

A port the kernel handed out for a probe is free only until the next outgoing connection or another worker's
probe takes it, which on a busy run happens before the server binds it; a block of our own does not move.
"""

_next_port = itertools.count()


def _worker_block() -> int:
    worker = os.environ.get("PYTEST_XDIST_WORKER", "gw0").removeprefix("gw")
    return FIRST_PORT + (int(worker) % 8 if worker.isdigit() else 0) * PORTS_PER_WORKER


def free_port() -> int:
    """A loopback port nothing listens on, from this worker's block, not handed out before in this process."""
    first = _worker_block()
    for _ in range(PORTS_PER_WORKER):
        port = first + next(_next_port) % PORTS_PER_WORKER
        with socket.socket() as probe:
            try:
                probe.bind(("127.0.0.1", port))
            except OSError:
                continue
            return port
    raise RuntimeError(f"no free loopback port in {first}..{first + PORTS_PER_WORKER - 1}")


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


def wait_for_port(port: int, process: subprocess.Popen[bytes], *, timeout: float = 30.0) -> None:
    """Until a subprocess listens on `port` on loopback; fails at once if it died."""
    deadline = time.monotonic() + timeout
    while True:
        with socket.socket() as probe:
            if probe.connect_ex(("127.0.0.1", port)) == 0:
                return
        if process.poll() is not None or time.monotonic() > deadline:
            raise RuntimeError(f"nothing listens on {port}")
        time.sleep(0.05)
