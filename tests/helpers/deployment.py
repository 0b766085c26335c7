"""The reference HTTP deployment as processes: two `mcp-elicit serve` instances on one store, the stand-in provider."""

from __future__ import annotations

import base64
import os
import subprocess
import sys
from collections.abc import AsyncIterator, Iterator
from contextlib import ExitStack, asynccontextmanager, contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import httpx2
import pytest
from mcp import Client
from mcp.client.streamable_http import streamable_http_client

from mcp_elicit.store import open_store
from tests.helpers.http_harness import free_port, stop, wait_for_port
from tests.helpers.oauth_client import code_for, pkce, redeem, registered


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).decode()


@dataclass
class Deployment:
    a: str
    b: str
    public: str
    provider: str
    store_url: str
    logs: list[Path] = field(default_factory=list)


@contextmanager
def processes(store_url: str, tmp_path: Path) -> Iterator[Deployment]:
    with ExitStack() as sinks:
        yield from _processes(store_url, tmp_path, sinks)


@contextmanager
def module_deployment(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Deployment]:
    """One deployment for all the tests of a module, on a SQLite store migrated before the processes start (two
    `serve` processes migrating one fresh file at once were seen to fail with "database is locked"). The tests
    share it as clients do a deployment: each signs in with a client registration of its own, so its calls are
    operations of their own, and finds its decisions by the id in their URL, never by listing the store."""
    run_dir = tmp_path_factory.mktemp("deployment")
    store_url = f"sqlite://{run_dir / 'elicit.db'}"
    open_store(store_url).close()
    with processes(store_url, run_dir) as running:
        yield running


def _processes(store_url: str, tmp_path: Path, sinks: ExitStack) -> Iterator[Deployment]:
    port_a, port_b, port_p = free_port(), free_port(), free_port()
    public = f"http://127.0.0.1:{port_b}"
    env = {
        **os.environ,
        "MCP_ELICIT_USERS": "alice:wonderland:Alice Liddell,bob:builder:Bob",
        "MCP_ELICIT_AUTH_KEYS": b64(b"A" * 32),
        "MCP_ELICIT_STATE_KEYS": b64(b"S" * 32),
        "MCP_ELICIT_VAULT_KEYS": "v1:" + b64(b"V" * 32),
        "MCP_ELICIT_PROVIDER_URL": f"http://127.0.0.1:{port_p}",
        "MCP_ELICIT_PROVIDER_CLIENT_ID": "elicit-reference",
        "MCP_ELICIT_PROVIDER_CLIENT_SECRET": "provider-secret",
    }
    started = [
        subprocess.Popen(
            [sys.executable, "-m", "mcp_elicit.reference.provider", "--port", str(port_p),
             "--client-id", "elicit-reference", "--redirect-uri", f"{public}/elicit/callback",
             "--user", "alice:wonderland:Alice Liddell", "--log-level", "warning"],
            env=env,
            stderr=sinks.enter_context((tmp_path / "provider.log").open("wb")),
        ),
    ]  # fmt: skip
    for port in (port_a, port_b):
        started.append(
            subprocess.Popen(
                [sys.executable, "-m", "mcp_elicit", "serve", "--transport", "http", "--port", str(port),
                 "--public-url", public, "--store", store_url, "--workspace", str(tmp_path / "workspace")],
                env=env,
                stderr=sinks.enter_context((tmp_path / f"serve-{port}.log").open("wb")),
            )
        )  # fmt: skip
    try:
        for port, process in zip((port_p, port_a, port_b), started, strict=True):
            wait_for_port(port, process)
        logs = [tmp_path / "provider.log", tmp_path / f"serve-{port_a}.log", tmp_path / f"serve-{port_b}.log"]
        yield Deployment(f"http://127.0.0.1:{port_a}", public, public, f"http://127.0.0.1:{port_p}", store_url, logs)
    finally:
        for process in started:
            stop(process)


@asynccontextmanager
async def mcp_on_a(
    deployment: Deployment, browser: httpx2.AsyncClient, era: str, **kwargs: object
) -> AsyncIterator[Client]:
    client_registration = await registered(deployment.public)
    verifier, challenge = pkce()
    code = await code_for(browser, deployment.public, client_registration, challenge)
    token = (await redeem(deployment.public, client_registration, code, verifier)).json()["access_token"]
    async with httpx2.AsyncClient(headers={"Authorization": f"Bearer {token}"}, timeout=60) as http:
        transport = streamable_http_client(f"{deployment.a}/mcp", http_client=http)
        async with Client(transport, mode=era, **kwargs) as client:  # type: ignore[arg-type]
            yield client
