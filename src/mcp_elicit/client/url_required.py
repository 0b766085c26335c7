"""The 2025-11-25 `-32042` path: the server refuses the call until URL flows are done, the kit gets them done.

For each elicitation in the error's `data.elicitations` the person is asked for consent and the URL is
opened (an elicitation the kit already opened or saw completed for this server, by its `elicitationId`,
is not asked again: the call adopts that flow). Then the call waits until every flow is completed
(`notifications/elicitation/complete`), or the host says `retry_now` on one of them (the notification is
optional and may be lost), and the caller retries the original call. A refused consent stops the call
(`UrlFlowStopped`): the server has no way to hear the refusal on this path, so there is nothing to retry.
So does the host's `cancel`, and so does `max_wait` with a flow still open (the open flows then show as
failed).

A server that asks again for flows that were all already completed gets no automatic retry: it did not
see the completion, and retrying at once would spin. The host's controls stay on every adopted flow,
completed or not, so `retry_now` retries and `cancel` stops the call; without either, `max_wait` ends the
call with `UrlStillRequired` (no flow is open, so nothing is left for the person to finish).

While it waits, the call says so (`CallInFlight.waiting`: since when, until when, on which flows): the
notification is optional, and a person must see that the kit is waiting for them and for how long.
"""

from __future__ import annotations

from collections.abc import Callable

from mcp.shared.exceptions import MCPError, UrlElicitationRequiredError
from mcp_types import ErrorData

from mcp_elicit.client.calls import CallInFlight, Sleep, Waiting
from mcp_elicit.client.elicitor import Elicitor
from mcp_elicit.client.errors import UrlFlowStopped, UrlStillRequired
from mcp_elicit.client.pending import FlowStatus, PendingFlow, PendingFlows


async def fulfil_url_required(
    error: MCPError,
    *,
    call: CallInFlight,
    elicitor: Elicitor,
    connection: object,
    max_wait: float | None,
    clock: Callable[[], float],
    sleep: Sleep,
) -> None:
    """Return when the call should be retried; raise `UrlFlowStopped` or `UrlStillRequired` when it must not be."""
    pending = elicitor.pending
    wanted = UrlElicitationRequiredError.from_error(error.error).elicitations
    if not wanted:
        raise error
    flow_ids: list[str] = []
    for params in wanted:
        known = pending.find(connection, params.elicitation_id) if params.elicitation_id else None
        if known is not None and known.status in (FlowStatus.OPEN, FlowStatus.COMPLETED):
            _adopt(call, pending, known)
            flow_ids.append(known.id)
            continue
        answer, flow = await elicitor.url(params, call)
        if flow is None:
            assert isinstance(answer, ErrorData)
            raise error
        if flow.status is not FlowStatus.OPEN:
            raise UrlFlowStopped(flow)
        _adopt(call, pending, flow)
        flow_ids.append(flow.id)
    fresh = any(pending.get(flow_id).status is FlowStatus.OPEN for flow_id in flow_ids)
    call.retry_requested = False
    started = clock()
    call.waiting = Waiting(started, None if max_wait is None else started + max_wait, tuple(flow_ids))
    try:
        while True:
            flows = [pending.get(flow_id) for flow_id in flow_ids]
            for flow in flows:
                if flow.status not in (FlowStatus.OPEN, FlowStatus.COMPLETED):
                    raise UrlFlowStopped(flow)
            if fresh and all(flow.status is FlowStatus.COMPLETED for flow in flows):
                return
            if call.retry_requested:
                call.retry_requested = False
                return
            remaining = None if max_wait is None else max_wait - (clock() - started)
            if remaining is not None and remaining <= 0:
                still_open = [flow for flow in flows if flow.status is FlowStatus.OPEN]
                if not still_open:
                    raise UrlStillRequired(flows, clock() - started)
                late = [
                    pending.update(flow.id, FlowStatus.FAILED, f"not completed within {max_wait:.0f} s")
                    for flow in still_open
                ]
                raise UrlFlowStopped(late[0])
            await call.pause(remaining, sleep)

    finally:
        call.waiting = None


def _adopt(call: CallInFlight, pending: PendingFlows, flow: PendingFlow) -> None:
    """A flow this call waits on through `-32042` (asked now or by an earlier call): the host's controls now
    reach this call, and its cancel stops the call whatever the flow's status."""
    if flow.id not in call.flows:
        call.flows.append(flow.id)
    pending.hold(flow.id, call, retry=call.retry, stop=lambda reason: call.stop(flow.id, reason), adopted=True)
