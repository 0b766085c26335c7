"""`mcp-elicit call --tool-approval` (the installed command, a process of its own) against a server serving the
draft tool-approval extension: the call becomes a task shown as waiting for approval, an approver votes through
the store once the command shows that wait, and the command prints the tool's result."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import anyio
import pytest
from anyio.streams.text import TextReceiveStream

from mcp_elicit.model import Approver, DecisionStatus, Operator, Verdict
from mcp_elicit.store.aio import AsyncStore
from tests.helpers.approval_site import Ledger, served
from tests.helpers.cli_terminal import COMMAND

pytestmark = pytest.mark.anyio
WAITING = "Waiting for approval: transfer: Waiting for approval"


async def test_call_with_tool_approval_shows_the_wait_and_prints_the_result(store_url: str, tmp_path: Path) -> None:
    ledger = Ledger()
    script = tmp_path / "script.json"
    script.write_text(json.dumps([]))  # no entry answers the wait: it goes on until the approval
    env = {name: value for name, value in os.environ.items() if not name.startswith("MCP_ELICIT_")}
    with served(store_url, ledger, tool_approval=True) as (runtime, url):
        command = [COMMAND, "call", url, "transfer", "--arg", "to=acct-4", "--arg", "amount=250", "--token",
                   "token-alice", "--era", "2026-07-28", "--script", str(script), "--tool-approval"]  # fmt: skip
        async with await anyio.open_process(
            command, stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, env={**env, "COLUMNS": "200"}
        ) as process:
            assert process.stdout is not None
            printed = ""
            with anyio.fail_after(60):
                async for chunk in TextReceiveStream(process.stdout):
                    printed += chunk
                    if WAITING in printed:
                        break
            with anyio.fail_after(60):
                while not (found := runtime.store.list_decisions(Operator(), status=DecisionStatus.REQUESTED)):
                    await anyio.sleep(0.05)
            [approval] = found
            assert ledger.ran == [], "nothing ran while the command waited"
            approver = Approver("carol", frozenset({"treasury"}))
            await AsyncStore(runtime.store).cast_vote(approval.elicitation_id, approver, Verdict.APPROVE, {})
            with anyio.fail_after(60):
                async for chunk in TextReceiveStream(process.stdout):
                    printed += chunk
                code = await process.wait()
    assert code == 0, printed
    assert "sent 250 to acct-4" in printed
    assert ledger.ran == ["transfer 250 to acct-4"]
