"""Back-off after repeated failed sign-ins, per account and per client address.

A password can be guessed only as fast as the sign-in lets it be tried. Every failed sign-in counts against
the account it named and against the address it came from. Once an account has `account_failures` failures,
or an address `address_failures`, each further attempt for it is refused (the sign-in page answers HTTP 429
with `Retry-After`) until a delay has passed: `first` after reaching the count, doubling with each failure
after that, at most `ceiling`. The right password is refused too while the delay runs, so the back-off
cannot be raced. Failures are forgotten `window` after the last one. A successful sign-in clears its
account's count, not its address's: a caller who knows one password must not reset the guesses made from
the same address at other accounts. An attempt is held from its start to its end, so attempts sent at once
are let through only while the count has room for them all (one at a time once it is full): sending many
in parallel gains nothing.

Accounts are counted whether or not they exist, so that a back-off never tells which ones do; every name
that is not a valid username counts as one account.

Does not guarantee:

- Limits across instances: the counts are kept in the process, per instance, and lost on restart. Behind
  a balancer that spreads sign-ins over N instances, an attacker gets N times the attempts.
- Freedom from lockout: anyone may fail on an account on purpose and so hold its owner back too, for at
  most `ceiling` at a time. Behind a shared address (a NAT, a proxy the ASGI server does not see through:
  see uvicorn's `forwarded_allow_ips`) everyone there shares the address's count.
- Counts beyond `MAX_TRACKED` (a few hundred bytes each): past it, a tenth of them goes at once, forgotten counts
  first, then the least recently touched ones that hold nothing back, and only then, oldest first, ones that do.
  A refused attempt adds no count.
"""

from __future__ import annotations

import math
from collections import OrderedDict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field
from datetime import timedelta
from typing import Literal, TypeAlias

MAX_TRACKED = 100_000

Kind: TypeAlias = Literal["account", "address"]


@dataclass(frozen=True, slots=True)
class SignInBackoff:
    """When failed sign-ins are held back, and for how long (see the module)."""

    account_failures: int = 5
    address_failures: int = 20
    first: timedelta = timedelta(seconds=30)
    ceiling: timedelta = timedelta(minutes=15)
    window: timedelta = timedelta(hours=1)

    def __post_init__(self) -> None:
        if self.account_failures < 1 or self.address_failures < 1:
            raise ValueError("a sign-in back-off starts after at least one failure")
        if self.first <= timedelta(0) or self.ceiling < self.first:
            raise ValueError(f"back-off delays must be positive, the ceiling at least the first ({self.first})")
        if self.window <= self.ceiling:
            raise ValueError(f"failures must be remembered longer than the longest delay ({self.ceiling})")

    def delay(self, beyond: int) -> float:
        """Seconds to hold back after a failure `beyond` failures past the limit (0: the one reaching it)."""
        return min(self.first.total_seconds() * 2.0 ** min(beyond, 64), self.ceiling.total_seconds())


class HeldBack(Exception):
    """An attempt refused without checking the password: `seconds` to wait, for the `kinds` held back."""

    def __init__(self, seconds: int, kinds: tuple[Kind, ...]) -> None:
        self.seconds = seconds
        self.kinds = kinds
        super().__init__(f"held back for {seconds} s ({' and '.join(kinds)})")


@dataclass(slots=True)
class Attempt:
    """One sign-in attempt under way: set `succeeded` once the password matched."""

    succeeded: bool = False
    held_back: dict[Kind, int] = field(default_factory=dict)
    """After a failure: the delay (seconds) it began or lengthened, by what it holds back."""


@dataclass(slots=True)
class _Count:
    failures: int = 0
    last: float = 0.0
    until: float = 0.0
    pending: int = 0


class SignInThrottle:
    """The counts of one process (see the module); `clock` gives seconds since 1970."""

    def __init__(self, backoff: SignInBackoff, clock: Callable[[], float], *, tracked: int = MAX_TRACKED) -> None:
        self.backoff = backoff
        self._clock = clock
        self._tracked = tracked
        self._counts: OrderedDict[tuple[Kind, str], _Count] = OrderedDict()

    @property
    def tracked_now(self) -> int:
        """How many counts (per account, per address) the process holds now: the memory the back-off takes,
        which `tracked` bounds, so that a flood of new names or of refused attempts cannot grow it."""
        return len(self._counts)

    @contextmanager
    def attempt(self, account: str, address: str) -> Iterator[Attempt]:
        """Raise `HeldBack` if the account or the address must wait; else yield the attempt, which counts as a
        failure unless `succeeded` is set by the end of the block (an error or a cancellation is a failure)."""
        now = self._clock()
        limits: tuple[tuple[Kind, str, int], ...] = (
            ("account", account, self.backoff.account_failures),
            ("address", address, self.backoff.address_failures),
        )
        # A refused attempt creates no count: holding an address back must not let it fill the table.
        waits = {kind: _wait(self._found((kind, key), now), limit, now) for kind, key, limit in limits}
        if any(wait > 0 for wait in waits.values()):
            held = tuple(kind for kind, wait in waits.items() if wait > 0)
            raise HeldBack(max(1, math.ceil(max(waits.values()))), held)
        counts = [(kind, self._count((kind, key), now), limit) for kind, key, limit in limits]
        for _, count, _ in counts:
            count.pending += 1
        attempt = Attempt()
        try:
            yield attempt
        finally:
            now = self._clock()
            for kind, count, limit in counts:
                count.pending -= 1
                if attempt.succeeded:
                    if kind == "account":
                        count.failures, count.until = 0, 0.0
                    continue
                count.failures, count.last = count.failures + 1, now
                if count.failures >= limit:
                    delay = self.backoff.delay(count.failures - limit)
                    count.until = now + delay
                    attempt.held_back[kind] = math.ceil(delay)

    def _found(self, key: tuple[Kind, str], now: float) -> _Count | None:
        count = self._counts.get(key)
        if count is None or _forgotten(count, now, self.backoff.window.total_seconds()):
            return None
        return count

    def _count(self, key: tuple[Kind, str], now: float) -> _Count:
        count = self._found(key, now)
        if count is None:
            count = self._counts[key] = _Count()
            self._bound(now, key)
        self._counts.move_to_end(key)
        return count

    def _bound(self, now: float, kept: tuple[Kind, str]) -> None:
        """Past `tracked` counts, drop down to nine tenths of it at once: one scan per tenth of new counts, so a
        flood of new names costs little per attempt."""
        if len(self._counts) <= self._tracked:
            return
        excess = len(self._counts) - self._tracked * 9 // 10
        window = self.backoff.window.total_seconds()
        forgotten: list[tuple[Kind, str]] = []
        idle: list[tuple[Kind, str]] = []
        holding: list[tuple[Kind, str]] = []
        for key, count in self._counts.items():
            if key == kept or count.pending:
                continue
            if _forgotten(count, now, window):
                forgotten.append(key)
            else:
                (holding if count.until > now else idle).append(key)
        for key in (forgotten + idle + holding)[:excess]:
            del self._counts[key]


def _wait(count: _Count | None, limit: int, now: float) -> float:
    if count is None:
        return 0.0
    if count.until > now:
        return count.until - now
    if count.pending and count.failures + count.pending >= limit:
        return 1.0  # the attempts under way may fill the count: one more once they are done
    return 0.0


def _forgotten(count: _Count, now: float, window: float) -> bool:
    return count.pending == 0 and count.until <= now and now - count.last > window
