"""A server of the SDK's own kind whose tools ask their person during the call (`ctx.elicit`), the legacy way, and
write down each time their body runs: what a gateway's durable questions are tested against.

`order` appends `start <item>` to the file `ledger` names, asks how many (a form with `quantity` from 1 to 9),
then asks which colour (a second form), and answers `ordered <quantity> <colour> <item>`, or says how the person
refused. `pay` appends `start pay`, sends the person to `PAY_URL` (URL mode, elicitation id `pay-<amount>`) and,
once they consent, says that flow is complete (`notifications/elicitation/complete`, as its page would once
paid), answering how they answered. `sign_in` asks the 2026-07-28 way instead, with an `InputRequiredResult`
whose URL request goes to `SIGN_IN_URL` (only a 2026-07-28 session can carry it). `files` refuses with `-32042`
(URL flow `DRIVE_FLOW` at `DRIVE_URL`) until `drive_connected`, standing for the drive's page, marks it done and
says so with `notifications/elicitation/complete`; once it lists, it appends `start files` to `ledger` if named.
`transfer` asks the 2026-07-28 way for a reference (a form), and appends `start transfer <amount>` on every call
that reaches it, with `<reference> <requestState>` after it on the retry that answers. The ledger lets a test
count how often the upstream's body ran: once per upstream call, never for a retry that attaches to one. Run it
as `python -m tests.helpers.peers.asking_server`; `server` is the same server for in-process use.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.shared.exceptions import UrlElicitationRequiredError
from mcp_types import ElicitRequest, ElicitRequestFormParams, ElicitRequestURLParams, ElicitResult, InputRequiredResult
from pydantic import BaseModel, Field


class Quantity(BaseModel):
    quantity: int = Field(ge=1, le=9, description="How many")


class Colour(BaseModel):
    colour: Literal["red", "blue"]


PAY_URL = "https://payments.example/checkout"
SIGN_IN_URL = "https://accounts.example/sign-in"
DRIVE_URL = "https://drive.example/connect"
DRIVE_FLOW = "drive-1"
connected: set[str] = set()

server = MCPServer("asking-server")


def _ran(ledger: str, what: str) -> None:
    with Path(ledger).open("a") as file:
        file.write(f"start {what}\n")


@server.tool()
async def order(ctx: Context, item: str, ledger: str) -> str:
    """Ask how many and which colour, then order them."""
    _ran(ledger, item)
    how_many = await ctx.elicit(f"How many {item}?", Quantity)
    if how_many.action != "accept":
        return f"not ordered ({how_many.action})"
    colour = await ctx.elicit(f"Which colour of {item}?", Colour)
    if colour.action != "accept":
        return f"not ordered ({colour.action} at colour)"
    return f"ordered {how_many.data.quantity} {colour.data.colour} {item}"


@server.tool()
async def pay(ctx: Context, amount: int, ledger: str) -> str:
    """Send the person to the payment page."""
    _ran(ledger, "pay")
    answer = await ctx.elicit_url(f"Pay {amount} EUR", PAY_URL, f"pay-{amount}")
    if answer.action == "accept":
        await ctx.request_context.session.send_elicit_complete(f"pay-{amount}")  # as its page does once paid
    return f"payment {answer.action}"


@server.tool()
async def sign_in(ctx: Context) -> str | InputRequiredResult:
    """Ask the 2026-07-28 way (an `InputRequiredResult`) for the person to sign in at `SIGN_IN_URL`, until the retry
    says they consented; then say how they answered."""
    answer = (ctx.input_responses or {}).get("login")
    if not isinstance(answer, ElicitResult):
        login = ElicitRequest(params=ElicitRequestURLParams(message="Sign in to Example", url=SIGN_IN_URL))
        return InputRequiredResult(input_requests={"login": login}, request_state="sign-in-1")
    return f"signed in ({answer.action}, {ctx.request_state})"


REFERENCE = ElicitRequest(
    params=ElicitRequestFormParams(
        message="Which reference?",
        requested_schema={"type": "object", "properties": {"reference": {"type": "string"}}, "required": ["reference"]},
    )
)


@server.tool()
async def transfer(ctx: Context, amount: int, ledger: str) -> str | InputRequiredResult:
    """Ask for the transfer's reference with an `InputRequiredResult`, then send `amount` with it."""
    answer = (ctx.input_responses or {}).get("reference")
    reference = (answer.content or {}).get("reference") if isinstance(answer, ElicitResult) else None
    _ran(ledger, f"transfer {amount}" + (f" {reference} {ctx.request_state}" if reference else ""))
    if not isinstance(answer, ElicitResult):
        return InputRequiredResult(input_requests={"reference": REFERENCE}, request_state=f"transfer-{amount}")
    return f"sent {amount} ({answer.action}, {reference})"


@server.tool()
async def files(ledger: str = "") -> str:
    """List the files of the connected drive; `-32042` (the 2025-11-25 way) until the drive is connected."""
    if DRIVE_FLOW not in connected:
        flow = ElicitRequestURLParams(message="Connect your drive", url=DRIVE_URL, elicitation_id=DRIVE_FLOW)
        raise UrlElicitationRequiredError([flow])
    if ledger:
        _ran(ledger, "files")
    return "files: notes.txt"


@server.tool()
async def drive_connected(ctx: Context) -> str:
    """What the drive's page does once the person connected it: remember it, and say the flow is complete."""
    connected.add(DRIVE_FLOW)
    await ctx.request_context.session.send_elicit_complete(DRIVE_FLOW)
    return "connected"


if __name__ == "__main__":
    server.run("stdio")
