"""The 2026-07-28 round loop, paced for a person instead of a program.

The SDK's own driver gives up after ten rounds and polls a "still waiting" server for about two seconds in
all, which ends a URL flow long before a person has signed in anywhere. This loop:

- answers a round's input requests one at a time through the kit (`dispatch`), then retries the original
  request with `inputResponses` and the round's `requestState` echoed byte for byte (absent when the
  server sent none); each retry is a new request, so a new JSON-RPC id;
- paces state-only rounds ("still waiting"): `Pacing.first` seconds, growing by `factor` up to `cap`,
  started again after every round that asked something, for at most `max_wait` seconds of waiting in a
  row; the host's `retry_now` on a flow of the call (or on its round wait) runs the next round at once.
  This is the time a person has in the browser after consenting to a URL (the server answers "still
  waiting" until the flow is done): no request stays open meanwhile, so the silence watch does not bound
  it, `max_wait` does;
  the stretch is on the call (`CallInFlight.waiting`) from its first state-only round to the next round
  that asks something, so a host can show the person how long it has been and when the kit gives up;
- stops a server that keeps asking new questions after `max_input_rounds` rounds in a row;
- keeps everything in local variables of one call: parallel calls share nothing.

A call in still-waiting rounds with no open URL flow of its own (an identical call carries the question it
waits on, another call runs the step it needs, the server waits on something out of band) has no flow to
show, yet it must not wait silently either: `RoundWaits` shows each such stretch as a wait of its own, with
the same controls, retry now (the next round goes out at once) and cancel (the call stops with
`CallStopped`, nothing withdrawn on the server). The protocol gives a still-waiting round no message, so
the wait says which call waits: `the tool NAME is still waiting` (`round_wait_message`), which a script's
`match` can name.

A result without `resultType` is complete and an unknown `resultType` an error; the transport wrapper
settles both before a result reaches this loop. A question the kit refuses (`dispatch` raises
`QuestionRefused`) stops the call; an error from a host callback (sampling, roots) stops it as that error.
"""

from __future__ import annotations

import itertools
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, replace
from typing import TypeVar

from mcp.shared.exceptions import MCPError
from mcp_types import ErrorData, InputRequest, InputRequiredResult, InputResponse, InputResponses

from mcp_elicit.client.calls import CallInFlight, Sleep, Waiting
from mcp_elicit.client.errors import StillWaiting, TooManyRounds
from mcp_elicit.client.pending import Wait
from mcp_elicit.model import WAITING_META_KEY
from mcp_elicit.printable import printable

R = TypeVar("R")

Send = Callable[[InputResponses | None, str | None], Awaitable[R | InputRequiredResult]]
Dispatch = Callable[[str, InputRequest], Awaitable[InputResponse | ErrorData]]


@dataclass(frozen=True, slots=True)
class Pacing:
    """How the kit goes back to a server that is not done: how it polls one that answers "still waiting"
    (state-only rounds), for how long and how many rounds, and what the person's "I'm done" does to a
    2025-era call the server holds open."""

    first: float = 0.5
    factor: float = 2.0
    cap: float = 5.0
    max_wait: float | None = 1800.0
    """Seconds the kit waits in a row on a server that is not done: 2026-07-28 state-only rounds (the
    person's time in the browser; then `StillWaiting`) and a 2025-11-25 `-32042` wait for URL flows (then
    `UrlFlowStopped`, or `UrlStillRequired` when no flow was left open). None: wait as long as it takes."""
    max_input_rounds: int = 64
    """Rounds in a row that ask something (2026-07-28), or `-32042` answers of one call (2025-11-25), before
    the call stops with `TooManyRounds`."""
    reissue_held_calls: bool = True
    """On a 2025-era connection, `retry_now` re-issues a call the server holds open while the person is in
    the browser (after consent). Meant for durable servers, which attach the new request to the same
    operation; a server that is not durable runs the tool again, so a host talking to such servers turns
    this off (then `retry_now` on such a call returns False)."""

    def __post_init__(self) -> None:
        if self.first <= 0 or self.cap < self.first or self.factor < 1 or self.max_input_rounds < 1:
            raise ValueError("pacing needs 0 < first <= cap, factor >= 1 and max_input_rounds >= 1")


STILL_WAITING = "is still waiting"
"""The fixed end of a round wait's message: a script entry matching it answers any such wait."""


MAX_SAID = 200


