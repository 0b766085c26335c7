"""The in-memory SSE event store the gateway's streamable HTTP app resumes dropped streams from: each stream's
events after the one a client last saw, in order, and nothing for an id it never gave or no longer keeps."""

from __future__ import annotations

import pytest
from mcp.server.streamable_http import EventMessage
from mcp_types import JSONRPCMessage, JSONRPCNotification

from mcp_elicit.server.sse_events import MemoryEventStore

pytestmark = pytest.mark.anyio


def notice(n: int) -> JSONRPCMessage:
    return JSONRPCNotification(jsonrpc="2.0", method="notifications/progress", params={"progress": n})


async def replayed(store: MemoryEventStore, last: str) -> tuple[str | None, list[tuple[str, int]]]:
    sent: list[tuple[str, int]] = []

    async def send(event: EventMessage) -> None:
        assert event.event_id is not None and isinstance(event.message, JSONRPCNotification)
        assert event.message.params is not None
        sent.append((event.event_id, event.message.params["progress"]))

    stream = await store.replay_events_after(last, send)
    return stream, sent


async def test_a_stream_resumes_after_the_last_event_its_client_saw_and_no_other_streams_events() -> None:
    store = MemoryEventStore()
    primed = await store.store_event("a", None)  # the priming event: an id, no message
    ids = [await store.store_event(stream, notice(n)) for n, stream in enumerate(["a", "b", "a", "a"], start=1)]
    assert await replayed(store, primed) == ("a", [(ids[0], 1), (ids[2], 3), (ids[3], 4)])
    assert await replayed(store, ids[2]) == ("a", [(ids[3], 4)])
    assert await replayed(store, ids[1]) == ("b", [])


async def test_an_id_it_never_gave_or_no_longer_keeps_resumes_nothing() -> None:
    store = MemoryEventStore(limit=2)
    assert await replayed(store, "1") == (None, [])  # nothing kept yet
    first = await store.store_event("a", notice(1))
    kept = [await store.store_event("a", notice(n)) for n in (2, 3)]
    assert await replayed(store, first) == (None, [])  # gave way to the newer two
    assert await replayed(store, kept[0]) == ("a", [(kept[1], 3)])
    assert await replayed(store, "99") == (None, [])
    assert await replayed(store, "not-an-id") == (None, [])
    with pytest.raises(ValueError, match="at least 1 event"):
        MemoryEventStore(limit=0)
