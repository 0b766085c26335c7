"""What a call through the kit can end with besides a result: each names who stopped it and why.

The kit never turns these into a made-up tool result: a call that a person or the host stopped, or that
the server answered with something this client cannot accept, raises, and the server's own results are
returned untouched.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from mcp_elicit.client.pending import PendingFlow


class KitError(Exception):
    """Base of the kit's own errors (server errors stay `mcp.shared.exceptions.MCPError`)."""


class UrlFlowStopped(KitError):
    """A URL flow the call waited on ended without letting the call go on.

    `flow.status` says how: `declined` (the person refused to open it), `cancelled` (the person or the
    host stopped it, or nobody could be asked), `failed` (it could not be opened, or the wait ran out).
    The host may also cancel a call waiting on a flow that already finished (a server asking again for a
    completed flow): the flow keeps its status and `reason` says the host stopped the call.
    """

    def __init__(self, flow: PendingFlow, reason: str | None = None) -> None:
        self.flow = flow
        self.reason = reason if reason is not None else flow.reason
        why = f": {self.reason}" if self.reason else ""
        super().__init__(f"the URL flow {flow.id!r} ({flow.message!r}) was {flow.status}{why}; the call stopped")


class CallStopped(KitError):
    """The person or the host stopped a call while the server was still waiting, with no URL flow of the
    call's own to blame: 2026-07-28 still-waiting rounds, e.g. on a question an identical call carries.

    Only the client stopped waiting. It withdrew nothing on the server: a round in flight is cancelled as a
    request (`notifications/cancelled`), never the operation, so what the call waited on goes on there and
    a durable server hands the same call made again its place, or the result it recorded meanwhile.
    """

    def __init__(self, kind: str, name: str, reason: str | None = None) -> None:
        self.kind = kind
        self.name = name
        self.reason = reason
        why = f" ({reason})" if reason else ""
        super().__init__(
            f"the {kind} {name!r} was stopped while the server was still waiting{why}; nothing was withdrawn "
            "on the server: what the call waited on goes on there, and the same call made again can take it up"
        )


class UrlStillRequired(KitError):
    """A 2025-11-25 server kept answering `-32042` for URL flows that were all done, past the kit's wait.

    Nothing is left for the person to do (no flow is open), so waiting longer would hang the call: the
    server does not see the completion it asked for. `flows` are the flows it asked for again.
    """

    def __init__(self, flows: Sequence[PendingFlow], seconds: float) -> None:
        self.flows = tuple(flows)
        self.seconds = seconds
        named = ", ".join(repr(flow.id) for flow in self.flows)
        super().__init__(
            f"the server still required the URL flows {named} after {seconds:.0f} s although none was open; "
            "the call stopped"
        )


class QuestionRefused(KitError):
    """The kit refused a 2026-07-28 input request, so the call cannot go on.

    A question in a mode this client did not declare, or a form whose `requestedSchema` is not the spec's
    restricted form schema, is never shown. On 2025-era connections the server hears the refusal (`-32602`)
    and decides; a 2026-07-28 round has no way to carry an error for one question, so the call stops here,
    naming the question (`key`, the server's `message`) and why (`reason`).
    """

    def __init__(self, key: str, message: str, reason: str) -> None:
        self.key = key
        self.message = message
        self.reason = reason
        super().__init__(f"the kit refused the server's question {key!r} ({message!r}): {reason}; the call stopped")


class UnknownResultType(KitError):
    """The server answered with a `resultType` this client does not know; the spec makes that invalid."""

    def __init__(self, result_type: str) -> None:
        self.result_type = result_type
        super().__init__(f"the server answered with resultType {result_type!r}, which this client does not know")


class TooManyRounds(KitError):
    """The server kept asking past the kit's cap; a person should not be asked forever.

    Counts 2026-07-28 rounds that ask something, and 2025-11-25 `-32042` answers (each asks for URL flows).
    """

    def __init__(self, rounds: int) -> None:
        self.rounds = rounds
        super().__init__(f"the server asked for input in {rounds} rounds in a row; the kit stopped the call")


class StillWaiting(KitError):
    """The server kept answering "still waiting" past `Pacing.max_wait` for one call."""

    def __init__(self, seconds: float) -> None:
        self.seconds = seconds
        super().__init__(f"the server was still waiting after {seconds:.0f} s of polling; the kit stopped the call")


class ServerSilent(KitError, TimeoutError):
    """The server sent nothing for too long while nobody was deciding anything; the call was cut.

    With `connecting`, the server did not finish the connection set-up (`initialize` or `server/discover`)
    within the same limit, and the client was not opened.
    """

    def __init__(self, seconds: float, *, connecting: bool = False) -> None:
        self.seconds = seconds
        self.connecting = connecting
        if connecting:
            message = f"the server did not finish connecting within {seconds:g} s; the connection was given up"
        else:
            message = f"the server sent nothing for {seconds:g} s while no person was deciding; the call was cut"
        super().__init__(message)


class ConnectionLost(KitError, ConnectionError):
    """The connection to the server ended under the client: its process died, its HTTP endpoint went away, or
    the stream carrying a response was cut. `__cause__` is what the transport reported.

    A call in flight has no result then, and whether it took effect is for the server to say: a durable server
    hands the recorded result to the same call made again. With `connecting`, the server went before the
    connection was set up.
    """

    def __init__(self, detail: str, *, connecting: bool = False) -> None:
        self.detail = detail
        self.connecting = connecting
        when = " while connecting" if connecting else ""
        super().__init__(f"the connection to the server was lost{when}: {detail}")


class UnsupportedEra(KitError):
    """The server does not speak the protocol revision the client was pinned to; `offered` is what it speaks."""

    def __init__(self, wanted: str, offered: Sequence[str]) -> None:
        self.wanted = wanted
        self.offered = tuple(offered)
        speaks = ", ".join(self.offered) if self.offered else "no revision it names"
        super().__init__(f"the server does not speak protocol {wanted}; it offers {speaks}")
