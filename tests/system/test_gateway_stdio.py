"""The stdio gateway's own transport (`mcp_elicit.server.stdio`), as a host meets it: on pipes the loop carries the
JSON lines; whatever the process writes to stdout meanwhile goes to stderr, never onto the wire; a line of
a megabyte goes through whole; and on a file, or a stdout that is stderr too, the SDK's transport serves as
before."""

from __future__ import annotations

import json
import os
import select
import shlex
import signal
import socket
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Callable
from contextlib import asynccontextmanager
from pathlib import Path
from typing import Any

import anyio
import pytest
from mcp import Client
from mcp.client.stdio import StdioServerParameters, stdio_client
from mcp_types import LoggingMessageNotificationParams, TextContent

from tests.helpers.commands import COMMAND

pytestmark = pytest.mark.anyio

ROOT = Path(__file__).resolve().parents[2]
SDK_SERVER = f"{shlex.quote(sys.executable)} -m tests.helpers.peers.sdk_server"
STRAY = (
    "import os, signal\n"
    "def stray(signum, frame):\n"
    "    os.write(1, b'stray bytes on fd 1\\n')\n"
    "    print('a stray print', flush=True)\n"
    "signal.signal(signal.SIGUSR1, stray)\n"
)
"""A `sitecustomize` that makes the gateway write to its stdout when told (SIGUSR1), as a careless library would."""


def gateway_command(tmp_path: Path) -> list[str]:
    store = f"sqlite://{tmp_path / 'gateway.db'}"
    return ["gateway", "--upstream", SDK_SERVER, "--era", "legacy", "--store", store]


def environment(tmp_path: Path, **extra: str) -> dict[str, str]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_ELICIT_")}
    return {**env, "TMPDIR": str(tmp_path), **extra}


@asynccontextmanager
async def hosted(tmp_path: Path, env: dict[str, str], log: Path, **options: Any) -> AsyncIterator[Client]:
    """The gateway launched by the SDK's client on pipes, as a host launches it (stderr to `log`)."""
    parameters = StdioServerParameters(command=COMMAND, args=gateway_command(tmp_path), env=env, cwd=ROOT)
    with log.open("w") as errlog:
        async with Client(stdio_client(parameters, errlog=errlog), mode="legacy", **options) as client:
            yield client


def child_running(marker: str) -> int:
    """The pid of this process's one child whose command line holds `marker`."""
    found = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            parent = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            line = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode()
        except (OSError, ValueError):
            continue
        if parent == os.getpid() and marker in line:
            found.append(int(entry.name))
    assert len(found) == 1, f"children running {marker!r}: {found}"
    return found[0]


async def test_what_the_gateway_writes_to_its_stdout_goes_to_stderr_and_the_wire_stays_whole(tmp_path: Path) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "sitecustomize.py").write_text(STRAY)
    env = environment(tmp_path, PYTHONPATH=os.pathsep.join([str(site), os.environ.get("PYTHONPATH", "")]))
    log = tmp_path / "gateway.log"
    async with hosted(tmp_path, env, log) as client:
        assert "pid" in [tool.name for tool in (await client.list_tools()).tools]
        os.kill(child_running(" gateway --upstream "), signal.SIGUSR1)
        with anyio.fail_after(10):
            while "a stray print" not in log.read_text():
                await anyio.sleep(0.05)
        result = await client.call_tool("pid", {})
        assert not result.is_error, result
    said = log.read_text()
    assert "stray bytes on fd 1" in said
    assert "a stray print" in said


async def test_a_line_of_a_megabyte_goes_through_whole_both_ways(tmp_path: Path) -> None:
    message = "".join(chr(0x41 + n % 26) for n in range(1 << 20)) + " ✓"
    heard: list[str] = []

    async def logged(params: LoggingMessageNotificationParams) -> None:
        heard.append(str(params.data))

    async with hosted(tmp_path, environment(tmp_path), tmp_path / "gateway.log", logging_callback=logged) as client:
        result = await client.call_tool("say", {"message": message})
        assert isinstance(result.content[0], TextContent)
        assert result.content[0].text == "said"
    assert heard == [message]


