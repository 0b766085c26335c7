"""A client's model for tools that sample: scripted replies, every request it was sent kept."""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp.client import ClientRequestContext
from mcp_types import CreateMessageRequestParams, CreateMessageResult, ErrorData, TextContent


@dataclass
class Model:
    """Answers every sampling request with `reply`, or `reply n` for the n-th request when `reply` is None;
    with `refuse`, refuses each as a person at the client would."""

    reply: str | None = None
    asked: list[CreateMessageRequestParams] = field(default_factory=list)
    refuse: bool = False

    async def __call__(
        self, context: ClientRequestContext, params: CreateMessageRequestParams
    ) -> CreateMessageResult | ErrorData:
        self.asked.append(params)
        if self.refuse:
            return ErrorData(code=-1, message="User rejected sampling request")
        text = self.reply if self.reply is not None else f"reply {len(self.asked)}"
        content = TextContent(type="text", text=text)
        return CreateMessageResult(role="assistant", content=content, model="test-model", stop_reason="endTurn")