def round_wait_message(call: CallInFlight) -> str:
    """What a still-waiting wait says it is: the call, and what the server said it waits on, if it did (the
    protocol gives the round no message of its own)."""
    said = call.waiting.said if call.waiting is not None else ""
    return f"the {call.kind} {call.name} {STILL_WAITING}" + (f": {said}" if said else "")


def _said(result: InputRequiredResult) -> str:
    """The server's word on what a still-waiting round waits on: printable, bounded, or "" when it gave none."""
    said = (result.meta or {}).get(WAITING_META_KEY)
    if not isinstance(said, str):
        return ""
    shown = printable(" ".join(said.split()))
    return shown if len(shown) <= MAX_SAID else shown[: MAX_SAID - 1] + "…"


class RoundWaits:
    """The calls in a stretch of still-waiting rounds that no open URL flow of theirs shows for, as waits.

    The round loop adds a call when its stretch begins and takes it out when the loop ends; a call whose
    round asks something again is in no stretch (`CallInFlight.waiting` is None) and shows nothing.
    `server` names the server (read when shown: the name comes with the connection), `flow_open` says
    whether a flow is open, in which case `pending.FlowWaits` shows that flow and this shows nothing, so
    one wait is never on screen twice. Wait ids are this registry's own (`rounds-1`...).
    """

    def __init__(self, *, server: Callable[[], str], flow_open: Callable[[str], bool]) -> None:
        self._server = server
        self._flow_open = flow_open
        self._calls: dict[str, CallInFlight] = {}
        self._ids = itertools.count(1)

    def waits(self) -> Sequence[Wait]:
        found: list[Wait] = []
        for wait_id, call in self._calls.items():
            waiting = call.waiting
            if waiting is None or call.stopped or any(self._flow_open(flow_id) for flow_id in waiting.flows):
                continue
            since, deadline = waiting.started, waiting.deadline
            found.append(Wait(wait_id, self._server(), round_wait_message(call), since, since, deadline, kind="server"))
        return found

    def retry_now(self, wait_id: str) -> bool:
        """Send the next round now; False when there is no such wait, or its round is already on its way."""
        call = self._calls.get(wait_id)
        return call is not None and call.waiting is not None and call.retry()

    def cancel(self, wait_id: str, reason: str = "cancelled by the host") -> bool:
        """Stop the call of this wait (`CallStopped`); False when it no longer waits."""
        call = self._calls.get(wait_id)
        if call is None or call.waiting is None or call.stopped:
            return False
        call.stop(None, reason)
        return True

    def add(self, call: CallInFlight) -> None:
        if call not in self._calls.values():
            self._calls[f"rounds-{next(self._ids)}"] = call

    def discard(self, call: CallInFlight) -> None:
        for wait_id in [wait_id for wait_id, held in self._calls.items() if held is call]:
            del self._calls[wait_id]


async def drive(
    first: R | InputRequiredResult,
    *,
    send: Send[R],
    dispatch: Dispatch,
    call: CallInFlight,
    pacing: Pacing,
    clock: Callable[[], float],
    sleep: Sleep,
    rounds: RoundWaits | None = None,
) -> R:
    """Resolve `first` to the call's final result, round after round; `rounds` shows its still-waiting stretches."""
    try:
        current = first
        asking_rounds = 0
        delay = pacing.first
        waiting_since: float | None = None
        while isinstance(current, InputRequiredResult):
            responses: InputResponses | None = None
            if current.input_requests:
                asking_rounds += 1
                if asking_rounds > pacing.max_input_rounds:
                    raise TooManyRounds(pacing.max_input_rounds)
                responses = {}
                for key, request in current.input_requests.items():
                    response = await dispatch(key, request)
                    if isinstance(response, ErrorData):
                        raise MCPError.from_error_data(response)
                    responses[key] = response
                delay, waiting_since, call.waiting = pacing.first, None, None
            else:
                asking_rounds = 0
                now = clock()
                if waiting_since is None:
                    waiting_since = now
                    deadline = None if pacing.max_wait is None else now + pacing.max_wait
                    call.waiting = Waiting(now, deadline, tuple(call.flows), _said(current))
                    if rounds is not None:
                        rounds.add(call)
                elif call.waiting is not None:
                    call.waiting = replace(call.waiting, said=_said(current))
                if pacing.max_wait is not None and now - waiting_since >= pacing.max_wait:
                    raise StillWaiting(now - waiting_since)
                await call.pause(delay, sleep)
                delay = min(delay * pacing.factor, pacing.cap)
            current = await send(responses, current.request_state)
        return current
    finally:
        call.waiting = None
        if rounds is not None:
            rounds.discard(call)
