"""A server process for notification tests: a real `Elicitation` whose tool asks once, delivering its outbox
to the webhook of `MCP_ELICIT_WEBHOOK_URL`/`_SECRET` (read as `mcp-elicit serve` reads them), retrying fast."""

from __future__ import annotations

import argparse
import os
from dataclasses import replace
from datetime import timedelta

import uvicorn
from pydantic import BaseModel, Field

from mcp_elicit.server import Accepted, Elicitation, Flow, IdentityPolicy, Notifications, RequestState, Retry
from mcp_elicit.store import open_store

FAST = Retry(first=timedelta(seconds=0.3), factor=1.5, ceiling=timedelta(seconds=1), attempts=1000)


class Confirm(BaseModel):
    confirm: bool = Field(description="Ship it")


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--store", required=True)
    args = parser.parse_args()
    configured = Notifications.from_env(os.environ)
    assert configured is not None, "set MCP_ELICIT_WEBHOOK_URL and MCP_ELICIT_WEBHOOK_SECRET"
    notifications = replace(configured, retry=FAST, timeout=1.0, poll=timedelta(seconds=0.1))
    elicitation = Elicitation(
        open_store(args.store),
        request_state=RequestState(keys=[b"n" * 32]),
        identity=IdentityPolicy(allow_unauthenticated_loopback=True),
        notifications=notifications,
    )
    server = elicitation.server("notify-server")

    @elicitation.tool()
    async def ship(flow: Flow, version: str) -> str:
        answer = await flow.ask(f"Ship {version} with the secret word swordfish?", Confirm, key="ship")
        return "shipped" if isinstance(answer, Accepted) and answer.data.confirm else "not shipped"

    uvicorn.run(server.streamable_http_app(host="127.0.0.1"), host="127.0.0.1", port=args.port, log_level="warning")


if __name__ == "__main__":
    main()
