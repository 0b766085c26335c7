"""External URL flows the host can see and steer: list them, retry now, cancel.

A URL-mode elicitation lives longer than a dialog: the person consents, a browser page opens, and the
outcome arrives later (a completion notification on 2025-11-25, the server's next answer on 2026-07-28),
or never. The registry shows each flow with its server, message, URL and status, lets the host retry the
waiting call at once or stop it, and tells an optional observer about every status change.

Statuses: `awaiting_consent` (the person is being asked), `open` (consented and opened; the outcome is
out of band), then one final status: `completed` (the server said so: `notifications/elicitation/complete`),
`declined` (the person refused to open it), `cancelled` (the person or the host stopped it, or it could
not be offered), `failed` (it could not be opened, or waiting for it ran out), `ended` (the call that
waited on it finished without a completion signal; the call's result tells how it went, since 2026-07-28
has no completion signal at all). The first final status wins and later signals change nothing, with one
exception: a completion notification still turns `ended` into `completed`, since it may be processed just
after the result of the call it belongs to.

A flow that leaves `awaiting_consent` any other way than by the person's answer (the host cancels it, its
call ends) closes the consent dialog still on screen: the kit then opens nothing and answers `cancel`.

The host's controls act on the call that holds a flow, for as long as that call runs: `retry_now` whatever
the flow's status (the call decides whether it can go on, see `calls`), `cancel` while the flow is active
or when the call adopted it on the `-32042` path: a 2025-11-25 call the server answers `-32042` for a flow
that is already completed still waits on it, and the host must be able to move it on or stop it, while a
flow declined earlier in a call that went on to other things is no reason to stop that call.
Flows are identified by ids of the kit's own (`flow-1`, `flow-2`...): a server's `elicitationId` is only
unique on that server, and a server may use it again, so it stays a field (`elicitation_id`) to match
completion notifications with.

What a call waits on, the person sees as waits (`FlowWaits`): a flow that is open while the kit waits on
the server for its call (after `-32042`, between 2026-07-28 still-waiting rounds: `CallInFlight.waiting`),
or while a 2025-era server holds the call, and a completed flow a `-32042` server asks for again. Each says
since when the person has been at it, and when the kit gives up, so that no wait is ever silent. `Wait` and
`WaitSource` are not about URLs: anything else a call may wait on is shown and steered the same way, such
as 2026-07-28 still-waiting rounds with no open URL flow of the call's own (`mrtr_loop.RoundWaits`).

Call the registry from the event loop the client runs on.
"""

from __future__ import annotations

import itertools
import logging
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from typing import Literal, Protocol

import anyio

from mcp_elicit.client.calls import CallInFlight
from mcp_elicit.client.url_review import UrlReview

log = logging.getLogger(__name__)

WaitKind = Literal["url_flow", "server"]
"""What a wait is on: a URL flow the person is at in the browser, or the server alone (still-waiting rounds)."""

KEEP_FINISHED = 200
"""Finished flows kept for listing; those that finished first go first, and none a call still holds."""


class FlowStatus(StrEnum):
    AWAITING_CONSENT = "awaiting_consent"
    OPEN = "open"
    COMPLETED = "completed"
    DECLINED = "declined"
    CANCELLED = "cancelled"
    FAILED = "failed"
    ENDED = "ended"

    @property
    def active(self) -> bool:
        return self in (FlowStatus.AWAITING_CONSENT, FlowStatus.OPEN)


@dataclass(frozen=True, slots=True)
class PendingFlow:
    """A snapshot of one flow; the registry hands out a new one on every change.

    `url` is the reviewed URL (`review.url`): the one the person was shown and, after consent, the one opened.
    """

    id: str
    server: str
    message: str
    url: str
    review: UrlReview
    status: FlowStatus
    protocol_version: str | None = None
    tool: str | None = None
    elicitation_id: str | None = None
    input_key: str | None = None
    reason: str = ""
    opened_at: float | None = None
    """When the URL was opened after consent, on the client's clock: how long a person has been in the
    browser, which bounds how long a silent server holding the call is waited for (see `watch`)."""


