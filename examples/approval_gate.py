"""Tools that run only once a person approved the exact call: approve, change the amount, or reject.

Run it as an MCP host runs it, over stdio (`mcp-elicit install HOST --server "python examples/approval_gate.py"`),
or approve its calls yourself at this terminal:

    mcp-elicit call "python examples/approval_gate.py" pay_invoice --arg invoice=INV-7 --arg amount=1200
    mcp-elicit call "python examples/approval_gate.py" reorder --arg vendor=acme --arg item=paper --arg boxes=5

Payments under 100 run without asking (the gate's `when`). Reorders ask once: the person may let the app reorder
from that vendor without asking for this session, or always (for 30 days), and `mcp-elicit grants revoke ID`
takes that back. The decisions go to the embedded SQLite file unless `MCP_ELICIT_STORE` names another store.
"""

import sys
from datetime import timedelta
from typing import Annotated

from pydantic import Field

from mcp_elicit import Elicitation, Flow, Gate, Grants, RequestState
from mcp_elicit.settings import Settings


def pay(invoice: str, amount: int, idempotency_key: str) -> str:
    print(f"paying {invoice}: {amount} (key {idempotency_key})", file=sys.stderr)  # stdout is MCP's
    return f"paid {amount} on {invoice}"


settings = Settings.read(only=["store", "state_keys"])
state = RequestState(keys=settings.state_keys) if settings.state_keys else RequestState(single_process=True)
elicitation = Elicitation(settings.store, request_state=state)
server = elicitation.server("payments")


@elicitation.tool(gate=Gate(editable=["amount"], when=lambda args: args["amount"] >= 100))
async def pay_invoice(flow: Flow, invoice: str, amount: Annotated[int, Field(ge=1, le=50_000)]) -> str:
    """Pay an invoice; a person approves payments of 100 or more, and may lower the amount first."""
    return await flow.step("pay", pay, invoice, amount, flow.idempotency_key("pay"))


def order(vendor: str, item: str, boxes: int, idempotency_key: str) -> str:
    print(f"ordering {boxes} x {item} from {vendor} (key {idempotency_key})", file=sys.stderr)
    return f"ordered {boxes} boxes of {item} from {vendor}"


later_orders = Grants(
    session=timedelta(hours=8), always=timedelta(days=30), scope=lambda args: f"vendor={args['vendor']}"
)


@elicitation.tool(gate=Gate(grants=later_orders))
async def reorder(flow: Flow, vendor: str, item: str, boxes: Annotated[int, Field(ge=1, le=100)]) -> str:
    """Reorder office supplies; a person approves, and may let later orders from that vendor through."""
    return await flow.step("order", order, vendor, item, boxes, flow.idempotency_key("order"))


if __name__ == "__main__":
    server.run()
