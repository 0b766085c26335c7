"""A tool that runs only once a person approved the exact call: approve, change the amount, or reject.

Run it as an MCP host runs it, over stdio (`mcp-elicit install HOST --server "python examples/approval_gate.py"`),
or approve its calls yourself at this terminal:

    mcp-elicit call "python examples/approval_gate.py" pay_invoice --arg invoice=INV-7 --arg amount=1200

Payments under 100 run without asking (the gate's `when`). The decisions go to the embedded SQLite file unless
`MCP_ELICIT_STORE` names another store.
"""

import sys
from typing import Annotated

from pydantic import Field

from mcp_elicit import Elicitation, Flow, Gate, RequestState
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


if __name__ == "__main__":
    server.run()
