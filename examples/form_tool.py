"""A native MCP tool that asks a person with a form before it acts, once per call.

Run it as an MCP host runs it, over stdio (a host's configuration: `mcp-elicit install HOST --server
"python examples/form_tool.py"`), or answer its form yourself at this terminal:

    mcp-elicit call "python examples/form_tool.py" book_room --arg room=Lovelace

The decisions go to the embedded SQLite file unless `MCP_ELICIT_STORE` names another store;
`MCP_ELICIT_STATE_KEYS` (or its `_FILE`) keeps 2026-07-28 rounds valid across restarts of this process.
"""

import sys

from pydantic import BaseModel, Field

from mcp_elicit import Accepted, Elicitation, Flow, RequestState
from mcp_elicit.settings import Settings


class Booking(BaseModel):
    attendees: int = Field(ge=1, le=12, description="How many people")
    projector: bool = Field(default=False, description="Need a projector")


def book(room: str, booking: Booking, idempotency_key: str) -> str:
    print(f"booking {room} for {booking.attendees} (key {idempotency_key})", file=sys.stderr)  # stdout is MCP's
    return f"{room} booked for {booking.attendees}" + (" with a projector" if booking.projector else "")


settings = Settings.read(only=["store", "state_keys"])
state = RequestState(keys=settings.state_keys) if settings.state_keys else RequestState(single_process=True)
elicitation = Elicitation(settings.store, request_state=state)
server = elicitation.server("rooms")


@elicitation.tool(asks=(Booking,))
async def book_room(flow: Flow, room: str) -> str:
    """Book a meeting room once the person says for how many and what they need."""
    answer = await flow.ask(f"Book {room}: how many people, and a projector?", Booking)
    if not isinstance(answer, Accepted):
        return "nothing booked"
    return await flow.step("book", book, room, answer.data, flow.idempotency_key("book"))


if __name__ == "__main__":
    server.run()
