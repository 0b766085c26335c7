"""Sealing the audit trail from the command line: `audit seal`, and the commands that write audit rows.

A command that writes audit rows (`decisions cancel`, `decisions sweep`, `grants revoke`) seals right after,
when the audit's signing keys are set, as a served app would within seconds: a row written while no server runs
is covered at once instead of waiting for a seal by hand. Nothing here prints; the commands say what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from mcp_elicit.model.audit_keys import AuditSigningKeys
from mcp_elicit.settings import Settings
from mcp_elicit.store import Store
from mcp_elicit.store.audit import Anchor


@dataclass
class Sealed:
    rows: int = 0
    checkpoints: int = 0
    last: Anchor | None = None
    unreadable: set[int] = field(default_factory=set)
    """The `seq` of unsealed rows the store cannot read, left unsealed."""


def signing_keys() -> AuditSigningKeys | None:
    """The keys of `MCP_ELICIT_AUDIT_KEYS` (or its `_FILE`), None when it is not set; `SettingsError` when they
    cannot be read."""
    seeds = Settings.read(only=["audit_keys"]).audit_keys
    return None if seeds is None else AuditSigningKeys(seeds)


def seal_all(store: Store, keys: AuditSigningKeys) -> Sealed:
    """Seal by hand until nothing is left (what the checkpoints say of a served app's sealer stays as it was).
    Raises `AuditSealRefused` over a trail edited by hand, `StoreError` when the store cannot be used."""
    sealed = Sealed()
    while True:
        result = store.seal_audit(keys)
        sealed.unreadable.update(result.unreadable)
        if result.anchor is not None:
            sealed.rows, sealed.checkpoints, sealed.last = (
                sealed.rows + result.rows,
                sealed.checkpoints + 1,
                result.anchor,
            )
        if not result.more:
            return sealed