@dataclass(frozen=True, slots=True)
class Wait:
    """Something a call waits on that a person can act on, as a status line shows it; times on the client's clock.

    `message` and `server` come from the server: show them through `terminal_views.printable`.
    """

    id: str
    """What the source's `retry_now` and `cancel` take (a flow's id for a URL flow)."""
    server: str
    message: str
    since: float
    """When the person's part began (the URL was opened): the elapsed time counts from here."""
    started: float
    """When this stretch of waiting began; a new stretch (a server answering `-32042` again) is a new prompt."""
    deadline: float | None
    """When the kit stops waiting; None: no limit."""
    done: bool = False
    """The person's part is over (the flow completed) but the server still asks for it: retrying goes on."""
    kind: WaitKind = "url_flow"
    """On a URL flow, or on the server alone: then `cancel` stops the call itself (`CallStopped`)."""
    approval: bool = False
    """On the server, for an approval others give (a tool-approval task): shown as "Waiting for approval"."""


class WaitSource(Protocol):
    """What a status line shows and steers: the waits of one kind, and the host's two controls on each."""

    def waits(self) -> Sequence[Wait]: ...

    def retry_now(self, wait_id: str) -> bool: ...

    def cancel(self, wait_id: str, reason: str) -> bool: ...


class FlowWaits:
    """The URL flows of `pending` that calls wait on now, as waits.

    `browser_time`: how long the kit counts a person as busy in the browser after opening a URL, which
    bounds a 2025-era call the server holds open meanwhile (the client's `Pacing.max_wait`; see `watch`);
    the kit's own waits carry their deadline themselves.
    """

    def __init__(self, pending: PendingFlows, *, browser_time: float | None) -> None:
        self.pending = pending
        self.browser_time = browser_time

    def waits(self) -> Sequence[Wait]:
        return self.pending.waits(browser_time=self.browser_time)

    def retry_now(self, wait_id: str) -> bool:
        return self.pending.retry_now(wait_id)

    def cancel(self, wait_id: str, reason: str) -> bool:
        return self.pending.cancel(wait_id, reason)


@dataclass(eq=False)
class _Entry:
    flow: PendingFlow
    connection: object
    holder: object | None = None
    retry: Callable[[], bool] | None = None
    stop: Callable[[str], None] | None = None
    dialog: anyio.CancelScope | None = None
    adopted: bool = False
    """The holder waits on this flow through `-32042`: cancelling it stops the call whatever its status."""
    finished: int = 0
    """When the flow reached its final status, as a sequence number (0 while active)."""

    @property
    def evictable(self) -> bool:
        return self.finished > 0 and self.holder is None and self.dialog is None


