"""What a call through the kit can end with besides a result: each names who stopped it and why.

The kit never turns these into a made-up tool result: a call that a person or the host stopped, or that
the server answered with something this client cannot accept, raises, and the server's own results are
returned untouched.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_elicit.client.pending import PendingFlow


class KitError(Exception):
    """Base of the kit's own errors (server errors stay `mcp.shared.exceptions.MCPError`)."""


class UrlFlowStopped(KitError):
    """A URL flow the call waited on ended without letting the call go on.

    `flow.status` says how: `declined` (the person refused to open it), `cancelled` (the person or the
    host stopped it, or nobody could be asked), `failed` (it could not be opened, or the wait ran out).
    """

    def __init__(self, flow: PendingFlow) -> None:
        self.flow = flow
        reason = f": {flow.reason}" if flow.reason else ""
        super().__init__(f"the URL flow {flow.id!r} ({flow.message!r}) was {flow.status}{reason}; the call stopped")


class UnknownResultType(KitError):
    """The server answered with a `resultType` this client does not know; the spec makes that invalid."""

    def __init__(self, result_type: str) -> None:
        self.result_type = result_type
        super().__init__(f"the server answered with resultType {result_type!r}, which this client does not know")


class TooManyRounds(KitError):
    """The server kept asking new questions past the kit's cap; a person should not be asked forever."""

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        super().__init__(f"the server asked for input in {rounds} rounds in a row; the kit stopped the call")


class StillWaiting(KitError):
    """The server kept answering "still waiting" past the kit's deadline for one call."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"the server was still waiting after {seconds:.0f} s of polling; the kit stopped the call")


class ServerSilent(KitError, TimeoutError):
    """The server sent nothing for too long while nobody was deciding anything; the call was cut."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"the server sent nothing for {seconds:g} s while no person was deciding; the call was cut")
