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

Call the registry from the event loop the client runs on.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Iterable
from dataclasses import dataclass, replace
from enum import StrEnum

from mcp_elicit.client.url_review import UrlReview

log = logging.getLogger(__name__)

KEEP_FINISHED = 200
"""Finished flows kept for listing; the oldest go first."""


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
    """A snapshot of one flow; the registry hands out a new one on every change."""

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


@dataclass(eq=False)
class _Entry:
    flow: PendingFlow
    connection: object
    retry: Callable[[], bool] | None = None
    stop: Callable[[], None] | None = None


class PendingFlows:
    """The host's view of URL flows; one registry may serve several clients (servers)."""

    def __init__(
        self, on_change: Callable[[PendingFlow], None] | None = None, *, keep_finished: int = KEEP_FINISHED
    ) -> None:
        self._on_change = on_change
        self._keep_finished = keep_finished
        self._entries: dict[str, _Entry] = {}

    # -- for the host -----------------------------------------------------------------------------

    def list(self, *, active: bool | None = None) -> list[PendingFlow]:
        """All flows known, oldest first; `active=True` only those still awaiting consent or open."""
        flows = [entry.flow for entry in self._entries.values()]
        if active is None:
            return flows
        return [flow for flow in flows if flow.status.active is active]

    def get(self, flow_id: str) -> PendingFlow:
        return self._entries[flow_id].flow

    def retry_now(self, flow_id: str) -> bool:
        """Retry the call waiting on this flow now instead of at its next pace; False if nothing can be retried.

        Only a call the kit itself holds back can go on at once: between 2026-07-28 rounds, or after a
        `-32042` before the retry. A 2025-era call whose server holds it open while the flow runs, or a
        round already on its way to the server, has nothing to retry now.
        """
        entry = self._entries.get(flow_id)
        if entry is None or entry.flow.status is not FlowStatus.OPEN or entry.retry is None:
            return False
        return entry.retry()

    def cancel(self, flow_id: str, reason: str = "cancelled by the host") -> bool:
        """Stop waiting on this flow: the call waiting on it stops with `UrlFlowStopped`; False if already over.

        A flow the kit could not tie to one call (a 2025-era question while several calls were in flight)
        has no call to stop: it is only marked cancelled.
        """
        entry = self._entries.get(flow_id)
        if entry is None or not entry.flow.status.active:
            return False
        stop = entry.stop
        self._set(entry, FlowStatus.CANCELLED, reason)
        if stop is not None:
            stop()
        return True

    # -- for the kit ------------------------------------------------------------------------------

    def add(self, flow: PendingFlow, connection: object) -> PendingFlow:
        """Register a new flow under an id unique in this registry (its elicitation id or input key first)."""
        base = flow.id
        flow_id, number = base, 1
        while flow_id in self._entries:
            number += 1
            flow_id = f"{base}-{number}"
        flow = replace(flow, id=flow_id)
        self._entries[flow_id] = _Entry(flow, connection)
        self._notify(flow)
        return flow

    def controls(
        self, flow_id: str, *, retry: Callable[[], bool] | None = None, stop: Callable[[], None] | None = None
    ) -> None:
        """Wire the host's manual controls of a flow to the call that waits on it."""
        entry = self._entries[flow_id]
        entry.retry = retry
        entry.stop = stop

    def update(self, flow_id: str, status: FlowStatus, reason: str = "") -> PendingFlow:
        """Move a flow; a flow that already reached a final status keeps it."""
        entry = self._entries[flow_id]
        if entry.flow.status.active:
            self._set(entry, status, reason)
        return entry.flow

    def finish(self, flow_ids: Iterable[str], status: FlowStatus, reason: str) -> None:
        """Give every still-active flow of `flow_ids` a final status; flows already forgotten are skipped."""
        for flow_id in flow_ids:
            entry = self._entries.get(flow_id)
            if entry is not None and entry.flow.status.active:
                self._set(entry, status, reason)

    def of_connection(self, connection: object) -> tuple[str, ...]:
        return tuple(flow_id for flow_id, entry in self._entries.items() if entry.connection is connection)

    def find(self, connection: object, elicitation_id: str) -> PendingFlow | None:
        for entry in self._entries.values():
            if entry.connection is connection and entry.flow.elicitation_id == elicitation_id:
                return entry.flow
        return None

    def completed(self, connection: object, elicitation_id: str) -> PendingFlow | None:
        """A completion notification for `elicitation_id` from this connection's server."""
        for entry in self._entries.values():
            if (
                entry.connection is connection
                and entry.flow.elicitation_id == elicitation_id
                and entry.flow.status in (FlowStatus.OPEN, FlowStatus.ENDED)
            ):
                self._set(entry, FlowStatus.COMPLETED, "the server sent notifications/elicitation/complete")
                return entry.flow
        return None

    # -- internals --------------------------------------------------------------------------------

    def _set(self, entry: _Entry, status: FlowStatus, reason: str) -> None:
        entry.flow = replace(entry.flow, status=status, reason=reason)
        if not status.active:
            entry.retry = None
            entry.stop = None
            self._forget_oldest_finished()
        self._notify(entry.flow)

    def _forget_oldest_finished(self) -> None:
        finished = [key for key, entry in self._entries.items() if not entry.flow.status.active]
        for key in finished[: max(0, len(finished) - self._keep_finished)]:
            del self._entries[key]

    def _notify(self, flow: PendingFlow) -> None:
        if self._on_change is None:
            return
        try:
            self._on_change(flow)
        except Exception:
            log.exception("the pending-flow observer raised on %s (%s)", flow.id, flow.status)
