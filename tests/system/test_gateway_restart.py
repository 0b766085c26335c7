"""What of a relayed question survives `mcp-elicit gateway` killed with SIGKILL: its decision (in the store) and
its 2026-07-28 round (sealed with the shared key ring); not the upstream call in flight, which dies with the
process. The retry, answered to a new gateway process on the same store, calls the upstream again from the start,
and the question the upstream asks again is answered from the retry's answer without asking anyone twice.
"""

from __future__ import annotations

import os
import shlex
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest
from mcp import Client
from mcp_types import CallToolResult, ElicitRequestParams, ElicitResult, InputRequiredResult

from mcp_elicit.model import Operator
from mcp_elicit.store import open_store
from tests.helpers.cli_terminal import COMMAND
from tests.helpers.deployment import b64
from tests.helpers.gateway import text
from tests.helpers.http_harness import free_port, wait_for_port

pytestmark = pytest.mark.anyio
ROOT = Path(__file__).resolve().parents[2]
ASKING = f"{shlex.quote(sys.executable)} -m tests.helpers.peers.asking_server"


@contextmanager
def gateway(port: int, store: str) -> Iterator[subprocess.Popen[bytes]]:
    env = {key: value for key, value in os.environ.items() if not key.startswith("MCP_ELICIT_")}
    env.update(MCP_ELICIT_STORE=store, MCP_ELICIT_STATE_KEYS=b64(b"gateway-restart-test-key-0123456"))
    # The asking peer asks with `elicitation/create` on the live call: a handshake session, which the gateway holds.
    command = [COMMAND, "gateway", "--upstream", ASKING, "--era", "legacy", "--transport", "streamable-http"]
    command += ["--dev-loopback"]
    command += ["--port", str(port)]
    process = subprocess.Popen(command, cwd=ROOT, env=env, stdin=subprocess.DEVNULL)
    try:
        wait_for_port(port, process)
        yield process
    finally:
        if process.poll() is None:
            process.kill()
        process.wait(timeout=10)


async def never_asked(context: object, params: ElicitRequestParams) -> ElicitResult:
    raise AssertionError("the test answers the rounds itself")


async def test_a_2026_retry_after_the_gateway_was_killed_completes_from_the_recorded_answer(tmp_path: Path) -> None:
    store = f"sqlite://{tmp_path / 'gateway.db'}"
    ledger = tmp_path / "ledger"
    arguments = {"item": "mugs", "ledger": str(ledger)}
    port = free_port()
    url = f"http://127.0.0.1:{port}/mcp"
    with gateway(port, store) as first_process:
        async with Client(url, mode="2026-07-28", elicitation_callback=never_asked) as client:
            first = await client.session.call_tool("order", arguments, allow_input_required=True)
        first_process.kill()  # SIGKILL, with the question open and the upstream call waiting for its answer
        first_process.wait(timeout=10)
    assert isinstance(first, InputRequiredResult) and first.input_requests and first.request_state
    [quantity_key] = first.input_requests
    with gateway(port, store):
        async with Client(url, mode="2026-07-28", elicitation_callback=never_asked) as client:
            second = await client.session.call_tool(
                "order",
                arguments,
                input_responses={quantity_key: ElicitResult(action="accept", content={"quantity": 3})},
                request_state=first.request_state,
                allow_input_required=True,
            )
            assert isinstance(second, InputRequiredResult) and second.input_requests and second.request_state
            [colour_key] = second.input_requests
            done = await client.session.call_tool(
                "order",
                arguments,
                input_responses={colour_key: ElicitResult(action="accept", content={"colour": "red"})},
                request_state=second.request_state,
                allow_input_required=True,
            )
    opened = open_store(store)
    try:
        recorded = sorted((d.key, d.status.value, d.operation_id) for d in opened.list_decisions(Operator("test")))
    finally:
        opened.close()
    assert isinstance(done, CallToolResult) and text(done) == "ordered 3 red mugs"
    assert ledger.read_text() == "start mugs\nstart mugs\n"  # the upstream's body ran again after the restart
    assert [(key, status) for key, status, _ in recorded] == sorted(
        [(quantity_key, "accepted"), (colour_key, "accepted")]
    )
    assert len({operation for _, _, operation in recorded}) == 1
