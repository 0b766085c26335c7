"""A clock the test moves by hand, for store tests that read `now` from many threads."""

from __future__ import annotations

import threading
from datetime import UTC, datetime, timedelta

START = datetime(2026, 11, 30, 12, 0, 0, tzinfo=UTC)


class FakeClock:
    """A clock the test moves by hand; safe to read from many threads."""

    def __init__(self, now: datetime = START) -> None:
        self._now = now
        self._lock = threading.Lock()

    def __call__(self) -> datetime:
        with self._lock:
            return self._now

    def advance(self, delta: timedelta) -> datetime:
        with self._lock:
            self._now += delta
            return self._now
