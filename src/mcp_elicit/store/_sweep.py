"""Sweeps: the clock's expiry of overdue waiting decisions and open operations, set-based, in batches.

Each batch is one transaction that expires up to `SWEEP_BATCH` rows with an audit row each (the engine's
`_expire_due`) and announces them, so calls waiting on one wake now; spent tokens and lapsed idempotency
keys are purged after.
"""

from __future__ import annotations

from abc import abstractmethod
from dataclasses import dataclass
from datetime import datetime

from mcp_elicit.model import SubjectKind
from mcp_elicit.store import hooks
from mcp_elicit.store._core import Core, _committed, _marks
from mcp_elicit.store._decisions import _ENDED
from mcp_elicit.store._engine import Tx
from mcp_elicit.store._schema import WAITING_SQL
from mcp_elicit.store.protocol import SweepResult

SWEEP_BATCH = 1000


@dataclass(frozen=True, slots=True)
class Sweepable:
    """What a sweep needs to know of a table whose waiting rows expire."""

    kind: SubjectKind
    table: str
    id_column: str
    version_column: str
    waiting: str

    def due(self, mark: str = "%s") -> str:
        """The ids of the oldest overdue waiting rows (parameters: now, batch)."""
        return (
            f"SELECT {self.id_column} FROM {self.table} WHERE {self.waiting} AND expires_at <= {mark}"
            f" ORDER BY expires_at, {self.id_column} LIMIT {mark}"
        )


DECISIONS = Sweepable(
    SubjectKind.DECISION, "elicit_decisions", "elicitation_id", "completion_version", f"status IN {WAITING_SQL}"
)
OPERATIONS = Sweepable(SubjectKind.OPERATION, "elicit_operations", "operation_id", "version", "status = 'open'")
SWEEP_REASON = "TTL passed (sweep)"


class SweepCore(Core):
    async def sweep_expired(self) -> SweepResult:
        observer = hooks.installed()
        return await (self._sweep_expired() if observer is None else observer.sweeping(self._sweep_expired))

    async def _sweep_expired(self) -> SweepResult:
        counts = [await self._sweep(sweepable) for sweepable in (DECISIONS, OPERATIONS)]
        async with self._write() as tx:
            stamp = self._to_time(self._clock())
            tokens = await tx.execute("DELETE FROM elicit_tokens WHERE expires_at <= %s", (stamp,))
            keys = await tx.execute("DELETE FROM elicit_idempotency_keys WHERE expires_at <= %s", (stamp,))
        return SweepResult(decisions=counts[0], operations=counts[1], tokens=tokens, keys=keys)

    async def _sweep(self, sweepable: Sweepable) -> int:
        """Expire the table's overdue rows in batches, announcing each so that calls waiting on one wake now.

        An expired operation's claims go with it: nothing can take or renew a claim of an operation that is
        no longer open. A batch that finds another sweep under way (`_sweep_turn`) leaves the rest to it.
        """
        total = 0
        while True:
            async with self._write() as tx:
                if not await self._sweep_turn(tx):
                    return total
                now = self._clock()
                expired = await self._expire_due(tx, sweepable, now, SWEEP_BATCH)
                if expired:
                    _committed(hooks.Expired(sweepable.kind, len(expired)))
                if expired and sweepable is DECISIONS:
                    self._outbox(tx, _ENDED, expired, now)
                if expired and sweepable is OPERATIONS:
                    await tx.execute(
                        f"DELETE FROM elicit_claims WHERE operation_id IN ({_marks(len(expired))})", expired
                    )
                for subject in expired:
                    self._moved(subject)
            total += len(expired)
            if len(expired) < SWEEP_BATCH:
                return total

    async def _sweep_turn(self, tx: Tx) -> bool:
        """Whether this transaction may sweep now; an engine whose write lock does not serialize sweeps says
        no while another one sweeps."""
        return True

    @abstractmethod
    async def _expire_due(self, tx: Tx, sweepable: Sweepable, now: datetime, batch: int) -> list[str]:
        """Expire up to `batch` overdue rows with one audit row each, set-based; return their ids."""
