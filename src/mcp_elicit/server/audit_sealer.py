"""Sealing the audit trail while a server runs: its rows chained and a signed checkpoint every few seconds.

Writers keep inserting audit rows as before; `AuditSealer` calls the store's `seal_audit` every
`checkpoint_interval` (jittered by a fifth, as the sweeper), which chains what was written since and signs a
checkpoint over the heads it moved with the ring's first key (see `mcp_elicit.store.audit`). A backlog (the
rows of a store migrated to schema 11) is sealed batch after batch at once.

Guarantees: while the server's event loop runs, a row is covered by a signed checkpoint within about
`checkpoint_interval` of its commit, and the checkpoints say that a sealer runs (`sealer_running`); when the
app's last lifespan ends, after its background work stopped, the sealer seals once more what was written and
its checkpoint says that it stopped. That last seal runs shielded from the shutdown's cancellation, for at most
`STOP_TIMEOUT`, and while another seal holds the turn (on PostgreSQL, a periodic seal cancelled as the app stops
whose session still holds the lock) it asks again until it gets it: a store that does not answer (PostgreSQL
down, its pool waiting for a connection), or a turn never given, does not hold the shutdown up; what it left
unsealed is logged as a WARNING, and the next seal covers it. The exposure window
is what no checkpoint recorded outside the database (an anchor) covers yet; `mcp-elicit audit verify` fails on
rows left uncovered past its max exposure (10 minutes by default). A seal that fails (the store away) is logged
and tried again at the next tick; on PostgreSQL one instance seals at a time, the others find the seal taken and
skip it, and an instance still running says so again at its next tick after another one stopped.

Each checkpoint's id and root are logged at INFO: a record outside the database that `audit verify --anchor`
takes. The sealer remembers the last checkpoint it signed and refuses (an ERROR, and `refused` says why) to sign
once that checkpoint is gone or changed, or when a head it would extend is not the one the checkpoints signed:
whoever rewrote the trail by hand does not get it signed again. A row the store cannot read is left unsealed
(the rows after it are sealed) and logged as an ERROR by its `seq` at each round; verify names it as edited.
"""

from __future__ import annotations

import logging
import random
from collections.abc import Mapping
from dataclasses import dataclass, field
from datetime import timedelta

import anyio

from mcp_elicit.model.audit_keys import AuditSigningKeys
from mcp_elicit.settings import Settings, SettingsError
from mcp_elicit.store import StoreError
from mcp_elicit.store.aio import AsyncStore
from mcp_elicit.store.audit import SEAL_BATCH, Anchor, AuditSealRefused, SealResult

log = logging.getLogger(__name__)

DEFAULT_CHECKPOINT_INTERVAL = timedelta(seconds=5)
JITTER = 0.2
STOP_TIMEOUT = timedelta(seconds=5)
"""How long the last seal, as the app stops, may take."""
TURN_RETRY = 0.05
"""How long the last seal waits before asking again for a turn another seal holds (on PostgreSQL, a periodic
seal just cancelled whose session has not let the lock go yet)."""


@dataclass(frozen=True, slots=True)
class AuditSealing:
    """The keys that sign the audit's checkpoints, and how often a served app seals (None: only by hand, with
    `mcp-elicit audit seal`)."""

    keys: AuditSigningKeys = field(repr=False)
    checkpoint_interval: timedelta | None = DEFAULT_CHECKPOINT_INTERVAL

    def __post_init__(self) -> None:
        if self.checkpoint_interval is not None and self.checkpoint_interval <= timedelta(0):
            raise ValueError(f"checkpoint_interval must be positive or None, got {self.checkpoint_interval}")

    @classmethod
    def from_env(cls, environ: Mapping[str, str] | None = None) -> AuditSealing | None:
        """Sealing with the keys of `MCP_ELICIT_AUDIT_KEYS` (or its `_FILE`), or None when it is not set."""
        settings = Settings.read(environ, only=["audit_keys"])
        if settings.audit_keys is None:
            return None
        try:
            return cls(AuditSigningKeys(settings.audit_keys))
        except ValueError as error:
            raise SettingsError([f"{settings.origin('audit_keys')}: {error}"]) from None


class AuditSealer:
    """Seals one store every jittered interval for as long as `run` runs, and once more at `stop`."""

    def __init__(
        self,
        store: AsyncStore,
        keys: AuditSigningKeys,
        interval: timedelta,
        *,
        batch: int = SEAL_BATCH,
        stop_timeout: timedelta = STOP_TIMEOUT,
    ) -> None:
        self._store = store
        self._keys = keys
        self._interval = interval.total_seconds()
        self._batch = batch
        self._stop_timeout = stop_timeout.total_seconds()
        self._signed: Anchor | None = None
        self.refused: str | None = None
        """Why the sealer stopped signing (the trail was edited by hand), or None while it signs."""

    def pause(self) -> float:
        return self._interval * random.uniform(1 - JITTER, 1 + JITTER)  # noqa: S311 (spreading, not secrecy)

    async def run(self) -> None:
        while True:
            await anyio.sleep(self.pause())
            await self.seal()

    async def seal(self) -> SealResult | None:
        """Seal until the backlog is gone, saying in the checkpoints that this sealer runs; the last seal's
        result, or None when the store failed or the sealer refused to sign."""
        return await self._seal(running=True)

    async def stop(self) -> SealResult | None:
        """The last round, once `run` stopped: seal what was written since the last one, and say in the
        checkpoints that this sealer stopped; shielded from cancellation, and given up after `stop_timeout`."""
        with anyio.CancelScope(shield=True), anyio.move_on_after(self._stop_timeout):
            return await self._seal(running=False, wait_turn=True)
        since = "no checkpoint of its own" if self._signed is None else f"checkpoint {self._signed}, the last it signed"
        log.warning(
            "the last audit seal of %s did not end (or never got its turn) within %s s: the rows written since %s"
            " are left unsealed until the next seal",
            self._store.sync.display_url, self._stop_timeout, since,
        )  # fmt: skip
        return None

    async def _seal(self, *, running: bool, wait_turn: bool = False) -> SealResult | None:
        if self.refused is not None:
            log.error("not sealing the audit trail of %s: %s", self._store.sync.display_url, self.refused)
            return None
        unreadable: set[int] = set()
        try:
            while True:
                result = await self._store.seal_audit(
                    self._keys, batch=self._batch, extends=self._signed, running=running
                )
                unreadable.update(result.unreadable)
                if wait_turn and not result.turn:
                    await anyio.sleep(TURN_RETRY)
                    continue
                if result.anchor is not None:
                    self._signed = result.anchor
                    log.info("audit checkpoint %s sealed %d rows", result.anchor, result.rows)
                if not result.more:
                    return result
        except AuditSealRefused as error:
            self.refused = str(error)
            log.error("refusing to seal the audit trail of %s: %s", self._store.sync.display_url, error)
            return None
        except StoreError as error:
            log.warning(
                "cannot seal the audit trail of %s (trying again later): %s", self._store.sync.display_url, error
            )
            return None
        finally:
            if unreadable:
                log.error(
                    "audit rows the store cannot read are left unsealed (edited by hand?): seq %s",
                    ", ".join(str(seq) for seq in sorted(unreadable)),
                )
