"""A stdio server whose URL flow never announces its completion, for the pending-flow tests.

`connect_later` asks for a URL flow that does not hold the call (`ResumePolicy.NOTIFICATION`): on 2025-11-25
the server answers `-32042`, on 2026-07-28 it answers "still waiting" rounds until the decision is done. The
`MCPServer` is built without the runtime's lifespan, so nothing ever sends `notifications/elicitation/complete`:
the client learns of the completion only by retrying. A test completes the decision out of band, writing
the store as the decision page's callback would (`complete`, also runnable as a "browser":
`python pending_server.py complete PAGE_URL`, which imports no SDK so that it starts fast; the store comes
from `MCP_ELICIT_STORE` then, since `$BROWSER` is split at every colon).

    python pending_server.py serve --store sqlite:///path/elicit.db

(No `from __future__ import annotations`: the tool's `Flow` annotation, imported inside `serve`, must be
evaluated where the tool is defined.)
"""

import argparse
import os
from datetime import timedelta

from mcp_elicit.model import DecisionStatus, Operator, Principal, ResumePolicy
from mcp_elicit.server import RequestState, Timing
from mcp_elicit.store import ENV_VAR, open_store

PAGES = "https://pages.example"
MESSAGE = "Connect your Example account"
CONNECTED = "Connected the Example account."
OWNER = Principal("local-user", "stdio")
"""Who a stdio call is made by: the explicit local principal."""


def serve(store_url: str) -> None:
    from mcp.server.mcpserver import MCPServer

    from mcp_elicit.server import Completed, Elicitation, Flow

    runtime = Elicitation(
        open_store(store_url),
        request_state=RequestState(keys=[b"p" * 32]),
        public_base_url=PAGES,
        timing=Timing(long_poll=timedelta(seconds=0.2)),
    )
    server = MCPServer("pending-flow-server", request_state_security=runtime.request_state_security)
    runtime.attach(server)

    @runtime.tool()
    async def connect_later(flow: Flow) -> str:
        """Connect an account in the browser; the call is retried until the flow is done."""
        outcome = await flow.ask_url(MESSAGE, key="connect", resume=ResumePolicy.NOTIFICATION)
        return CONNECTED if isinstance(outcome, Completed) else f"Not connected ({type(outcome).__name__.lower()})."

    try:
        server.run("stdio")
    finally:
        runtime.close()


def complete(store_url: str) -> None:
    """What the decision page's callback does once the person is done in the browser."""
    store = open_store(store_url)
    try:
        [decision] = store.list_decisions(Operator())
        if decision.status is DecisionStatus.REQUESTED:
            decision = store.transition(decision, DecisionStatus.ACCEPTED_URL, caller=OWNER, reason="page opened")
        pending = store.transition(decision, DecisionStatus.EXTERNAL_PENDING, caller=OWNER)
        store.transition(pending, DecisionStatus.EXTERNAL_COMPLETED, caller=OWNER, reason="provider callback")
    finally:
        store.close()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("what", choices=["serve", "complete"])
    parser.add_argument("--store", default=os.environ.get(ENV_VAR), help=f"default: ${ENV_VAR}")
    parser.add_argument("url", nargs="?", help="the page the browser was sent to (complete only; not fetched)")
    args = parser.parse_intermixed_args()
    if args.store is None:
        parser.error(f"give --store or set {ENV_VAR}")
    if args.what == "serve":
        serve(args.store)
    else:
        complete(args.store)


if __name__ == "__main__":
    main()
