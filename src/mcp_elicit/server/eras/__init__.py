"""Protocol eras: one adapter each, and the one interface the era-blind runtime drives them through.

The runtime finds the call's operation, runs the body and finishes the operation the same way on every
era. What differs stays in the adapter: how a question reaches the person (`Asker`), whether a request
resumes a round the server handed out earlier, what a suspended turn looks like on the wire, and how a
missing client capability is reported.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol

from mcp.server.session import ServerSession
from mcp_types import InputResponses, RequestId

from mcp_elicit.server.eras.capabilities import Declared, Era, Need, era_of

if TYPE_CHECKING:
    from mcp_elicit.model import Principal
    from mcp_elicit.server.execution import Asker, Execution
    from mcp_elicit.server.signals import Suspended
    from mcp_elicit.server.writes import HeldWrites
    from mcp_elicit.store import OperationRecords
    from mcp_elicit.store.aio import AsyncStore

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