class PendingFlows:
    """The host's view of URL flows; one registry may serve several clients (servers)."""

    def __init__(
        self, on_change: Callable[[PendingFlow], None] | None = None, *, keep_finished: int = KEEP_FINISHED
    ) -> None:
        self._on_change = on_change
        self._keep_finished = keep_finished
        self._entries: dict[str, _Entry] = {}
        self._ids = itertools.count(1)
        self._finish_order = itertools.count(1)

    # -- for the host -----------------------------------------------------------------------------

    def list(self, *, active: bool | None = None) -> list[PendingFlow]:
        """All flows known, oldest first; `active=True` only those still awaiting consent or open."""
        flows = [entry.flow for entry in self._entries.values()]
        if active is None:
            return flows
        return [flow for flow in flows if flow.status.active is active]

    def get(self, flow_id: str) -> PendingFlow:
        return self._entries[flow_id].flow

    def waits(self, *, browser_time: float | None = None) -> Sequence[Wait]:
        """The flows a call waits on now, oldest first: see `FlowWaits` (which passes `browser_time`)."""
        found: list[Wait] = []
        for entry in self._entries.values():
            wait = _wait_of(entry, browser_time)
            if wait is not None:
                found.append(wait)
        return found

    def retry_now(self, flow_id: str) -> bool:
        """Retry the call waiting on this flow now instead of at its next pace; False if nothing can be retried.

        Acts on the call that holds the flow, whatever the flow's status: between 2026-07-28 rounds, or
        after a `-32042` before the retry, the call goes on at once; a 2025-era call the server holds open
        while the flow runs is re-issued (the in-flight request is cancelled, the same call sent again under
        a new id, which a durable server attaches to the same operation). False when no running call holds
        the flow, or while a 2026-07-28 round is already on its way to the server.
        """
        entry = self._entries.get(flow_id)
        if entry is None or entry.retry is None:
            return False
        return entry.retry()

    def cancel(self, flow_id: str, reason: str = "cancelled by the host") -> bool:
        """Stop waiting on this flow: a consent dialog still open for it closes and nothing is opened, and the
        call that holds it stops with `UrlFlowStopped`. False when there was nothing left to stop.

        A flow the kit could not tie to one call (a 2025-era question while several calls were in flight)
        has no call to stop: it is only marked cancelled (its dialog closes all the same). Nor does a flow
        that already finished (declined, completed...) in an earlier exchange of a call that went on to other
        things: cancelling it stops the call only when the call still waits on it, that is when the call
        adopted it on the `-32042` path.
        """
        entry = self._entries.get(flow_id)
        if entry is None:
            return False
        acted = False
        stop = entry.stop
        was_active = entry.flow.status.active
        if was_active:
            self._set(entry, FlowStatus.CANCELLED, reason)
            acted = True
        if stop is not None and (was_active or entry.adopted):
            stop(reason)
            acted = True
        return acted

    # -- for the kit ------------------------------------------------------------------------------

    def add(self, flow: PendingFlow, connection: object) -> PendingFlow:
        """Register a new flow under a new kit id (whatever `flow.id` says)."""
        flow = replace(flow, id=f"flow-{next(self._ids)}")
        self._entries[flow.id] = _Entry(flow, connection)
        self._notify(flow)
        return flow

    def hold(
        self,
        flow_id: str,
        holder: object,
        *,
        retry: Callable[[], bool],
        stop: Callable[[str], None],
        adopted: bool = False,
    ) -> None:
        """A call now waits on this flow: the host's controls reach that call until it lets go (`release`).

        `adopted`: the call waits on it through `-32042`, so the host's cancel stops the call even once the
        flow has finished; otherwise only while the flow is still active.
        """
        entry = self._entries[flow_id]
        entry.holder, entry.retry, entry.stop = holder, retry, stop
        entry.adopted = entry.adopted or adopted

    def release(self, flow_ids: Iterable[str], holder: object) -> None:
        """The call `holder` no longer waits on these flows (it finished); they may be forgotten later."""
        for flow_id in flow_ids:
            entry = self._entries.get(flow_id)
            if entry is not None and entry.holder is holder:
                entry.holder, entry.retry, entry.stop, entry.adopted = None, None, None, False
        self._forget_oldest_finished()

    def consent_dialog(self, flow_id: str, scope: anyio.CancelScope | None) -> None:
        """The scope the person's consent dialog for this flow runs in (None once it is closed).

        Moving the flow out of `awaiting_consent` from outside (the host's cancel, the call's end) cancels it.
        """
        self._entries[flow_id].dialog = scope

    def update(
        self, flow_id: str, status: FlowStatus, reason: str = "", *, opened_at: float | None = None
    ) -> PendingFlow:
        """Move a flow; a flow that already reached a final status keeps it. `opened_at`: see `PendingFlow`."""
        entry = self._entries[flow_id]
        if entry.flow.status.active:
            if opened_at is not None:
                entry.flow = replace(entry.flow, opened_at=opened_at)
            self._set(entry, status, reason)
        return entry.flow

    def finish(self, flow_ids: Iterable[str], status: FlowStatus, reason: str) -> None:
        """Give every still-active flow of `flow_ids` a final status; flows already forgotten are skipped."""
        for flow_id in flow_ids:
            entry = self._entries.get(flow_id)
            if entry is not None and entry.flow.status.active:
                self._set(entry, status, reason)

    def of_connection(self, connection: object) -> tuple[str, ...]:
        """The flows one client registered: a registry may serve several clients, and a client that closes
        ends its own flows only."""
        return tuple(flow_id for flow_id, entry in self._entries.items() if entry.connection is connection)

    def find(self, connection: object, elicitation_id: str) -> PendingFlow | None:
        """The newest flow this connection's server asked under `elicitation_id`, or None."""
        for entry in reversed(self._entries.values()):
            if entry.connection is connection and entry.flow.elicitation_id == elicitation_id:
                return entry.flow
        return None

    def completed(self, connection: object, elicitation_id: str) -> PendingFlow | None:
        """A completion notification for `elicitation_id` from this connection's server; the flow it completed.

        A server may use an id again, so the newest open flow under it wins. Only when none is active does
        the notification complete an `ended` one (it arrived just after its call's result); a flow still
        awaiting consent was never opened, so nothing is completed then.
        """
        matches = [
            entry
            for entry in reversed(self._entries.values())
            if entry.connection is connection and entry.flow.elicitation_id == elicitation_id
        ]
        reason = "the server sent notifications/elicitation/complete"
        for entry in matches:
            if entry.flow.status is FlowStatus.OPEN:
                self._set(entry, FlowStatus.COMPLETED, reason)
                return entry.flow
        if any(entry.flow.status.active for entry in matches):
            return None
        for entry in matches:
            if entry.flow.status is FlowStatus.ENDED:
                self._set(entry, FlowStatus.COMPLETED, reason)
                return entry.flow
        return None

    # -- internals --------------------------------------------------------------------------------

    def _set(self, entry: _Entry, status: FlowStatus, reason: str) -> None:
        was = entry.flow.status
        entry.flow = replace(entry.flow, status=status, reason=reason)
        if was is FlowStatus.AWAITING_CONSENT and status is not was and entry.dialog is not None:
            entry.dialog.cancel()
        if not status.active:
            entry.finished = next(self._finish_order)
            self._forget_oldest_finished()
        self._notify(entry.flow)

    def _forget_oldest_finished(self) -> None:
        evictable = sorted((entry for entry in self._entries.values() if entry.evictable), key=lambda e: e.finished)
        for entry in evictable[: max(0, len(evictable) - self._keep_finished)]:
            del self._entries[entry.flow.id]

    def _notify(self, flow: PendingFlow) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(flow)
        except Exception:
            log.exception("the pending-flow observer raised on %s (%s)", flow.id, flow.status)


