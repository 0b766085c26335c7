"""The runtime's control-flow signals: how a call's turn ends early, out of a tool body's reach.

A tool body is ordinary code and may well wrap `flow.ask` in `try: ... except Exception:`. The runtime
still has to end a call's turn from inside such a body: to return a 2026-07-28 round, to run the body
again on records that changed meanwhile, or to answer with the tool's fallback when the client cannot be
asked. These signals therefore derive from `BaseException`, as Temporal's `ContinueAsNewError` does, so
`except Exception` lets them through. A body that catches one anyway (`except BaseException`, a bare
`except`) cannot turn it into a silent wrong result: the call remembers the signal, every later flow
call raises it again, and a body that returns or fails after swallowing it ends with `SwallowedSignal`.
"""

from __future__ import annotations

from mcp_elicit.telemetry.instruments import Ending


class Signal(BaseException):
    """Ends the call's turn here; the runtime, never the body, decides what the caller sees."""

    @property
    def ends_as(self) -> Ending:
        """What telemetry says of the call or question this signal ends (`telemetry.instruments.Telling`)."""
        return Ending("signal", type(self).__name__)


class Suspended(Signal):
    """The turn ends before the body finishes: something must be asked, or is still being waited on.

    The era adapter that raised it turns it into its wire shape (a 2026-07-28 round, say).
    """


class StaleSnapshot(Signal):
    """A held write lost its compare-and-set: the body ran on records that changed meanwhile."""


class SwallowedSignal(RuntimeError):
    """The body caught one of the runtime's control-flow signals instead of letting it through."""

    def __init__(self, signal: Signal) -> None:
        self.signal = signal
        super().__init__(
            f"the tool body caught mcp-elicit's control-flow signal {type(signal).__name__}: flow calls end the "
            "call's turn with BaseException subclasses; catch Exception (never BaseException or a bare except) "
            "around them"
        )
