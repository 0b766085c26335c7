"""What an upstream asks of the client itself rather than of a person: a completion from its model
(`sampling/createMessage`) or its roots (`roots/list`), sent to the client of the call on its live call.

Why live only: the answer is the client's own (its model, its workspace), not a decision a person makes, so
nothing is recorded and an upstream that asks again is answered again. A handshake upstream sends these as
requests on its session; a 2026-07-28 upstream puts them in its `InputRequiredResult`, which a 2026-07-28 client
gets as it is and a 2025 client has asked through here, one request at a time. A client that cannot be sent a
request (2026-07-28, or HTTP without a back channel), or did not declare the capability, is not sent it: the
upstream gets an error that says why.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from mcp.server.context import ServerRequestContext
from mcp.server.validation import wants_sampling_tools
from mcp.shared.exceptions import MCPError
from mcp.shared.message import ServerMessageMetadata
from mcp_types import (
    INTERNAL_ERROR,
    INVALID_REQUEST,
    CreateMessageRequest,
    CreateMessageRequestParams,
    CreateMessageResult,
    CreateMessageResultWithTools,
    ErrorData,
    ListRootsRequest,
    ListRootsResult,
)
from pydantic import BaseModel, ValidationError

SAMPLING = "sampling/createMessage"
ROOTS = "roots/list"
CLIENT_METHODS = (SAMPLING, ROOTS)


def client_request(raw: Mapping[str, Any]) -> CreateMessageRequest | ListRootsRequest:
    """An input request of an upstream's round as the request it is; `ValueError` if it is not a valid one."""
    try:
        if raw.get("method") == SAMPLING:
            return CreateMessageRequest.model_validate(raw)
        return ListRootsRequest.model_validate(raw)
    except ValidationError:
        raise ValueError(f"the upstream asks a malformed {raw.get('method')}") from None


async def ask_client(
    ctx: ServerRequestContext[Any, Any], request: CreateMessageRequest | ListRootsRequest, whose: str
) -> CreateMessageResult | CreateMessageResultWithTools | ListRootsResult | ErrorData:
    """`request` sent to the client of `ctx` on that request, and its answer (or why it could not be sent)."""
    session = ctx.session
    if not session.can_send_request:
        return ErrorData(
            code=INVALID_REQUEST,
            message=f"the gateway cannot send {request.method} to the client of {whose}: its connection (protocol "
            f"{ctx.protocol_version}) carries no requests from server to client",
        )
    declared = session.client_capabilities
    capability = "sampling" if isinstance(request, CreateMessageRequest) else "roots"
    if declared is None or getattr(declared, capability) is None:
        return ErrorData(
            code=INVALID_REQUEST,
            message=f"the gateway cannot send {request.method} to the client of {whose}: it declared no {capability} "
            "capability",
        )
    result_type: type[BaseModel] = ListRootsResult
    if isinstance(request, CreateMessageRequest):
        params: CreateMessageRequestParams = request.params
        wants_tools = wants_sampling_tools(params.tools, params.tool_choice)
        result_type = CreateMessageResultWithTools if wants_tools else CreateMessageResult
    related = ServerMessageMetadata(related_request_id=ctx.request_id)  # arrives, whatever streams are open
    try:
        answer = await session.send_request(request, result_type, metadata=related)
    except MCPError as error:
        return error.error
    except ValidationError:
        return ErrorData(code=INTERNAL_ERROR, message=f"the client's answer to {request.method} is not a valid result")
    assert isinstance(answer, CreateMessageResult | CreateMessageResultWithTools | ListRootsResult)
    return answer