HANDSHAKE_AND_LIST = "".join(
    json.dumps(line) + "\n"
    for line in (
        {
            "jsonrpc": "2.0",
            "id": 1,
            "method": "initialize",
            "params": {
                "protocolVersion": "2025-11-25",
                "capabilities": {},
                "clientInfo": {"name": "h", "version": "1"},
            },
        },
        {"jsonrpc": "2.0", "method": "notifications/initialized"},
        {"jsonrpc": "2.0", "id": 2, "method": "tools/list"},
    )
)


def answers_in(text: str) -> dict[int, Any]:
    """The JSON-RPC answers among `text`'s lines (log lines too, when stdout is stderr)."""
    found = {}
    for line in text.splitlines():
        if line.startswith("{"):
            message = json.loads(line)
            found[message["id"]] = message
    return found


def converse(
    tmp_path: Path, stdout: Any, stderr: Any, read: Callable[[subprocess.Popen[bytes]], str]
) -> dict[int, Any]:
    """The gateway given the handshake and a `tools/list` on a pipe, its input kept open until `read` shows both
    answers (the end of its input ends the session, and the calls in flight with it), then closed."""
    process = subprocess.Popen(
        [COMMAND, *gateway_command(tmp_path)],
        stdin=subprocess.PIPE, stdout=stdout, stderr=stderr, env=environment(tmp_path), cwd=ROOT,
    )  # fmt: skip
    assert process.stdin is not None
    try:
        process.stdin.write(HANDSHAKE_AND_LIST.encode())
        process.stdin.flush()
        deadline = time.monotonic() + 60
        while len(answered := answers_in(read(process))) < 2:
            assert time.monotonic() < deadline, f"no answers in time: {read(process)}"
            time.sleep(0.05)
    finally:
        process.stdin.close()
        assert process.wait(timeout=60) == 0
        if process.stdout is not None:
            process.stdout.close()
    return answered


def test_a_stdout_that_is_a_file_is_served_by_the_sdks_transport(tmp_path: Path) -> None:
    answers = tmp_path / "answers.jsonl"
    with answers.open("wb") as stdout, (tmp_path / "gateway.log").open("wb") as stderr:
        answered = converse(tmp_path, stdout, stderr, lambda _: answers.read_text())
    assert answered[1]["result"]["serverInfo"]["name"] == "mcp-elicit-gateway"
    assert "pid" in [tool["name"] for tool in answered[2]["result"]["tools"]]


def test_a_stdout_that_is_stderr_too_is_served_by_the_sdks_transport(tmp_path: Path) -> None:
    """`2>&1`: the loop would make the shared open file non-blocking under the log's writes; the SDK's threads serve
    it, and the answers come out among the log lines."""
    said: list[str] = []

    def read(process: subprocess.Popen[bytes]) -> str:
        assert process.stdout is not None
        while select.select([process.stdout], [], [], 0)[0]:
            chunk = os.read(process.stdout.fileno(), 1 << 16)
            if not chunk:
                break
            said.append(chunk.decode())
        return "".join(said)

    answered = converse(tmp_path, subprocess.PIPE, subprocess.STDOUT, read)
    assert "pid" in [tool["name"] for tool in answered[2]["result"]["tools"]]


def test_one_socket_for_both_stdin_and_stdout_carries_the_whole_conversation(tmp_path: Path) -> None:
    """As `socat ... EXEC:` and inetd-style launchers start a server: a request arriving on the socket is no sign
    that the host stopped reading it, and every answer goes out."""
    host, gateway = socket.socketpair()
    with host, gateway, (tmp_path / "gateway.log").open("wb") as log:
        process = subprocess.Popen(
            [COMMAND, *gateway_command(tmp_path)],
            stdin=gateway.fileno(), stdout=gateway.fileno(), stderr=log,
            env=environment(tmp_path), cwd=ROOT,
        )  # fmt: skip
        gateway.close()
        said = b""
        try:
            host.settimeout(60)
            for line in HANDSHAKE_AND_LIST.splitlines(keepends=True):
                host.sendall(line.encode())
                asked = json.loads(line).get("id")
                while asked is not None and asked not in answers_in(said.decode()):
                    chunk = host.recv(1 << 16)
                    assert chunk, f"the gateway ended its output: {(tmp_path / 'gateway.log').read_text()}"
                    said += chunk
        finally:
            host.shutdown(socket.SHUT_WR)
            assert process.wait(timeout=60) == 0
    answered = answers_in(said.decode())
    assert "pid" in [tool["name"] for tool in answered[2]["result"]["tools"]]
