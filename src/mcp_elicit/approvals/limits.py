"""Limits on new approval requests per caller: the draft's defence against approval-request amplification.

SEP-2848 (the draft "Asynchronous Approval for Tool Calls", text of 2026-06-08) expects a compromised or buggy
agent loop, not an exceptional one: deployments MUST rate-limit access-request submission per caller and SHOULD
bound the caller's outstanding pending approval tasks, answering a call over either limit with a tool error that
is not itself a request for approval (no task), so the agent does not loop on it. `ApprovalLimits` says both
limits; `RequestBucket` keeps the rate.

Guarantees: the bound on open approval tasks is counted in the store, so it holds across the instances that
share it, up to the tasks other instances create in the same instant on PostgreSQL (concurrent creators do not
see each other's uncommitted tasks). It counts the principal's open calls, from any of their clients, of the
tools whose approval others give: their approval tasks, and also any live call of such a tool still open (one
waiting on its approvers in still-waiting rounds, one that `when=` let run unapproved, while it runs). The rate
is kept per instance, in memory: N instances behind a load balancer admit up to N times the rate, and a restart
refills every bucket. Only new approval requests count: an identical call that joins a task still open takes
nothing, and a call refused by the bound takes no token.

The count is one statement over the principal's operations (through the index on principal and client), paid
only when a new approval task is about to be created, which the rate already bounds: it grows with what the
principal's retention keeps, not with other principals' work.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import Final

__all__ = ["ApprovalLimited", "ApprovalLimits", "RequestBucket", "retry_in"]

DEFAULT_OPEN_PER_PRINCIPAL: Final = 20
DEFAULT_REQUESTS_PER_MINUTE: Final = 10.0
DEFAULT_BURST: Final = 10
MAX_TRACKED: Final = 10_000
"""Callers whose buckets are kept at once; full buckets are forgotten first (they hold nothing to remember)."""


@dataclass(frozen=True, slots=True)
class ApprovalLimits:
    """How many approval tasks one principal may have open at once (`open_per_principal`), and how fast they may
    open new ones: `burst` at once, then `requests_per_minute` (a token bucket per principal and instance)."""

    open_per_principal: int = DEFAULT_OPEN_PER_PRINCIPAL
    requests_per_minute: float = DEFAULT_REQUESTS_PER_MINUTE
    burst: int = DEFAULT_BURST

    def __post_init__(self) -> None:
        for name in ("open_per_principal", "burst"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"ApprovalLimits({name}=...) is a positive whole number, got {value!r}")
        rate = self.requests_per_minute
        if isinstance(rate, bool) or not isinstance(rate, int | float) or not math.isfinite(rate) or rate <= 0:
            raise ValueError(f"ApprovalLimits(requests_per_minute=...) is a positive number, got {rate!r}")


class ApprovalLimited(Exception):
    """A new approval request over a limit: the call ends with this text as a tool error, and nothing ran."""

    def __init__(self, why: str, retry: str) -> None:
        super().__init__(f"{why}: nothing ran and no approval was requested. {retry}")


def retry_in(delay: timedelta) -> str:
    """When to try again, in whole seconds (never "0 s")."""
    return f"Try again in {max(1, math.ceil(delay.total_seconds()))} s at the earliest."


@dataclass
class _Bucket:
    tokens: float
    at: datetime


@dataclass
class RequestBucket:
    """A token bucket per principal: `take` spends one token, or says how long until the next one."""

    limits: ApprovalLimits
    _buckets: dict[str, _Bucket] = field(default_factory=dict)

    def take(self, principal_id: str, now: datetime) -> timedelta | None:
        """None when a token was spent; else how long until one is there (nothing was spent)."""
        per_second = self.limits.requests_per_minute / 60
        bucket = self._buckets.get(principal_id)
        if bucket is None:
            self._forget_full(now)
            bucket = self._buckets[principal_id] = _Bucket(float(self.limits.burst), now)
        elapsed = max(0.0, (now - bucket.at).total_seconds())
        bucket.tokens = min(float(self.limits.burst), bucket.tokens + elapsed * per_second)
        bucket.at = now
        if bucket.tokens >= 1:
            bucket.tokens -= 1
            return None
        return timedelta(seconds=(1 - bucket.tokens) / per_second)

    def _forget_full(self, now: datetime) -> None:
        if len(self._buckets) < MAX_TRACKED:
            return
        refill = self.limits.burst * 60 / self.limits.requests_per_minute
        full = [key for key, bucket in self._buckets.items() if (now - bucket.at).total_seconds() >= refill]
        for key in full or list(self._buckets)[: MAX_TRACKED // 10]:
            del self._buckets[key]
