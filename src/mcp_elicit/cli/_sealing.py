"""Sealing the audit trail from the command line: `audit seal`, and the commands that write audit rows.

`audit seal` seals every unsealed row: the operator asks for it. A command that writes audit rows (`decisions
cancel`, `decisions sweep`, `grants revoke`) seals right after, when the audit's signing keys are set, as a
served app would within seconds, but only the rows it can vouch for: those written after the mark it took
before writing (`Store.last_audit_seq`). While any unsealed row comes from before the mark it seals nothing: such
a row may be one a checkpoint covered, unsealed and edited by hand after the latest checkpoints were deleted,
and signing it would hide the edit. The command says so, and exits 3, when that row is older than the command by
more than `SLACK` (rows a running server wrote just before are its sealer's to cover, with the command's own).
Nothing here prints; the commands say what happened.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import timedelta

from mcp_elicit.model.audit_keys import AuditSigningKeys
from mcp_elicit.store import Store
from mcp_elicit.store.audit import Anchor, EarlierRows

SLACK = timedelta(seconds=5)
"""How much older than a writing command an unsealed row may be and still pass for a running server's."""


@dataclass
class Sealed:
    rows: int = 0
    checkpoints: int = 0
    last: Anchor | None = None
    unreadable: set[int] = field(default_factory=set)
    """The `seq` of unsealed rows the store cannot read, left unsealed."""
    earlier: EarlierRows | None = None
    """Unsealed rows from before the mark sealed after: nothing more was sealed."""


def seal_all(store: Store, keys: AuditSigningKeys, *, written_after: int | None = None) -> Sealed:
    """Seal by hand until nothing is left (what the checkpoints say of a served app's sealer stays as it was), or,
    `written_after` a mark, until an unsealed row from before it stops the sealing. Raises `AuditSealRefused`
    over a trail edited by hand, `StoreError` when the store cannot be used."""
    sealed = Sealed()
    while True:
        result = store.seal_audit(keys, written_after=written_after)
        sealed.unreadable.update(result.unreadable)
        sealed.earlier = result.earlier
        if result.anchor is not None:
            sealed.rows, sealed.checkpoints, sealed.last = (
                sealed.rows + result.rows,
                sealed.checkpoints + 1,
                result.anchor,
            )
        if not result.more:
            return sealed
