"""`ControlledClock`: the wall clock, plus an offset that only the test moves.

The runtime reads every TTL, lease and deadline from its clock, while it sleeps in real time between two
looks (a 2026-07-28 long poll, a lease renewal, a legacy call waiting on a URL flow). A frozen clock would
leave those waits waiting for a moment that never comes; this one runs on, so they end as they would in
production, and `advance` jumps it forward to make a TTL run out now instead of in fifteen minutes.
"""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta


class ControlledClock:
    """Wall-clock UTC time plus an offset that `advance` grows; safe to read from the store's worker threads."""

    def __init__(self) -> None:
        self._offset = timedelta(0)
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            offset = self._offset
        return datetime.now(UTC) + offset

    @property
    def offset(self) -> timedelta:
        """How far ahead of the wall clock this clock runs."""
        with self._lock:
            return self._offset

    def advance(self, delta: timedelta) -> datetime:
        """Move time forward by `delta` and return the new now. Time never goes back: TTLs only run out."""
        if delta < timedelta(0):
            raise ValueError(f"a clock only moves forward: got {delta}")
        with self._lock:
            self._offset += delta
        return self()

    def advance_to(self, moment: datetime) -> datetime:
        """Move time forward to `moment` (a decision's `expires_at`, say); a moment already past changes nothing."""
        now = self()
        return self.advance(moment - now) if moment > now else now
