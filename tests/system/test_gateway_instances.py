"""Two `mcp-elicit gateway` processes on one PostgreSQL store and one key ring, behind HAProxy balancing round-robin
request by request: an approval asked by one instance is answered to the other, which forwards the approved call
to its own upstream, once. A 2026-07-28 call keeps nothing in an instance's memory between its round and its
retry: the round's state is sealed with the shared keys, the approval is a record of the shared store.
"""

from __future__ import annotations

import os
import shlex
import shutil
import subprocess
import sys
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from pathlib import Path

import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, InputRequiredResult

from mcp_elicit.approvals import APPROVAL_KEY
from mcp_elicit.model import DecisionStatus, Operator
from mcp_elicit.store import open_store
from tests.helpers.cli_terminal import COMMAND
from tests.helpers.deployment import b64
from tests.helpers.environment import IN_CI
from tests.helpers.gateway import text
from tests.helpers.http_harness import free_port, wait_for_port

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
UPSTREAM = f"{shlex.quote(sys.executable)} -m tests.helpers.peers.sdk_server"
KEYS = b64(b"gateway-instances-test-key-01234")


def haproxy() -> str:
    found = shutil.which("haproxy") or ("/usr/sbin/haproxy" if Path("/usr/sbin/haproxy").exists() else None)
    if found is None:
        if IN_CI:
            pytest.fail("HAProxy is not installed; .ci/run installs it (mandatory under CI=true)")
        pytest.skip("HAProxy is not installed")
    return found


@contextmanager
def started(command: list[str], log: Path, port: int, env: dict[str, str]) -> Iterator[subprocess.Popen[bytes]]:
    with log.open("wb") as out:
        process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL, stdout=out, stderr=out)
    try:
        wait_for_port(port, process)
        yield process
    finally:
        if process.poll() is None:
            process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()


async def never_asked(context: object, params: ElicitRequestParams) -> ElicitResult:
    raise AssertionError("the test answers the round itself")


async def test_an_approval_asked_by_one_instance_is_answered_to_the_other_which_forwards_once(
    tmp_path: Path, pg_schema_url: str
) -> None:
    balancer = haproxy()
    config = tmp_path / "gateway.toml"
    config.write_text('[[gate]]\ntool = "pid"\n')
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_ELICIT_")}
    env.update(MCP_ELICIT_STORE=pg_schema_url, MCP_ELICIT_STATE_KEYS=KEYS)
    front, ports = free_port(), [free_port(), free_port()]
    haproxy_cfg = tmp_path / "haproxy.cfg"
    haproxy_cfg.write_text(
        "global\n    log stdout format raw local0\n"
        'defaults\n    mode http\n    log global\n    log-format "%s %HM %HU %ST"\n'
        "    timeout connect 5s\n    timeout client 60s\n    timeout server 60s\n"
        f"frontend front\n    bind 127.0.0.1:{front}\n    default_backend instances\n"
        "backend instances\n    balance roundrobin\n    option http-server-close\n"
        + "".join(f"    server i{number} 127.0.0.1:{port}\n" for number, port in enumerate(ports, start=1))
    )
    url = f"http://127.0.0.1:{front}/mcp"
    with ExitStack() as running:
        for number, port in enumerate(ports, start=1):
            command = [COMMAND, "gateway", "--upstream", UPSTREAM, "--config", str(config)]
            command += ["--transport", "streamable-http", "--port", str(port), "--dev-loopback"]
            running.enter_context(started(command, tmp_path / f"gateway-{number}.log", port, env))
        running.enter_context(started([balancer, "-f", str(haproxy_cfg)], tmp_path / "haproxy.log", front, env))
        async with Client(url, mode="2026-07-28", elicitation_callback=never_asked) as client:
            round_ = await client.session.call_tool("pid", {}, allow_input_required=True)
            assert isinstance(round_, InputRequiredResult) and round_.input_requests and round_.request_state
            [key] = round_.input_requests
            done = await client.session.call_tool(
                "pid",
                {},
                input_responses={key: ElicitResult(action="accept", content={})},
                request_state=round_.request_state,
                allow_input_required=True,
            )
    assert isinstance(done, CallToolResult) and text(done).isdigit()
    routed = [line.split() for line in (tmp_path / "haproxy.log").read_text().splitlines() if "POST /mcp" in line]
    servers = [parts[0] for parts in routed]
    assert len(servers) >= 2 and servers[-1] != servers[-2], routed  # the round on one, the retry on the other
    store = open_store(pg_schema_url)
    try:
        [approval] = store.list_decisions(Operator("test"))
    finally:
        store.close()
    assert (approval.key, approval.status) == (APPROVAL_KEY, DecisionStatus.ACCEPTED)