def _wait_of(entry: _Entry, browser_time: float | None) -> Wait | None:
    """The wait on this flow, if its call waits on it now.

    The kit waiting itself (`CallInFlight.waiting`): on an open flow of that wait, or on a completed one a
    `-32042` server asks for again. Otherwise only a 2025-era call the server holds open while the person
    is in the browser: an open flow the call did not adopt on the `-32042` path (between two `-32042`
    answers the kit is about to wait again, and a 2026-07-28 round on its way is no wait yet).
    """
    call, flow = entry.holder, entry.flow
    if not isinstance(call, CallInFlight):
        return None
    waiting = call.waiting
    if waiting is not None and flow.id in waiting.flows:
        done = flow.status is FlowStatus.COMPLETED and entry.adopted
        if flow.status is not FlowStatus.OPEN and not done:
            return None
        since = flow.opened_at if flow.opened_at is not None else waiting.started
        return Wait(flow.id, flow.server, flow.message, since, waiting.started, waiting.deadline, done)
    from mcp_types.version import HANDSHAKE_PROTOCOL_VERSIONS  # here: the terminal handler runs without the SDK

    held = flow.protocol_version in HANDSHAKE_PROTOCOL_VERSIONS and not entry.adopted and waiting is None
    if not held or flow.status is not FlowStatus.OPEN or flow.opened_at is None:
        return None
    deadline = None if browser_time is None else flow.opened_at + browser_time
    return Wait(flow.id, flow.server, flow.message, flow.opened_at, flow.opened_at, deadline)
