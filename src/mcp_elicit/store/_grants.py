"""Standing grants: created once per approving decision, looked up in one read, revoked by compare-and-set.

A grant is created only beside the accepted approval it comes from (same principal and client), in the
transaction that may also record that answer; a second creation for the same decision changes nothing. One
grant of a key (principal, client, tool and scope) lets calls through at a time: a new grant replaces the active
grants of its key, which its creation revokes (by the approving principal, "replaced by grant ..."), so the
person's latest answer stands, a listing shows one grant per key, and revoking it asks again. Two approvals of
one key answered together (two calls pending at once) replace in the order they commit: creations of a key take
a lock on it (PostgreSQL; SQLite writes hold the database lock). The
covering grant of a call is one indexed read among the unrevoked grants of its principal, client and tool.
A use is written with the call's first commit: a marker in the operation's journal and the use's audit row,
once per operation, and only while the grant still covers calls (else `GrantEnded`, and nothing is written).
Revocation is an UPDATE on an unrevoked, unexpired row; one that matches nothing says why (`GrantEnded`,
`NotFound`). Every creation, use and revocation is audited under the grant's id (subject kind `grant`).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from mcp_elicit.model import Caller, Grant, GrantKind, JSONObject, Principal, SubjectKind
from mcp_elicit.store._core import BINDING, Core, _binding, _Cells, _decoded, _marks, _quoted
from mcp_elicit.store._decisions import _EPOCH, _cursor, _parse_cursor
from mcp_elicit.store._engine import Tx
from mcp_elicit.store.errors import GrantEnded, NotFound, UnreadableRow
from mcp_elicit.store.protocol import GRANT_JOURNAL, GrantFilter, GrantPage

GRANT_COLUMNS = (
    "grant_id, principal_id, client_id, tool, scope, kind, decision_id, created_at, expires_at, revoked_at, revoked_by"
)
GRANT_NAMES = tuple(GRANT_COLUMNS.split(", "))
_CREATED_NAMES = GRANT_NAMES[: GRANT_NAMES.index("revoked_at")]
_CREATED_COLUMNS = ", ".join(_CREATED_NAMES)
"""What a new grant's row holds: it is created unrevoked (the revocation's columns stay NULL)."""
ACTIVE = "active"
REVOKED = "revoked"
_CREATED = GRANT_NAMES.index("created_at")
_ID_PREFIX = re.compile(r"[0-9a-fA-F-]{1,36}")


class GrantsCore(Core):
    def _grant_row(self, g: Grant) -> tuple[object, ...]:
        t = self._to_time
        return (
            g.grant_id, g.principal_id, g.client_id, g.tool, g.scope, g.kind.value, g.decision_id, t(g.created_at),
            t(g.expires_at), None if g.revoked_at is None else t(g.revoked_at), g.revoked_by,
        )  # fmt: skip

    def _grant(self, row: Sequence[Any]) -> Grant:
        c, t = _Cells("grant", GRANT_NAMES, row), self._from_time
        return Grant(
            grant_id=c.text(0), principal_id=c.text(1), client_id=c.text(2), tool=c.text(3), scope=c.optional_text(4),
            kind=c.choice(5, GrantKind), decision_id=c.text(6), created_at=c.read(7, t), expires_at=c.read(8, t),
            revoked_at=None if row[9] is None else c.read(9, t), revoked_by=c.optional_text(10),
        )  # fmt: skip

    async def _select_grant(self, tx: Tx, grant_id: str, caller: Caller) -> Grant | None:
        where, params = _binding(caller)
        row = await tx.one(f"SELECT {GRANT_COLUMNS} FROM elicit_grants WHERE grant_id = %s{where}", (grant_id, *params))
        return None if row is None else self._grant(row)

    async def create_grant(self, grant: Grant) -> Grant:
        if grant.revoked_at is not None or grant.revoked_by is not None:
            raise ValueError("a grant is created unrevoked")
        if grant.expires_at <= grant.created_at:
            raise ValueError("a grant expires after it is created")
        details: JSONObject = {
            "kind": grant.kind.value,
            "tool": grant.tool,
            "client_id": grant.client_id,
            "scope": grant.scope,
            "decision_id": grant.decision_id,
            "expires_at": grant.expires_at.isoformat(),
        }
        async with self._write() as tx:
            await self._lock_name(tx, f"grant {grant.principal_id} {grant.client_id} {grant.tool} {grant.scope}")
            inserted = await tx.execute(
                f"INSERT INTO elicit_grants ({_CREATED_COLUMNS}) SELECT {_marks(len(_CREATED_NAMES))}"
                " WHERE EXISTS (SELECT 1 FROM elicit_decisions WHERE elicitation_id = %s AND status = 'accepted'"
                f"{BINDING}) ON CONFLICT DO NOTHING",
                (*self._grant_row(grant)[: len(_CREATED_NAMES)], grant.decision_id, grant.principal_id,
                 grant.client_id),
            )  # fmt: skip
            if inserted == 1:
                self._audit(
                    tx, SubjectKind.GRANT, grant.grant_id, None, ACTIVE, grant.principal.actor,
                    f"{grant.kind.value} grant approved in decision {grant.decision_id}", details, grant.created_at,
                )  # fmt: skip
                await self._supersede(tx, grant)
                return grant
            row = await tx.one(
                f"SELECT {GRANT_COLUMNS} FROM elicit_grants WHERE decision_id = %s{BINDING}",
                (grant.decision_id, grant.principal_id, grant.client_id),
            )
        if row is None:
            raise NotFound(f"no accepted approval {grant.decision_id} of this caller to create a grant from")
        return self._grant(row)

    async def _supersede(self, tx: Tx, grant: Grant) -> None:
        """Revoke the other active grants of the new grant's key: the new one stands in their place."""
        now = self._clock()
        stamp = self._to_time(now)
        scoped, values = (" AND scope IS NULL", ()) if grant.scope is None else (" AND scope = %s", (grant.scope,))
        actor = grant.principal.actor
        replaced = await tx.all(
            "UPDATE elicit_grants SET revoked_at = %s, revoked_by = %s WHERE principal_id = %s AND client_id = %s"
            f" AND tool = %s{scoped} AND revoked_at IS NULL AND expires_at > %s AND grant_id <> %s RETURNING grant_id",
            (stamp, actor, grant.principal_id, grant.client_id, grant.tool, *values, stamp, grant.grant_id),
        )
        for (grant_id,) in replaced:
            self._audit(
                tx, SubjectKind.GRANT, str(grant_id), ACTIVE, REVOKED, actor, f"replaced by grant {grant.grant_id}",
                {"tool": grant.tool, "replaced_by": grant.grant_id, "decision_id": grant.decision_id}, now,
            )  # fmt: skip

    async def covering_grant(self, caller: Principal, tool: str, scope: str | None) -> Grant | None:
        scoped, values = (" AND scope IS NULL", ()) if scope is None else (" AND scope = %s", (scope,))
        async with self._read() as tx:
            # The range of elicit_grants_covering: the caller's unrevoked grants of this tool, latest expiry first.
            row = await tx.one(
                f"SELECT {GRANT_COLUMNS} FROM elicit_grants WHERE principal_id = %s AND client_id = %s AND tool = %s"
                f" AND revoked_at IS NULL AND expires_at > %s{scoped} ORDER BY expires_at DESC, grant_id LIMIT 1",
                (caller.principal_id, caller.client_id, tool, self._to_time(self._clock()), *values),
            )
        return None if row is None else self._grant(row)

    async def grant_used(self, grant: Grant, operation_id: str, *, caller: Principal) -> bool:
        now = self._clock()
        stamp = self._to_time(now)
        async with self._write() as tx:
            inserted = await tx.execute(
                "INSERT INTO elicit_journal (operation_id, name, value, recorded_at) SELECT %s, %s, %s, %s"
                f" WHERE EXISTS (SELECT 1 FROM elicit_operations WHERE operation_id = %s{BINDING})"
                " AND EXISTS (SELECT 1 FROM elicit_grants WHERE grant_id = %s AND principal_id = %s"
                " AND client_id = %s AND tool = %s AND revoked_at IS NULL AND expires_at > %s)"
                " ON CONFLICT (operation_id, name) DO NOTHING",
                (operation_id, GRANT_JOURNAL, self._to_json(grant.grant_id), stamp, operation_id, caller.principal_id,
                 caller.client_id, grant.grant_id, caller.principal_id, caller.client_id, grant.tool, stamp),
            )  # fmt: skip
            if inserted == 1:
                self._audit(
                    tx, SubjectKind.GRANT, grant.grant_id, ACTIVE, ACTIVE, caller.actor,
                    f"let a call of {grant.tool} through without asking", {"operation_id": operation_id}, now,
                )  # fmt: skip
                return True
            current = await self._select_grant(tx, grant.grant_id, caller)
            if current is None or current.tool != grant.tool:
                raise NotFound(f"no grant {grant.grant_id} of this caller for {grant.tool}")
            ended = None if current.covers(caller, grant.tool, current.scope, now) else GrantEnded(current)
            if ended is None and await self._select_operation(tx, operation_id, caller) is None:
                raise NotFound(f"no operation {operation_id}")
        if ended is not None:
            raise ended
        return False

    async def get_grant(self, grant_id: str, caller: Caller) -> Grant:
        async with self._read() as tx:
            grant = await self._select_grant(tx, grant_id, caller)
        if grant is None:
            raise NotFound(f"no grant {grant_id}")
        return grant

    async def grant_page(
        self, caller: Caller, where: GrantFilter | None = None, *, after: str | None = None, limit: int = 100
    ) -> GrantPage:
        if limit < 1:
            raise ValueError(f"limit must be at least 1, got {limit}")
        found = self._grant_filter(caller, where or GrantFilter(), after)
        rows: list[Any] = []
        if found is not None:
            clauses, values = found
            async with self._read() as tx:
                # The order is the elicit_grants_newest index's, so a page reads its own rows and no others.
                rows = await tx.all(
                    f"SELECT {GRANT_COLUMNS} FROM elicit_grants WHERE 1 = 1{clauses}"
                    " ORDER BY created_at DESC, grant_id LIMIT %s",
                    (*values, limit + 1),
                )
        unreadable: list[UnreadableRow] = []
        grants = _decoded(rows[:limit], self._grant, unreadable.append)
        last = rows[limit - 1] if len(rows) > limit else None
        return GrantPage(grants, unreadable, None if last is None else _cursor(last[_CREATED], last[0]))

    def _grant_filter(self, caller: Caller, where: GrantFilter, after: str | None) -> tuple[str, list[object]] | None:
        """The clauses to append to `WHERE 1 = 1`, and their values; `None` when no grant can match."""
        if where.id_prefix is not None and not _ID_PREFIX.fullmatch(where.id_prefix):
            return None
        binding, params = _binding(caller)
        clauses: list[str] = [binding] if binding else []
        values: list[object] = list(params)
        if where.principal_id is not None:
            clauses.append(" AND principal_id = %s")
            values.append(where.principal_id)
        if where.id_prefix is not None:
            clauses.append(" AND grant_id LIKE %s")
            values.append(where.id_prefix.lower() + "%")
        if where.active:
            clauses.append(" AND revoked_at IS NULL AND expires_at > %s")
            values.append(self._to_time(self._clock()))
        if after is not None:
            try:
                created, grant_id = _parse_cursor(after)
            except ValueError:
                raise ValueError(f"{_quoted(after)} is not a cursor of a grant listing") from None
            if not self._raw_cursor_keys and (type(created) is not int or not isinstance(grant_id, str)):
                raise ValueError(f"{_quoted(after)} is not a cursor of a grant listing")
            if type(created) is int:
                created = self._time_of_cursor(created, after)
            clauses.append(" AND created_at <= %s AND (created_at < %s OR grant_id > %s)")
            values.extend((created, created, grant_id))
        return "".join(clauses), values

    def _time_of_cursor(self, microseconds: int, cursor: str) -> object:
        try:
            return self._to_time(_EPOCH + timedelta(microseconds=microseconds))
        except OverflowError:
            raise ValueError(f"{_quoted(cursor)} is not a cursor of a grant listing") from None

    async def revoke_grant(self, grant_id: str, *, caller: Caller, reason: str = "") -> Grant:
        now = self._clock()
        stamp = self._to_time(now)
        where, params = _binding(caller)
        async with self._write() as tx:
            row = await tx.one(
                "UPDATE elicit_grants SET revoked_at = %s, revoked_by = %s WHERE grant_id = %s"
                f" AND revoked_at IS NULL AND expires_at > %s{where} RETURNING {GRANT_COLUMNS}",
                (stamp, caller.actor, grant_id, stamp, *params),
            )
            if row is not None:
                revoked = self._grant(row)
                self._audit(
                    tx, SubjectKind.GRANT, grant_id, ACTIVE, REVOKED, caller.actor, reason or "revoked",
                    {"tool": revoked.tool, "principal_id": revoked.principal_id, "client_id": revoked.client_id},
                    now,
                )  # fmt: skip
                return revoked
            current = await self._select_grant(tx, grant_id, caller)
        if current is None:
            raise NotFound(f"no grant {grant_id}")
        raise GrantEnded(current)
