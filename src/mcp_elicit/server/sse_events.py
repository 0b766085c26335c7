"""The SSE events a streamable HTTP server sent lately, kept so that a client whose stream dropped resumes it.

Why: with an event store the SDK's transport opens every SSE stream with a priming event (an id, no data) and a
`retry` field, and a client that lost the stream mid-call reconnects with `Last-Event-ID` and gets what was sent
after it, the call's result included, rather than a call that never answers. Without one, a dropped stream loses
what was on it. The events live in this process's memory, the last `limit` of them: a stream is resumed within
a moment (the `retry` field says how soon), not after a restart.
"""

from __future__ import annotations

from collections import deque

from mcp.server.streamable_http import EventCallback, EventId, EventMessage, EventStore, StreamId
from mcp_types import JSONRPCMessage

DEFAULT_EVENT_LIMIT = 10_000
RETRY_INTERVAL_MS = 1000
"""How long a client waits before it reconnects to a stream that dropped (the SSE `retry` field)."""


class MemoryEventStore(EventStore):
    """The SDK's `EventStore`, in memory: event ids count up from 1, and the oldest events give way past `limit`."""

    def __init__(self, limit: int = DEFAULT_EVENT_LIMIT) -> None:
        if limit < 1:
            raise ValueError(f"an event store keeps at least 1 event, not {limit}")
        self._events: deque[tuple[int, StreamId, JSONRPCMessage | None]] = deque(maxlen=limit)
        self._last = 0

    async def store_event(self, stream_id: StreamId, message: JSONRPCMessage | None) -> EventId:
        self._last += 1
        self._events.append((self._last, stream_id, message))
        return str(self._last)

    async def replay_events_after(self, last_event_id: EventId, send_callback: EventCallback) -> StreamId | None:
        """The events of `last_event_id`'s stream after it, sent in order; `None` for an id it does not keep (never
        given, or given so long ago that it gave way), which the SDK answers as an unknown stream."""
        if not last_event_id.isdigit() or not self._events:
            return None
        position = int(last_event_id) - self._events[0][0]
        if not 0 <= position < len(self._events):
            return None
        _, stream_id, _ = self._events[position]
        for event_id, stream, message in list(self._events)[position + 1 :]:
            if stream == stream_id and message is not None:
                await send_callback(EventMessage(message, str(event_id)))
        return stream_id
