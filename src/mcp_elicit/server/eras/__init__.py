"""Protocol eras: one adapter each, and the one interface the era-blind runtime drives them through.

The runtime finds the call's operation, runs the body and finishes the operation the same way on every
era. What differs stays in the adapter: how a question reaches the person (`Asker`), whether a request
resumes a round the server handed out earlier, what a suspended turn looks like on the wire, and how a
missing client capability is reported.
"""

from __future__ import annotations

import logging
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mcp.server.session import ServerSession
from mcp_types import InputResponses, ProgressNotification, ProgressNotificationParams, RequestId

from mcp_elicit.server.eras.capabilities import Declared, Era, Need, era_of

if TYPE_CHECKING:
    from mcp_elicit.model import Principal
    from mcp_elicit.server.execution import Asker, Execution
    from mcp_elicit.server.signals import Suspended
    from mcp_elicit.server.writes import HeldWrites
    from mcp_elicit.store import OperationRecords
    from mcp_elicit.store.aio import AsyncStore

log = logging.getLogger(__name__)

__all__ = ["Call", "Declared", "Era", "EraAdapter", "Need", "RequestContext", "Target", "era_of"]


class RequestContext(Protocol):
    """What the runtime reads of a request: the SDK's `ServerRequestContext`, or a framework's view of it."""

    @property
    def session(self) -> ServerSession: ...

    @property
    def request_id(self) -> RequestId | None: ...

    @property
    def protocol_version(self) -> str: ...

    @property
    def meta(self) -> Mapping[str, object] | None: ...

    @property
    def request(self) -> Any: ...


@dataclass(frozen=True, slots=True)
class Call:
    """What one `tools/call` or `prompts/get` brings, through an `MCPServer` entry, a lowlevel handler or FastMCP."""

    request: RequestContext
    input_responses: InputResponses | None
    request_state: str | None

    @property
    def era(self) -> Era:
        return era_of(self.request.protocol_version)

    @property
    def declared(self) -> Declared:
        return Declared.of(self.request.session.client_capabilities, self.request.protocol_version)


def progress_of(call: Call) -> Callable[[str], Awaitable[None]] | None:
    """What tells the caller of a waiting call how it stands: progress notifications on the request's progress
    token, or nothing when the request gave none. A notification that cannot be sent is let go: it only informs."""
    meta: Mapping[str, object] = call.request.meta or {}
    token = meta.get("progress_token", meta.get("progressToken"))  # the SDK's parsed name, or the wire's
    if not isinstance(token, str | int) or isinstance(token, bool):
        return None
    session, request_id, sent = call.request.session, call.request.request_id, [0]

    async def tell(message: str) -> None:
        sent[0] += 1
        try:
            progress = ProgressNotificationParams(progress_token=token, progress=sent[0], message=message)
            await session.send_notification(ProgressNotification(params=progress), request_id)
        except Exception as error:  # the client went away: its call ends on its own
            log.debug("progress notification not sent: %s", type(error).__name__)

    return tell


@dataclass(frozen=True, slots=True)
class Target:
    """The logical call an operation stands for, as a resumed round must match it."""

    method: str
    name: str
    request_digest: str


class EraAdapter(Protocol):
    """How one era asks, resumes and reports; built for one call."""

    async def resume(
        self, store: AsyncStore, principal: Principal, target: Target, writes: HeldWrites
    ) -> OperationRecords | None:
        """The open operation this request continues by the era's own means (a round's state), if any."""
        ...

    def asker(self) -> Asker: ...

    async def suspended(self, signal: Suspended, run: Execution) -> Any:
        """Commit what the turn holds and return what the caller sees for a turn that ended early."""
        ...

    def missing_capability(self, needs: frozenset[Need], *, tool: bool) -> Exception:
        """What a caller that cannot be asked gets when no fallback answers for it."""
        ...
