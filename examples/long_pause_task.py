"""A long pause as an MCP task: the call becomes a task the client polls, and waits for the person there.

A client that declares tasks (the 2026-07-28 extension, or 2025-11-25's `params.task`) gets a task at once
and no request stays open while the person decides, for hours if need be; the task is the call's durable
operation, so it survives a restart of this process. Any other client runs the same call on its request.

    mcp-elicit call "python examples/long_pause_task.py" approve_expense --arg amount=1200 --arg reason=conference

(`mcp-elicit call` declares tasks; the status line shows the task while it waits.) `MCP_ELICIT_STORE` and
`MCP_ELICIT_STATE_KEYS` as for any mcp-elicit server.
"""

from datetime import timedelta

from pydantic import BaseModel, Field

from mcp_elicit import Accepted, Elicitation, Flow, RequestState, TaskPolicy
from mcp_elicit.server import TaskSettings
from mcp_elicit.settings import Settings


class Approval(BaseModel):
    approve: bool = Field(description="Approve the expense")
    note: str = Field(default="", max_length=200, description="A note for the requester")


settings = Settings.read(only=["store", "state_keys"])
state = RequestState(keys=settings.state_keys) if settings.state_keys else RequestState(single_process=True)
elicitation = Elicitation(settings.store, request_state=state, tasks=TaskSettings(default_ttl=timedelta(hours=24)))
server = elicitation.server("expenses")


@elicitation.tool(asks=(Approval,), task=TaskPolicy.OPTIONAL)
async def approve_expense(flow: Flow, amount: int, reason: str) -> str:
    """Ask the approver, who may answer much later; the call waits as a task meanwhile."""
    answer = await flow.ask(f"Approve {amount} EUR for {reason}?", Approval, ttl=timedelta(hours=24))
    if isinstance(answer, Accepted) and answer.data.approve:
        return f"approved {amount} EUR" + (f": {answer.data.note}" if answer.data.note else "")
    return "not approved"


if __name__ == "__main__":
    server.run()
