"""A server process for crash tests: a real `Elicitation` whose side-effect step can stall, to be SIGKILLed.

`CRASH_PAUSE=before` stalls after the answer is recorded and before the side effect; `after` stalls
after the side effect and before its result is journaled; anything else runs straight through. The
step's claim lapses `CRASH_LEASE` seconds (default 2) after the killed holder's last renewal. The
external system is a ledger file that takes an idempotency key, as a payment provider would.
"""

from __future__ import annotations

import argparse
import json
import os
import time
from datetime import timedelta
from pathlib import Path

import uvicorn
from pydantic import BaseModel, Field

from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy, RequestState, Timing
from mcp_elicit.store import open_store


class Confirm(BaseModel):
    confirm: bool = Field(description="Make the transfer")


class Ledger:
    def __init__(self, root: Path, pause: str) -> None:
        self.root = root
        self.pause = pause

    def transfer(self, amount: int, idempotency_key: str) -> str:
        self._note("attempts")
        self._stall("before")
        entries = self.entries()
        if idempotency_key not in entries:
            entries[idempotency_key] = amount
            (self.root / "ledger.json").write_text(json.dumps(entries))
        self._stall("after")
        return f"receipt-{idempotency_key[-6:]}"

    def entries(self) -> dict[str, int]:
        path = self.root / "ledger.json"
        loaded: dict[str, int] = json.loads(path.read_text()) if path.exists() else {}
        return loaded

    def _note(self, what: str) -> None:
        with (self.root / what).open("a") as log:
            log.write("x\n")

    def _stall(self, moment: str) -> None:
        if self.pause == moment:
            (self.root / f"stalled-{moment}").write_text("")
            time.sleep(3600)


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True)
    parser.add_argument("--workspace", type=Path, required=True)
    args = parser.parse_args()
    ledger = Ledger(args.workspace, os.environ.get("CRASH_PAUSE", ""))
    elicitation = Elicitation(
        open_store(args.store),
        request_state=RequestState(keys=[b"c" * 32]),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        timing=Timing(lease=timedelta(seconds=float(os.environ.get("CRASH_LEASE", "2")))),
    )
    server = elicitation.server("crash-server")

    @elicitation.tool()
    async def transfer(flow: Flow, amount: int) -> str:
        answer = await flow.ask(f"Transfer {amount}?", Confirm, key="confirm_transfer")
        if not (isinstance(answer, Accepted) and answer.data.confirm):
            return "not transferred"
        receipt = await flow.step("transfer", ledger.transfer, amount, flow.idempotency_key("transfer"))
        return f"transferred {amount}: {receipt}"

    uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
